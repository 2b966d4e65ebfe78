// Package testservice is a small Parley service (Parley Protocol v1) for
// tests: a shop served over the HTTP bridge (§2.4) that checks grants and
// proofs with package grant exactly as a real service must. It is what the
// end-to-end tests present the daemon's grants to, so that "the grant works"
// means a service accepted it, not that it decodes.
//
// # What it implements
//
//   - HELLO, and GET on the endpoint or /.well-known/parley: the BRIEF.
//   - ASK shop.status: an ANSWER.
//   - INTENT shop.order and shop.gift: one proposal (§5.1) with its hash,
//     bound to the holder key of the INTENT's proof and its principal (§4.4).
//   - COMMIT: the hash must match (conflict otherwise, §4.4); the grants must
//     authorize it (grant.Verify), which yields consent_required with the
//     consent object of §6.6 when only per, spend or risk caveats stand in the
//     way; spend is reserved against every spend block atomically with the
//     check (§6.3); a repeated COMMIT replays the receipt (§4.4).
//   - UNDO within the window, authorized by a grant of the same principal.
//
// Every request but HELLO needs grants and a proof (§3: a service MAY require
// them for ASK and INTENT; this one does). It keeps everything in memory and
// has no auto INTENT (§4.3.1) and no EXPAND.
package testservice

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
)

// maxFrame is the largest request the bridge reads (§2.1).
const maxFrame = 1 << 20

// Config describes one service.
type Config struct {
	// ID is the service id of the BRIEF (§4.1), which proofs are bound to.
	ID string
	// Principals are the principal keys whose grants the service trusts
	// (§6.4 step 4).
	Principals []string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Service is a Parley shop. It is safe for concurrent use.
type Service struct {
	cfg Config

	// mu serializes every request that reads or changes state, which makes
	// the authorization check and the spend reservation one atomic step
	// (§6.3).
	mu        sync.Mutex
	seq       int
	proposals map[string]*proposal
	receipts  map[string]*receipt
	spent     map[string]int64 // block id → committed spend, minor units
}

type proposal struct {
	raw        json.RawMessage // exactly as sent in PROPOSALS
	p          *grant.Proposal
	holder     string // the proof key of the INTENT (§4.4 who may commit)
	principal  string // the root issuer of the grant that authorized it
	receipt    string // set once committed
	commitRoot string
}

type receipt struct {
	raw        json.RawMessage
	capability string
	principal  string
	until      int64 // 0 when it cannot be undone
	undoneBy   json.RawMessage
}

// New returns a service with cfg.
func New(cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg, proposals: map[string]*proposal{}, receipts: map[string]*receipt{}, spent: map[string]int64{}}
}

// Spent returns the committed spend attributed to block id, in minor units.
func (s *Service) Spent(blockID string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spent[blockID]
}

// capability is one entry of the BRIEF.
type capability struct {
	Name    string            `json:"name"`
	Kind    string            `json:"kind"`
	Summary string            `json:"summary"`
	Params  map[string]string `json:"params,omitempty"`
	Risk    string            `json:"risk,omitempty"`
}

var capabilities = []capability{
	{Name: "shop.status", Kind: "ask", Summary: "Say whether the shop is open and how many orders you placed."},
	{Name: "shop.order", Kind: "intent", Summary: "Buy one item, charged to the card on file.", Risk: "low",
		Params: map[string]string{"item": "string", "price": "int — minor units", "currency": "string — such as USD"}},
	{Name: "shop.gift", Kind: "intent", Summary: "Send a gift card by e-mail.", Risk: "low",
		Params: map[string]string{"to": "string — e-mail", "price": "int — minor units", "currency": "string"}},
}

func capabilityKind(name string) string {
	for _, c := range capabilities {
		if c.Name == name {
			return c.Kind
		}
	}
	return ""
}

// request is the part of a request frame the service reads (§2.1, §3, §4).
type request struct {
	Parley     int             `json:"parley"`
	ID         string          `json:"id"`
	Verb       string          `json:"verb"`
	Capability string          `json:"capability"`
	Params     json.RawMessage `json:"params"`
	Proposal   string          `json:"proposal"`
	Hash       string          `json:"hash"`
	Receipt    string          `json:"receipt"`
	Grants     []string        `json:"grants"`
	Proof      *grant.Proof    `json:"proof"`
}

