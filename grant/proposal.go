package grant

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/parley-keyd/parley-keyd/grant/internal/jsontext"
)

// Proposal is a service's plan in answer to an INTENT (§5.1), as
// ParseProposal read it. Unknown fields are ignored (§2.1), but they are
// covered by the hash.
//
// A Proposal from ParseProposal also keeps what its hash covers and the
// hash itself, computed once from the same parse as every field: so the
// hash a consent is checked against, the facts a policy decides on and the
// lines a human is shown cannot come from different readings of the bytes
// (DESIGN.md property 9). Changing a field afterwards changes neither.
type Proposal struct {
	ID         string          `json:"id"`
	Capability string          `json:"capability"`
	Summary    string          `json:"summary"`
	Effects    []Effect        `json:"effects"`
	Cost       *Money          `json:"cost"`
	Risk       string          `json:"risk"`
	Undo       *Undo           `json:"undo"`
	Expires    int64           `json:"expires"`
	Hash       string          `json:"hash,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`

	hashed []byte         // canonical(proposal without hash and data) (§5.1)
	shown  map[string]any // the same, as parsed, for the display
	hash   string         // b64url(sha256(hashed))
}

// Effect is one principal-observable change a commit will cause (§5.1).
// From and To are scalars: nil, bool, string or an integer json.Number.
type Effect struct {
	Op     string `json:"op"`
	Target string `json:"target"`
	Field  string `json:"field,omitempty"`
	From   any    `json:"from,omitempty"`
	To     any    `json:"to,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// Undo is a proposal's undo window in seconds from commit.
type Undo struct {
	Window int64 `json:"window"`
}

// The member names of a proposal and its parts (§5.1), which a member name
// may not resemble in another case.
var (
	proposalNames = []string{"id", "capability", "summary", "effects", "cost", "risk", "undo", "expires", "hash", "data"}
	effectNames   = []string{"op", "target", "field", "from", "to", "detail"}
	moneyNames    = []string{"amount", "currency"}
	undoNames     = []string{"window"}
)

// The effect ops of §5.1.
var effectOps = map[string]bool{
	"create": true, "update": true, "delete": true, "send": true, "charge": true, "other": true,
}

// caveatHash returns the hash an only caveat is checked against (see
// Context.Proposal).
func (p *Proposal) caveatHash() string {
	if p.hash != "" {
		return p.hash
	}
	return p.Hash
}

// Hashed returns what ParseProposal computed from the proposal's content:
// canonical(proposal without "hash" and "data") (§5.1, §10), the bytes
// the hash covers, and the hash of §5.1, b64url(sha256(those bytes)). For
// a Proposal that ParseProposal did not return they are nil and "".
func (p *Proposal) Hashed() (canonical []byte, hash string) {
	return append([]byte(nil), p.hashed...), p.hash
}

// ProposalHash returns b64url(sha256(canonical(proposal without "hash" and
// "data"))) for a proposal given as JSON (§5.1). It reads raw as
// ParseProposal does but checks only what the hash needs: one JSON object,
// no duplicate names, valid UTF-8, and no non-integer number outside data.
func ProposalHash(raw []byte) (string, error) {
	m, _, err := parseProposalObject(raw)
	if err != nil {
		return "", err
	}
	_, h, err := hashProposalMap(m)
	return h, err
}

// parseProposalObject reads a proposal with DecodeStrict's rules into a
// map of parsed values, and returns the exact bytes of its data member.
func parseProposalObject(raw []byte) (map[string]any, []byte, error) {
	m, data, err := jsontext.StrictObject(raw, "data")
	if err != nil {
		return nil, nil, fmt.Errorf("proposal: %w", err)
	}
	return m, data, nil
}

// hashProposalMap returns canonical(m without hash and data), the same as
// a map, and its hash (§5.1).
func hashProposalMap(m map[string]any) ([]byte, string, error) {
	rest := make(map[string]any, len(m))
	for k, v := range m {
		if k != "hash" && k != "data" {
			rest[k] = v
		}
	}
	c, err := canonical(rest)
	if err != nil {
		return nil, "", fmt.Errorf("proposal: %w", err)
	}
	sum := sha256.Sum256(c)
	return c, b64.EncodeToString(sum[:]), nil
}

// ParseProposal reads a proposal (§5.1) once, by DecodeStrict's rules, and
// checks its shape: id and capability non-empty strings; summary a string;
// effects a list whose ops are create, update, delete, send, charge or
// other, with string target, field and detail and scalar from and to; cost
// null or {amount: int, currency: string}; risk low, medium or high; undo
// null or {window: int ≥ 0}; expires an integer; and no non-integer number
// anywhere but in data, so that the proposal can be hashed. A member whose
// name differs from one of these only in case ("Cost" beside "cost") is
// refused: a reader that folds case would see another proposal.
// Other unknown members are kept for the hash only.
//
// From that one parse it computes the hash and keeps the bytes the hash
// covers (Hashed) and what Display shows.
func ParseProposal(raw []byte) (*Proposal, error) {
	m, data, err := parseProposalObject(raw)
	if err != nil {
		return nil, err
	}
	if err := checkProposalNames(m); err != nil {
		return nil, fmt.Errorf("proposal: %w", err)
	}
	if err := checkProposalShape(m); err != nil {
		return nil, fmt.Errorf("proposal: %w", err)
	}
	hashed, h, err := hashProposalMap(m)
	if err != nil {
		return nil, err
	}
	p := proposalFromMap(m)
	p.Data = data
	p.hashed, p.hash = hashed, h
	p.shown = make(map[string]any, len(m))
	for k, v := range m {
		if k != "hash" && k != "data" {
			p.shown[k] = v
		}
	}
	return p, nil
}

// checkProposalNames refuses a member name that differs from a name of
// §5.1 only in case, at the top level and in effects, cost and undo.
func checkProposalNames(m map[string]any) error {
	if err := exactNames(m, proposalNames, ""); err != nil {
		return err
	}
	if effects, ok := m["effects"].([]any); ok {
		for i, e := range effects {
			if em, ok := e.(map[string]any); ok {
				if err := exactNames(em, effectNames, fmt.Sprintf("effects[%d]", i)); err != nil {
					return err
				}
			}
		}
	}
	if c, ok := m["cost"].(map[string]any); ok {
		if err := exactNames(c, moneyNames, "cost"); err != nil {
			return err
		}
	}
	if u, ok := m["undo"].(map[string]any); ok {
		if err := exactNames(u, undoNames, "undo"); err != nil {
			return err
		}
	}
	return nil
}

// exactNames returns a jsontext.ErrNameCase error for the first name of m, in code
// point order, that is not in known but differs from one of them only in
// case.
func exactNames(m map[string]any, known []string, path string) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if slices.Contains(known, k) {
			continue
		}
		for _, kn := range known {
			if jsontext.FoldName(k) == jsontext.FoldName(kn) || strings.EqualFold(k, kn) {
				return &jsontext.StrictError{Path: path, Name: k, Known: kn, Err: jsontext.ErrNameCase}
			}
		}
	}
	return nil
}

// proposalFromMap fills a Proposal from a map that checkProposalShape
// accepted.
func proposalFromMap(m map[string]any) *Proposal {
	p := &Proposal{
		ID:         m["id"].(string),
		Capability: m["capability"].(string),
		Summary:    m["summary"].(string),
		Risk:       m["risk"].(string),
	}
	p.Expires, _ = intField(m, "expires")
	p.Hash, _ = m["hash"].(string)
	effects := m["effects"].([]any)
	p.Effects = make([]Effect, len(effects))
	for i, e := range effects {
		em := e.(map[string]any)
		ef := &p.Effects[i]
		ef.Op, _ = em["op"].(string)
		ef.Target, _ = em["target"].(string)
		ef.Field, _ = em["field"].(string)
		ef.Detail, _ = em["detail"].(string)
		ef.From, ef.To = em["from"], em["to"]
	}
	if c, ok := m["cost"].(map[string]any); ok {
		amount, _ := intField(c, "amount")
		p.Cost = &Money{Amount: amount, Currency: c["currency"].(string)}
	}
	if u, ok := m["undo"].(map[string]any); ok {
		w, _ := intField(u, "window")
		p.Undo = &Undo{Window: w}
	}
	return p
}

func checkProposalShape(m map[string]any) error {
	for _, k := range []string{"id", "capability"} {
		if s, ok := m[k].(string); !ok || s == "" {
			return fmt.Errorf("%s: want a non-empty string", k)
		}
	}
	if _, ok := m["summary"].(string); !ok {
		return errors.New("summary: want a string")
	}
	effects, ok := m["effects"].([]any)
	if !ok {
		return errors.New("effects: want a list")
	}
	for i, e := range effects {
		em, ok := e.(map[string]any)
		if !ok {
			return fmt.Errorf("effects[%d]: want an object", i)
		}
		if op, _ := em["op"].(string); !effectOps[op] {
			return fmt.Errorf("effects[%d].op: want create, update, delete, send, charge or other", i)
		}
		if _, ok := em["target"].(string); !ok {
			return fmt.Errorf("effects[%d].target: want a string", i)
		}
		for _, k := range []string{"field", "detail"} {
			if x, present := em[k]; present {
				if _, ok := x.(string); !ok {
					return fmt.Errorf("effects[%d].%s: want a string", i, k)
				}
			}
		}
		for _, k := range []string{"from", "to"} {
			switch em[k].(type) {
			case nil, bool, string, json.Number:
			default:
				return fmt.Errorf("effects[%d].%s: want a scalar", i, k)
			}
		}
	}
	switch c := m["cost"].(type) {
	case nil:
		if _, present := m["cost"]; !present {
			return errors.New("cost: missing (use null for free)")
		}
	case map[string]any:
		if _, err := intField(c, "amount"); err != nil {
			return fmt.Errorf("cost.%w", err)
		}
		if _, ok := c["currency"].(string); !ok {
			return errors.New("cost.currency: want a string")
		}
	default:
		return errors.New("cost: want null or {amount, currency}")
	}
	if r, _ := m["risk"].(string); r == "" {
		return errors.New("risk: want low, medium or high")
	} else if _, ok := riskRank(r); !ok {
		return fmt.Errorf("risk: %q is not low, medium or high", r)
	}
	switch u := m["undo"].(type) {
	case nil:
		if _, present := m["undo"]; !present {
			return errors.New("undo: missing (use null when irreversible)")
		}
	case map[string]any:
		w, err := intField(u, "window")
		if err != nil {
			return fmt.Errorf("undo.%w", err)
		}
		if w < 0 {
			return errors.New("undo.window: negative")
		}
	default:
		return errors.New("undo: want null or {window}")
	}
	if _, err := intField(m, "expires"); err != nil {
		return err
	}
	if h, present := m["hash"]; present {
		if _, ok := h.(string); !ok {
			return errors.New("hash: want a string")
		}
	}
	return nil
}

func intField(m map[string]any, k string) (int64, error) {
	n, ok := m[k].(json.Number)
	if !ok {
		return 0, fmt.Errorf("%s: want an integer", k)
	}
	v, err := jsontext.ParseInt(string(n))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", k, err)
	}
	return v, nil
}

// CheckConsent is the check a consent request must pass before it is shown
// to a human (§6.6): p is the proposal the agent received from service, as
// ParseProposal read it. It returns nil when c's hash equals p's
// content hash (Hashed; and p's own hash field, if any), c names p's id, service and
// capability, p has not expired at now, and c does not outlive it. Errors
// are *Error: invalid_params for a proposal ParseProposal did not return,
// conflict for a mismatch, expired for a proposal or request past its
// expiry.
func CheckConsent(c ConsentRequest, service string, p *Proposal, now int64) error {
	if p == nil || p.hash == "" {
		return newError(codeInvalidParams, "consent: the proposal was not read by ParseProposal")
	}
	h := p.hash
	conflict := func(msg string) error { return newError(codeConflict, "consent: "+msg) }
	switch {
	case c.Hash != h:
		return conflict("the hash does not match the proposal")
	case p.Hash != "" && p.Hash != h:
		return conflict("the proposal's hash field does not match its contents")
	case c.Proposal != p.ID:
		return conflict("the proposal id does not match")
	case c.Service != service:
		return conflict("the service does not match the one that sent the proposal")
	case c.Capability != p.Capability:
		return conflict("the capability does not match the proposal")
	case now >= p.Expires:
		return newError(codeExpired, "consent: the proposal has expired")
	case c.Expires > p.Expires:
		return conflict("the request outlives the proposal")
	case now >= c.Expires:
		return newError(codeExpired, "consent: the request has expired")
	}
	return nil
}