// reply is a reply frame; fields a kind does not use stay empty.
type reply struct {
	Parley       int             `json:"parley"`
	ID           string          `json:"id"`
	Re           string          `json:"re"`
	Kind         string          `json:"kind"`
	Service      any             `json:"service,omitempty"`
	Capabilities []capability    `json:"capabilities,omitempty"`
	Data         any             `json:"data,omitempty"`
	Proposals    []any           `json:"proposals,omitempty"`
	Receipt      json.RawMessage `json:"receipt,omitempty"`
	Replay       bool            `json:"replay,omitempty"`
	// ERROR (§7)
	Code    string                `json:"code,omitempty"`
	Message string                `json:"message,omitempty"`
	Need    []grant.Caveat        `json:"need,omitempty"`
	Consent *grant.ConsentRequest `json:"consent,omitempty"`
}

// refusal is an ERROR reply in the making.
type refusal struct {
	code      string
	message   string
	need      []grant.Caveat
	consent   *grant.ConsentRequest
	principal string // for consent_required: whose consent is needed
}

func refuse(code, format string, args ...any) *refusal {
	return &refusal{code: code, message: fmt.Sprintf(format, args...)}
}

// ServeHTTP implements the HTTP bridge (§2.4): POST one request frame, get
// one NDJSON final reply with status 200; GET returns the BRIEF.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(s.brief(""))
		return
	case http.MethodPost:
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "use GET or POST", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxFrame))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		// §2.1: a frame over 1 MiB is refused without being buffered whole.
		http.Error(w, "frame larger than 1 MiB", http.StatusRequestEntityTooLarge)
		return
	}
	if err != nil {
		http.Error(w, "cannot read the body", http.StatusBadRequest)
		return
	}
	out := s.Handle(body)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Write(append(out, '\n'))
}

// Handle answers one request frame with one reply frame (without the
// newline). Parley errors are replies too (§2.4).
func (s *Service) Handle(frame []byte) []byte {
	var req request
	var rep *reply
	if err := json.Unmarshal(frame, &req); err != nil || req.Parley != 1 || req.ID == "" {
		rep = s.errorReply("", refuse("bad_frame", "the request is not a Parley v1 frame with an id"))
	} else {
		rep = s.dispatch(&req)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		b, _ = json.Marshal(s.errorReply(req.ID, refuse("internal", "the reply cannot be encoded")))
	}
	return b
}

func (s *Service) dispatch(req *request) *reply {
	var rep *reply
	var rf *refusal
	switch req.Verb {
	case "HELLO":
		rep = s.brief(req.ID)
	case "ASK":
		rep, rf = s.ask(req)
	case "INTENT":
		rep, rf = s.intent(req)
	case "COMMIT":
		rep, rf = s.commit(req)
	case "UNDO":
		rep, rf = s.undo(req)
	default:
		rf = refuse("bad_frame", "unknown verb %q", req.Verb)
	}
	if rf != nil {
		return s.errorReply(req.ID, rf)
	}
	rep.Parley, rep.Re = 1, req.ID
	rep.ID = s.nextID("s")
	return rep
}

func (s *Service) nextID(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nextIDLocked(prefix)
}

func (s *Service) nextIDLocked(prefix string) string {
	s.seq++
	return prefix + strconv.Itoa(s.seq)
}

func (s *Service) brief(re string) *reply {
	return &reply{Parley: 1, ID: s.nextID("s"), Re: re, Kind: "BRIEF",
		Service:      map[string]string{"id": s.cfg.ID, "name": "Test shop", "summary": "Buy things and send gift cards."},
		Capabilities: capabilities}
}

func (s *Service) errorReply(re string, rf *refusal) *reply {
	return &reply{Parley: 1, ID: s.nextID("s"), Re: re, Kind: "ERROR", Code: rf.code, Message: rf.message,
		Need: rf.need, Consent: rf.consent}
}

// authorizeLocked checks the proof (§6.5) and the grants (§6.4) of req for
// verb on target and capability. prop is the proposal of a COMMIT.
func (s *Service) authorizeLocked(req *request, verb, target, capability string, prop *grant.Proposal) (*grant.Result, *refusal) {
	if len(req.Grants) == 0 || req.Proof == nil {
		return nil, refuse("unauthorized", "%s here needs grants and a proof of possession", verb)
	}
	now := s.cfg.Now().Unix()
	// A leaked grant alone is useless: the proof binds the holder key to
	// this service, verb and target, within ±300 s (§6.5).
	if err := grant.VerifyProof(*req.Proof, s.cfg.ID, verb, target, now); err != nil {
		return nil, fromGrantError(err)
	}
	spent := make(map[string]int64, len(s.spent))
	for k, v := range s.spent {
		spent[k] = v
	}
	res, err := grant.Verify(req.Grants, s.cfg.Principals, grant.Context{Service: s.cfg.ID, Verb: verb,
		Capability: capability, Now: now, ProofKey: req.Proof.Key, Proposal: prop, Spent: spent})
	if err != nil {
		return nil, fromGrantError(err)
	}
	return res, nil
}

func fromGrantError(err error) *refusal {
	var ge *grant.Error
	if !errors.As(err, &ge) {
		return refuse("internal", "%v", err)
	}
	return &refusal{code: ge.Code, message: ge.Message, need: ge.Need, principal: ge.Principal}
}

func (s *Service) ask(req *request) (*reply, *refusal) {
	if capabilityKind(req.Capability) != "ask" {
		return nil, refuse("unknown_capability", "no ask capability %q", req.Capability)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, rf := s.authorizeLocked(req, "ASK", req.Capability, req.Capability, nil); rf != nil {
		return nil, rf
	}
	orders := 0
	for _, p := range s.proposals {
		if p.receipt != "" && p.holder == req.Proof.Key {
			orders++
		}
	}
	return &reply{Kind: "ANSWER", Data: map[string]any{"open": true, "orders": orders}}, nil
}

// intentParams are the params of shop.order and shop.gift.
type intentParams struct {
	Item     string `json:"item"`
	To       string `json:"to"`
	Price    int64  `json:"price"`
	Currency string `json:"currency"`
}

func (s *Service) intent(req *request) (*reply, *refusal) {
	if capabilityKind(req.Capability) != "intent" {
		return nil, refuse("unknown_capability", "no intent capability %q", req.Capability)
	}
	var ip intentParams
	if err := json.Unmarshal(req.Params, &ip); err != nil || ip.Price < 0 || ip.Price > 1<<53-1 || ip.Currency == "" {
		return nil, refuse("invalid_params", "params need price (int, minor units, not negative) and currency")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	res, rf := s.authorizeLocked(req, "INTENT", req.Capability, req.Capability, nil)
	if rf != nil {
		return nil, rf
	}
	now := s.cfg.Now().Unix()
	id := s.nextIDLocked("p_")
	cost := &grant.Money{Amount: ip.Price, Currency: ip.Currency}
	var summary string
	var effects []grant.Effect
	if req.Capability == "shop.order" {
		summary = fmt.Sprintf("Buy %s for %s", ip.Item, cost)
		effects = []grant.Effect{
			{Op: "charge", Target: "card/visa-4242", Detail: cost.String()},
			{Op: "create", Target: "order/" + id, Detail: ip.Item},
		}
	} else {
		summary = fmt.Sprintf("Send a %s gift card to %s", cost, ip.To)
		effects = []grant.Effect{
			{Op: "charge", Target: "card/visa-4242", Detail: cost.String()},
			{Op: "send", Target: ip.To, Detail: "gift card"},
		}
	}
	p := grant.Proposal{ID: id, Capability: req.Capability, Summary: summary, Effects: effects, Cost: cost,
		Risk: "low", Undo: &grant.Undo{Window: 3600},
		// §5.1: whole minutes, rounded up.
		Expires: (now + 600 + 59) / 60 * 60}
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, refuse("internal", "cannot encode the proposal")
	}
	p.Hash, err = grant.ProposalHash(raw)
	if err != nil {
		return nil, refuse("internal", "cannot hash the proposal: %v", err)
	}
	if raw, err = json.Marshal(p); err != nil {
		return nil, refuse("internal", "cannot encode the proposal")
	}
	s.proposals[id] = &proposal{raw: raw, p: &p, holder: req.Proof.Key, principal: res.Issuer}
	return &reply{Kind: "PROPOSALS", Proposals: []any{json.RawMessage(raw)}}, nil
}

func (s *Service) commit(req *request) (*reply, *refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pr := s.proposals[req.Proposal]
	if pr == nil {
		return nil, refuse("not_found", "no proposal %q", req.Proposal)
	}
	if req.Hash != pr.p.Hash {
		// §4.4: a mismatch is a conflict, and the error does not reveal
		// the right hash, so an agent cannot commit what nobody saw.
		return nil, refuse("conflict", "the hash does not match proposal %s; re-run INTENT and review it again", req.Proposal)
	}
	now := s.cfg.Now().Unix()
	// §4.4 who may commit: only the key that proved itself on the INTENT,
	// so that nobody can prepare effects of their choosing for another
	// agent to commit.
	if req.Proof == nil || req.Proof.Key != pr.holder {
		return nil, refuse("unauthorized", "proposal %s was prepared for another agent key", req.Proposal)
	}
	if pr.receipt != "" {
		// §4.4 replay: authorized like a commit, except that per, spend
		// and risk are not evaluated again.
		res, rf := s.authorizeLocked(req, "COMMIT", pr.p.Hash, pr.p.Capability,
			&grant.Proposal{Hash: pr.p.Hash, Risk: "low"})
		if rf != nil {
			return nil, rf
		}
		if res.Issuer != pr.commitRoot {
			return nil, refuse("unauthorized", "the grant is from another principal than the commit's")
		}
		return &reply{Kind: "RECEIPT", Receipt: s.receipts[pr.receipt].raw, Replay: true}, nil
	}
	if now >= pr.p.Expires {
		return nil, refuse("expired", "proposal %s expired; re-run INTENT", req.Proposal)
	}
	res, rf := s.authorizeLocked(req, "COMMIT", pr.p.Hash, pr.p.Capability, pr.p)
	if rf != nil {
		if rf.code == "consent_required" {
			rf.consent = &grant.ConsentRequest{Proposal: pr.p.ID, Hash: pr.p.Hash, Service: s.cfg.ID,
				Capability: pr.p.Capability, Principal: rf.principal,
				Summary: pr.p.Summary, Expires: pr.p.Expires}
			rf.message = "this commit needs the principal's consent: " + rf.message
		}
		return nil, rf
	}
	if res.Issuer != pr.principal {
		return nil, refuse("unauthorized", "proposal %s was prepared under another principal's grant", req.Proposal)
	}
	// §6.3: reserve the cost against every spend block in the same
	// critical section as the check, so concurrent commits cannot together
	// pass a cap. Execution cannot fail here, so nothing is released.
	if pr.p.Cost != nil {
		for _, b := range res.SpendBlocks {
			s.spent[b] += pr.p.Cost.Amount
		}
	}
	rid := s.nextIDLocked("r_")
	rc := map[string]any{"id": rid, "proposal": pr.p.ID, "capability": pr.p.Capability, "summary": pr.p.Summary,
		"at": now, "effects": pr.p.Effects, "cost": pr.p.Cost, "result": map[string]any{"order": "order/" + pr.p.ID}}
	until := int64(0)
	if pr.p.Undo != nil {
		until = now + pr.p.Undo.Window
		rc["undo"] = map[string]int64{"until": until}
	} else {
		rc["undo"] = nil
	}
	raw, err := json.Marshal(rc)
	if err != nil {
		return nil, refuse("internal", "cannot encode the receipt")
	}
	s.receipts[rid] = &receipt{raw: raw, capability: pr.p.Capability, principal: res.Issuer, until: until}
	pr.receipt, pr.commitRoot = rid, res.Issuer
	return &reply{Kind: "RECEIPT", Receipt: raw}, nil
}

func (s *Service) undo(req *request) (*reply, *refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rc := s.receipts[req.Receipt]
	if rc == nil {
		return nil, refuse("not_found", "no receipt %q", req.Receipt)
	}
	// §6.3: for UNDO, can is checked against the receipt's capability.
	res, rf := s.authorizeLocked(req, "UNDO", req.Receipt, rc.capability, nil)
	if rf != nil {
		return nil, rf
	}
	if res.Issuer != rc.principal {
		return nil, refuse("unauthorized", "UNDO needs a grant from the principal of the original commit")
	}
	if rc.undoneBy != nil {
		return &reply{Kind: "RECEIPT", Receipt: rc.undoneBy, Replay: true}, nil
	}
	now := s.cfg.Now().Unix()
	if rc.until == 0 || now > rc.until {
		return nil, refuse("expired", "receipt %s can no longer be undone", req.Receipt)
	}
	rid := s.nextIDLocked("r_")
	raw, err := json.Marshal(map[string]any{"id": rid, "undoes": req.Receipt, "capability": rc.capability,
		"summary": "Reversed " + req.Receipt, "at": now, "effects": []any{}, "cost": nil, "undo": nil})
	if err != nil {
		return nil, refuse("internal", "cannot encode the receipt")
	}
	rc.undoneBy = raw
	return &reply{Kind: "RECEIPT", Receipt: raw}, nil
}
