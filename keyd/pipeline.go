package keyd

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
	"github.com/parley-keyd/parley-keyd/policies"
)

type handlerFunc func(c *conn, f *protocol.Frame) (*protocol.Frame, error)

func (s *Server) handler(verb string) handlerFunc {
	switch verb {
	case protocol.VerbHello:
		return (*conn).hello
	case protocol.VerbGrant:
		return (*conn).grantVerb
	case protocol.VerbExplain:
		return (*conn).explain
	case protocol.VerbConsent:
		return (*conn).consent
	case protocol.VerbPending:
		return (*conn).pending
	case protocol.VerbApprove:
		return (*conn).approve
	case protocol.VerbDeny:
		return (*conn).deny
	case protocol.VerbWatch:
		return (*conn).watch
	case protocol.VerbLock:
		return (*conn).lockVerb
	case protocol.VerbUnlock:
		return (*conn).unlockVerb
	}
	return nil
}

func (c *conn) requireAgent(verb string) error {
	if !c.role().Agent {
		return &protocol.Error{Code: protocol.CodeForbidden, Message: fmt.Sprintf("user %s may approve but not ask for grants (%s)", c.id.User, verb)}
	}
	return nil
}

func (c *conn) requireApprover(verb string) error {
	// Property 4: an agent cannot approve its own request. The role comes
	// from the kernel's uid, never from the frame.
	if !c.role().Approver {
		return &protocol.Error{Code: protocol.CodeForbidden, Message: fmt.Sprintf("user %s is an agent and may not %s", c.id.User, approverAction(verb)),
			Fix: "a human approves with parley-grant approve, as a user listed in access.approver_users"}
	}
	return nil
}

func (c *conn) caller(holder string) policies.Caller {
	return policies.Caller{UID: c.id.UID, GID: c.id.GID, User: c.id.User, Groups: c.id.Groups,
		GroupIDs: c.id.GroupIDs, Exe: c.id.Exe, Unit: c.id.Unit, HolderKey: holder}
}

func (c *conn) auditCaller() *audit.Caller {
	return &audit.Caller{UID: c.id.UID, GID: c.id.GID, PID: c.id.PID, User: c.id.User, Exe: c.id.Exe, Unit: c.id.Unit}
}

func (c *conn) view() protocol.CallerView {
	return protocol.CallerView{User: c.id.User, UID: c.id.UID, PID: c.id.PID, Exe: c.id.Exe, Unit: c.id.Unit}
}

// parseGrantBody validates a GRANT or EXPLAIN body: a holder key and caveats
// of the kinds §6.3 defines, each well-formed, none repeated.
func parseGrantBody(raw json.RawMessage, now int64) (protocol.GrantBody, ed25519.PublicKey, policies.Request, error) {
	var body protocol.GrantBody
	var req policies.Request
	if len(raw) == 0 {
		return body, nil, req, &protocol.Error{Code: protocol.CodeInvalidParams, Message: "the request needs a \"grant\" object with \"holder\" and \"caveats\""}
	}
	// One strict reading (property 9): "Holder" beside "holder", or a
	// second "holder", is refused rather than read one way here and
	// another in the proof's digest.
	if err := grant.DecodeStrictKnown(raw, &body); err != nil {
		return body, nil, req, &protocol.Error{Code: protocol.CodeInvalidParams, Message: "the \"grant\" object is malformed: " + jsonErr(err)}
	}
	holder, err := grant.ParsePublicKey(body.Holder)
	if err != nil {
		// Property 10: grant.ParsePublicKey refuses small-order keys,
		// whose grants anyone could use with a forged proof.
		return body, nil, req, &protocol.Error{Code: protocol.CodeInvalidParams, Message: "the holder key is refused: " + shortErr(err),
			Fix: "print your key with: parley-grant pubkey"}
	}
	req, err = requestFromCaveats(body.Caveats, now)
	return body, holder, req, err
}

// requestFromCaveats checks the caveats of a GRANT or EXPLAIN body with
// grant.ParseRequest, which says what each caveat means (fail closed:
// property 6), and converts what they ask for into a policy request.
func requestFromCaveats(cavs []grant.Caveat, now int64) (policies.Request, error) {
	r, err := grant.ParseRequest(cavs, now)
	if err != nil {
		return policies.Request{}, &protocol.Error{Code: protocol.CodeInvalidParams, Message: err.Error()}
	}
	return policies.Request{Svc: r.Svc, Verbs: r.Verbs, Can: r.Can, Exp: r.Exp, Nbf: r.Nbf,
		Per: r.Per, Spend: r.Spend, Risk: r.Risk, Now: now}, nil
}

// caveatsFromRequest turns what the policy decided into the caveats to sign,
// in a fixed order.
func caveatsFromRequest(r policies.Request) []grant.Caveat {
	var out []grant.Caveat
	if r.Svc != nil {
		out = append(out, grant.Svc(r.Svc...))
	}
	if r.Verbs != nil {
		out = append(out, grant.Verbs(r.Verbs...))
	}
	if r.Can != nil {
		out = append(out, grant.Can(r.Can...))
	}
	if r.Nbf != 0 {
		out = append(out, grant.Nbf(r.Nbf))
	}
	out = append(out, grant.Exp(r.Exp))
	if r.Per != nil {
		out = append(out, grant.Per(*r.Per))
	}
	if r.Spend != nil {
		out = append(out, grant.Spend(*r.Spend))
	}
	if r.Risk != "" {
		out = append(out, grant.Risk(r.Risk))
	}
	return out
}

// maxAuditField bounds what one request may write into its audit record.
// Attack: requests with huge caveat lists or summaries that fill the disk,
// after which every grant is refused.
const maxAuditField = 4096

// boundedJSON returns raw, or when it is longer than maxAuditField a small
// object with its size and SHA-256 in its place.
func boundedJSON(raw json.RawMessage) json.RawMessage {
	if len(raw) <= maxAuditField {
		return raw
	}
	sum := sha256.Sum256(raw)
	return mustJSON(map[string]any{"cut": true, "bytes": len(raw), "sha256": base64.RawURLEncoding.EncodeToString(sum[:])})
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`null`)
	}
	return b
}

func caveatsJSON(cavs []grant.Caveat) json.RawMessage {
	if cavs == nil {
		cavs = []grant.Caveat{}
	}
	b, _ := json.Marshal(cavs)
	return b
}

// checkProof verifies that the caller holds holder's private key (property 3):
// a proof by that key over target, for this daemon's audience, within ±300 s.
func (c *conn) checkProof(f *protocol.Frame, holder, verb, target string, now int64) error {
	if f.Proof == nil {
		return &protocol.Error{Code: protocol.CodeUnauthorized, Message: "the request needs a proof that you hold the holder key",
			Fix: "parley-grant adds it for you; a client signs {aud: principal key, verb, target, ts} (docs/protocol.md)"}
	}
	if f.Proof.Key != holder {
		return &protocol.Error{Code: protocol.CodeUnauthorized, Message: "the proof is made by a different key than the holder"}
	}
	if err := grant.VerifyProof(*f.Proof, c.s.principal, verb, target, now); err != nil {
		return &protocol.Error{Code: protocol.CodeUnauthorized, Message: "the proof of the holder key does not verify: " + shortErr(err)}
	}
	return nil
}

func (c *conn) agentName(pol *policies.Policy, holder string) (string, error) {
	name, ok := pol.AgentFor(c.caller(holder))
	if !ok {
		return "", &protocol.Error{Code: protocol.CodeForbidden, Message: fmt.Sprintf("the policy names no agent for user %s with this key", c.id.User),
			Fix: "an admin adds an [[agent]] entry for this user, executable or key to the policy"}
	}
	return name, nil
}

func (c *conn) rateLimit(pol *policies.Policy, agent string) error {
	if ok, retry := c.s.limiter.Allow(pol, agent, c.s.now()); !ok {
		secs := int(retry.Seconds() + 0.999)
		if secs < 1 {
			secs = 1
		}
		return &protocol.Error{Code: protocol.CodeLimit, Message: fmt.Sprintf("agent %q is over its request rate", agent), Retry: secs}
	}
	return nil
}

// grantVerb runs the pipeline for an attenuated root grant:
// validate → decide → (approve) → sign → audit → reply.
func (c *conn) grantVerb(f *protocol.Frame) (_ *protocol.Frame, failed error) {
	if err := c.requireAgent(f.Verb); err != nil {
		return nil, err
	}
	if err := c.s.refuseIfLocked(); err != nil {
		return nil, err
	}
	now := c.s.now().Unix()
	body, holder, req, err := parseGrantBody(f.Grant, now)
	if err != nil {
		return nil, err
	}
	digest, err := protocol.GrantDigest(f.Grant)
	if err != nil {
		return nil, &protocol.Error{Code: protocol.CodeInvalidParams, Message: "the \"grant\" object cannot be canonicalized: " + shortErr(err)}
	}
	if err := c.checkProof(f, body.Holder, protocol.ProofVerbGrant, digest, now); err != nil {
		return nil, err
	}
	pol := c.s.policy.Load()
	agent, err := c.agentName(pol, body.Holder)
	if err != nil {
		return nil, err
	}
	if err := c.rateLimit(pol, agent); err != nil {
		return nil, err
	}
	d := pol.Decide(c.caller(body.Holder), req)
	rec := audit.Record{Kind: "issue", RequestID: newRequestID(), Caller: c.auditCaller(), Holder: body.Holder,
		Requested: boundedJSON(caveatsJSON(body.Caveats)), Decision: string(d.Action), DecidedBy: &audit.Decider{Rule: d.Rule}}
	// fail records a request that ends in an error after it was decided,
	// so that even an approval that led nowhere is in the log.
	fail := func(err error) (*protocol.Frame, error) {
		rec.Kind, rec.Message = audit.KindError, shortErr(err)
		c.s.auditBestEffort(rec)
		return nil, err
	}
	switch d.Action {
	case policies.Auto:
	case policies.Ask:
		view := c.renderGrant(rec.RequestID, agent, body.Holder, d)
		a, err := c.waitForHuman(f, view, agent, pol.MaxPending(agent), d.Channels, d.Strong)
		rec.DecidedBy.Approver, rec.DecidedBy.Channel = a.Approver, a.Channel
		rec.DecidedBy.Strength = strength(a)
		if err != nil {
			rec.Kind, rec.Decision, rec.Message = refusalKind(a.Code), string(a.Code), a.Reason
			c.s.auditBestEffort(rec)
			return nil, err
		}
		defer func() { a.settle(failed) }()
		// The human approved what the policy in force then decided. If the
		// policy was reloaded meanwhile, that decision may no longer hold:
		// fail closed and let the agent ask again.
		if c.s.policy.Load() != pol {
			return fail(&protocol.Error{Code: protocol.CodeConflict, Message: "the policy was reloaded while the request waited; ask again"})
		}
	default:
		rec.Kind, rec.Message = "deny", d.Reason
		c.s.auditBestEffort(rec)
		return nil, &protocol.Error{Code: protocol.CodeForbidden, Rule: d.Rule, Message: d.Reason,
			Fix: "see what the policy would allow with: parley-grant explain (same flags)"}
	}
	cavs := caveatsFromRequest(d.Grant)
	// Property 3, checked again at the last moment: every issued grant
	// expires, and carries only well-formed caveats of the spec's kinds.
	now = c.s.now().Unix()
	if d.Grant.Exp <= now {
		return fail(&protocol.Error{Code: protocol.CodeExpired, Message: "the grant's expiry passed while the request waited"})
	}
	for _, cv := range cavs {
		if !cv.Known() || cv.Check() != nil {
			return fail(fmt.Errorf("refusing to sign caveat %s", cv.Name))
		}
	}
	nonce, err := grant.NewNonce(rand.Reader)
	if err != nil {
		return fail(err)
	}
	tok, err := grant.Issue(c.s.signer, holder, cavs, now, nonce)
	if err != nil {
		return c.signFailed(rec, err)
	}
	rec.Issued, rec.GrantID, rec.Expiry = caveatsJSON(cavs), tok.ID(), d.Grant.Exp
	if len(d.Narrowed) > 0 {
		rec.Message = "narrowed: " + strings.Join(d.Narrowed, "; ")
	}
	if err := c.s.commitAudit(rec); err != nil {
		return nil, err
	}
	return grantReply(tok, cavs, d.Grant.Exp, rec, d.Narrowed)
}

// signFailed records a grant the signer could not sign, with the signer's
// detail in the audit record and the daemon's log, and answers the agent. A
// key service that is down, slow or refusing (signer.UnavailableError) is
// "unavailable" with a retry hint: the request may succeed later, and the
// daemon stays up. The agent is not told the key service's addresses.
func (c *conn) signFailed(rec audit.Record, err error) (*protocol.Frame, error) {
	rec.Kind, rec.Message = audit.KindError, "signing failed: "+boundedString(err.Error(), 1000)
	c.s.auditBestEffort(rec)
	c.s.logf("signing %s failed: %v", rec.RequestID, err)
	var u *signer.UnavailableError
	if errors.As(err, &u) {
		return nil, &protocol.Error{Code: protocol.CodeUnavailable, Message: "the key service did not answer, so no grant was issued",
			Fix: "ask again later; an approver sees the key service's state with: parley-grant status", Retry: u.RetrySeconds()}
	}
	return nil, err
}

func boundedString(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func grantReply(tok *grant.Token, cavs []grant.Caveat, exp int64, rec audit.Record, narrowed []string) (*protocol.Frame, error) {
	res := protocol.GrantResult{Token: tok.Encode(), GrantID: tok.ID(), Expires: exp, Caveats: cavs, Decision: rec.Decision,
		Rule: rec.DecidedBy.Rule, Approver: rec.DecidedBy.Approver, Channel: rec.DecidedBy.Channel,
		Strength: rec.DecidedBy.Strength, Narrowed: narrowed, RequestID: rec.RequestID}
	raw, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	return &protocol.Frame{Kind: protocol.KindGrant, Data: raw}, nil
}

// refusalKind is the audit record kind for a request that a human, the clock
// or the requester ended without a grant.
func refusalKind(code protocol.Code) string {
	switch code {
	case protocol.CodeTimeout:
		return audit.KindTimeout
	case codeWithdrawn:
		return audit.KindWithdrawn
	}
	return audit.KindDeny
}

func strength(a Approval) string {
	switch {
	case a.Channel == "":
		return ""
	case a.Weak:
		return "weak"
	}
	return "strong"
}

// commitAudit writes rec durably. Property 2: if it fails, the grant that was
// just signed is dropped here and never leaves the daemon.
func (s *Server) commitAudit(rec audit.Record) error {
	if _, err := s.audit.Append(rec); err != nil {
		s.logf("audit append failed, grant %s discarded: %v", rec.GrantID, err)
		return &protocol.Error{Code: protocol.CodeUnavailable, Message: "the audit log cannot be written, so no grant was issued",
			Fix: "an admin checks the state folder's disk space and permissions", Retry: 5}
	}
	return nil
}

// auditBestEffort records a refusal. A refusal stands whether or not its
// record could be written; the failure is logged.
func (s *Server) auditBestEffort(rec audit.Record) {
	if _, err := s.audit.Append(rec); err != nil {
		s.logf("audit append failed for %s %s: %v", rec.Kind, rec.RequestID, err)
	}
}

// waitForHuman queues view for approval, tells the requester the match code
// and where to approve, and blocks until a human decides, the request times
// out, or the requester goes away (which withdraws it).
func (c *conn) waitForHuman(f *protocol.Frame, view protocol.PendingView, agent string, maxPending int, chans []policies.Channel, strong bool) (Approval, error) {
	for _, ch := range chans {
		view.Channels = append(view.Channels, string(ch))
	}
	view.Strong = strong
	cfg := c.s.cfg.Load()
	if base := cfg.PhoneURL(); base != "" && slices.Contains(view.Channels, string(policies.Phone)) {
		view.Link = base + "/r/" + view.ID
	}
	timeout := cfg.ApprovalTimeout.Duration
	view.Created = c.s.now().Unix()
	view.Expires = c.s.now().Add(timeout).Unix()
	it, err := c.s.queue.add(view, agent, maxPending)
	if err != nil {
		return Approval{Code: protocol.CodeLimit, Reason: err.Error()}, err
	}
	c.event(f.ID, fmt.Sprintf("waiting for approval of %s: confirm code %s", view.ID, it.code), map[string]any{
		"request": view.ID, "code": it.code, "channels": view.Channels, "strong": strong, "expires": view.Expires,
	})
	a := c.s.queue.wait(c.ctx, it, timeout)
	if a.Approved {
		return a, nil
	}
	code := a.Code
	if code == "" {
		code = protocol.CodeDenied
	}
	return a, &protocol.Error{Code: code, Message: a.Reason}
}

// explain answers which rule would decide a GRANT and what it would issue,
// signing nothing.
func (c *conn) explain(f *protocol.Frame) (*protocol.Frame, error) {
	if err := c.requireAgent(f.Verb); err != nil {
		return nil, err
	}
	if err := c.s.refuseIfLocked(); err != nil {
		return nil, err
	}
	now := c.s.now().Unix()
	body, _, req, err := parseGrantBody(f.Grant, now)
	if err != nil {
		return nil, err
	}
	pol := c.s.policy.Load()
	d := pol.Decide(c.caller(body.Holder), req)
	out := map[string]any{
		"action": d.Action, "agent": d.Agent, "rule": d.Rule, "reason": d.Reason,
		"narrowed": d.Narrowed, "channels": d.Channels, "strong": d.Strong,
	}
	if d.Action != policies.Deny {
		cavs := caveatsFromRequest(d.Grant)
		out["caveats"] = cavs
		out["expires"] = d.Grant.Exp
		words := make([]string, len(cavs))
		for i, cv := range cavs {
			words[i] = cv.Describe()
		}
		out["allows"] = words
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return &protocol.Frame{Kind: protocol.KindExplain, Data: raw}, nil
}

// consentObject reads the consent object of a CONSENT request (§6.6): the
// service's consent object, or its whole consent_required ERROR frame that
// holds one under "consent". Both are read strictly (property 9), so a
// "Hash" beside "hash" is refused, not read one way here and another by
// the service.
func consentObject(raw json.RawMessage) (grant.ConsentRequest, error) {
	var cr grant.ConsentRequest
	var frame struct {
		Consent json.RawMessage `json:"consent"`
	}
	if err := grant.DecodeStrict(raw, &frame); err != nil {
		return cr, err
	}
	if frame.Consent != nil {
		raw = frame.Consent
	}
	if err := grant.DecodeStrict(raw, &cr); err != nil {
		return cr, err
	}
	if cr.Hash == "" {
		return cr, errors.New("it has no \"hash\"")
	}
	return cr, nil
}

// consent runs the pipeline for a consent grant (§6.6). Property 5: the
// daemon recomputes the proposal hash and checks id, service, capability and
// expiry before anything is shown to a human; a mismatch is refused and never
// queued.
func (c *conn) consent(f *protocol.Frame) (_ *protocol.Frame, failed error) {
	if err := c.requireAgent(f.Verb); err != nil {
		return nil, err
	}
	if err := c.s.refuseIfLocked(); err != nil {
		return nil, err
	}
	now := c.s.now().Unix()
	if f.Service == "" || len(f.Consent) == 0 || len(f.Proposal) == 0 || f.Holder == "" {
		return nil, &protocol.Error{Code: protocol.CodeInvalidParams, Message: "CONSENT needs \"service\", \"consent\", \"proposal\" and \"holder\""}
	}
	holder, err := grant.ParsePublicKey(f.Holder)
	if err != nil {
		return nil, &protocol.Error{Code: protocol.CodeInvalidParams, Message: "the holder key is refused: " + shortErr(err),
			Fix: "print your key with: parley-grant pubkey"}
	}
	cr, err := consentObject(f.Consent)
	if err != nil {
		return nil, &protocol.Error{Code: protocol.CodeInvalidParams, Message: "the consent is not a §6.6 consent object or a consent_required ERROR frame: " + jsonErr(err),
			Fix: "pass the consent_required error exactly as the service sent it"}
	}
	if err := c.checkProof(f, f.Holder, protocol.ProofVerbConsent, cr.Hash, now); err != nil {
		return nil, err
	}
	pol := c.s.policy.Load()
	agent, err := c.agentName(pol, f.Holder)
	if err != nil {
		return nil, err
	}
	if err := c.rateLimit(pol, agent); err != nil {
		return nil, err
	}
	// The proposal is parsed once, here; its hash, the policy's facts
	// and the human's rendering all come from this parse (property 9).
	prop, err := pickProposal(f.Proposal, cr.Proposal)
	if err != nil {
		return nil, err
	}
	rec := audit.Record{Kind: "consent", RequestID: newRequestID(), Caller: c.auditCaller(), Holder: f.Holder}
	refuse := func(e *protocol.Error) (*protocol.Frame, error) {
		rec.Kind, rec.Decision, rec.Message = audit.KindDeny, string(e.Code), e.Message
		c.s.auditBestEffort(rec)
		return nil, e
	}
	if cr.Principal != c.s.principal {
		return refuse(&protocol.Error{Code: protocol.CodeConflict, Message: "the consent request is not for this daemon's principal",
			Fix: "pass the consent_required error exactly as the service sent it; it names the principal"})
	}
	if err := grant.CheckConsent(cr, f.Service, prop, now); err != nil {
		code := protocol.CodeConflict
		switch grant.CodeOf(err) {
		case grant.CodeExpired:
			code = protocol.CodeExpired
		case grant.CodeInvalidParams:
			code = protocol.CodeInvalidParams
		}
		return refuse(&protocol.Error{Code: code, Message: "the consent does not match the proposal: " + shortErr(err),
			Fix: "pass the proposal exactly as the service sent it, and the consent from the same service"})
	}
	facts := policies.ConsentFacts{Service: f.Service, Capability: prop.Capability, Cost: prop.Cost,
		Risk: prop.Risk, Expires: prop.Expires, Now: now}
	d := pol.DecideConsent(c.caller(f.Holder), facts)
	rec.DecidedBy = &audit.Decider{Rule: d.Rule}
	// The summary is the service's words, possibly long: the log keeps a
	// cut, neutralized copy; the hash binds the real proposal anyway.
	logged := cr
	logged.Summary = grant.SafeText(cr.Summary, 200)
	rec.Requested = boundedJSON(mustJSON(logged))
	fail := func(err error) (*protocol.Frame, error) {
		rec.Kind, rec.Message = audit.KindError, shortErr(err)
		c.s.auditBestEffort(rec)
		return nil, err
	}
	if d.Action != policies.Ask {
		return refuse(&protocol.Error{Code: protocol.CodeForbidden, Rule: d.Rule, Message: d.Reason})
	}
	view := c.renderConsent(rec.RequestID, agent, f.Holder, f.Service, prop, d)
	a, err := c.waitForHuman(f, view, agent, pol.MaxPending(agent), d.Channels, d.Strong)
	rec.DecidedBy.Approver, rec.DecidedBy.Channel, rec.DecidedBy.Strength = a.Approver, a.Channel, strength(a)
	rec.Decision = "ask"
	if err != nil {
		rec.Kind, rec.Decision, rec.Message = refusalKind(a.Code), string(a.Code), a.Reason
		c.s.auditBestEffort(rec)
		return nil, err
	}
	defer func() { a.settle(failed) }()
	if c.s.policy.Load() != pol {
		return fail(&protocol.Error{Code: protocol.CodeConflict, Message: "the policy was reloaded while the request waited; ask again"})
	}
	// The consent never outlives the proposal, nor the policy's cap.
	exp := min(cr.Expires, prop.Expires)
	if d.Expires != 0 {
		exp = min(exp, d.Expires)
	}
	if exp <= c.s.now().Unix() {
		return fail(&protocol.Error{Code: protocol.CodeExpired, Message: "the proposal expired while waiting for approval"})
	}
	cr.Expires = exp
	nonce, err := grant.NewNonce(rand.Reader)
	if err != nil {
		return fail(err)
	}
	now = c.s.now().Unix()
	tok, err := grant.IssueConsent(c.s.signer, holder, cr, now, nonce)
	if err != nil {
		return c.signFailed(rec, err)
	}
	cavs := grant.ConsentCaveats(f.Service, prop.Capability, cr.Hash, exp)
	rec.Issued, rec.GrantID, rec.Expiry = caveatsJSON(cavs), tok.ID(), exp
	if err := c.s.commitAudit(rec); err != nil {
		return nil, err
	}
	return grantReply(tok, cavs, exp, rec, nil)
}

// pickProposal finds the proposal the consent names inside a PROPOSALS
// frame, or takes a bare proposal as it is, and parses it once with
// grant.ParseProposal. Every read is strict (property 9): a "Proposals" or
// an "ID" in another case is refused, never taken for the real one.
func pickProposal(raw json.RawMessage, id string) (*grant.Proposal, error) {
	bad := func(err error) error {
		return &protocol.Error{Code: protocol.CodeInvalidParams, Message: "the proposal is malformed: " + jsonErr(err),
			Fix: "pass the proposal exactly as the service sent it"}
	}
	var frame struct {
		Proposals []json.RawMessage `json:"proposals"`
	}
	if err := grant.DecodeStrict(raw, &frame); err != nil {
		return nil, bad(err)
	}
	if frame.Proposals == nil {
		p, err := grant.ParseProposal(raw)
		if err != nil {
			return nil, bad(err)
		}
		return p, nil
	}
	for i, one := range frame.Proposals {
		var head struct {
			ID string `json:"id"`
		}
		if err := grant.DecodeStrict(one, &head); err != nil {
			return nil, bad(fmt.Errorf("proposals[%d]: %w", i, err))
		}
		if head.ID == id {
			p, err := grant.ParseProposal(one)
			if err != nil {
				return nil, bad(fmt.Errorf("proposals[%d]: %w", i, err))
			}
			return p, nil
		}
	}
	return nil, &protocol.Error{Code: protocol.CodeConflict, Message: fmt.Sprintf("the PROPOSALS frame holds no proposal %q", id)}
}

func (c *conn) pending(f *protocol.Frame) (*protocol.Frame, error) {
	if err := c.requireApprover(f.Verb); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(map[string]any{"pending": c.s.queue.list()})
	if err != nil {
		return nil, err
	}
	return &protocol.Frame{Kind: protocol.KindPending, Data: raw}, nil
}

// socketChannel is the channel an approval over the socket counts as: the
// terminal, unless the desktop approver says it relays a notification click.
func socketChannel(f *protocol.Frame) (string, error) {
	switch f.Channel {
	case "", "terminal":
		return "terminal", nil
	case "desktop":
		return "desktop", nil
	}
	return "", &protocol.Error{Code: protocol.CodeInvalidParams, Message: fmt.Sprintf("channel %q cannot approve over the socket", f.Channel)}
}

func (c *conn) approver(channel string) Approval {
	return Approval{Approver: fmt.Sprintf("%s (uid %d)", c.id.User, c.id.UID), Channel: channel, Weak: c.role().Weak}
}

func (c *conn) approve(f *protocol.Frame) (*protocol.Frame, error) {
	return c.decideVerb(f, true)
}

func (c *conn) deny(f *protocol.Frame) (*protocol.Frame, error) {
	return c.decideVerb(f, false)
}

func (c *conn) decideVerb(f *protocol.Frame, approve bool) (*protocol.Frame, error) {
	if err := c.requireApprover(f.Verb); err != nil {
		return nil, err
	}
	if f.Request == "" {
		return nil, &protocol.Error{Code: protocol.CodeInvalidParams, Message: f.Verb + " needs \"request\""}
	}
	if approve && f.Match == "" {
		return nil, &protocol.Error{Code: protocol.CodeInvalidParams, Message: "APPROVE needs \"match\": the code shown where the agent asked"}
	}
	ch, err := socketChannel(f)
	if err != nil {
		return nil, err
	}
	if err := c.s.queue.decide(f.Request, approve, f.Match, c.approver(ch)); err != nil {
		return nil, err
	}
	return &protocol.Frame{Kind: protocol.KindOK}, nil
}

// watchNotifier streams queue news to an approver connection as EVENTs. It
// never blocks the request that reports the news: events go into a buffer
// that the watch's own goroutine writes out. A watcher that falls that far
// behind is cut off. Attack: an approver connection that stops reading, which
// would otherwise stall every request for the write deadline.
type watchNotifier struct {
	events chan *protocol.Frame
	lost   chan struct{}
	once   sync.Once
}

const watchBuffer = 1024

func (w *watchNotifier) push(f *protocol.Frame) {
	select {
	case w.events <- f:
	default:
		w.once.Do(func() { close(w.lost) })
	}
}

func eventFrame(re, message string, data any) *protocol.Frame {
	return &protocol.Frame{Kind: protocol.KindEvent, ID: "v" + re, Re: re, Message: message, Data: mustJSON(data)}
}

type watchFeed struct {
	w  *watchNotifier
	re string
}

func (f watchFeed) Pending(v protocol.PendingView) { f.w.push(eventFrame(f.re, "pending", v)) }
func (f watchFeed) Ended(id, outcome string) {
	f.w.push(eventFrame(f.re, "ended", map[string]string{"id": id, "outcome": outcome}))
}

// watch streams every pending request and its end to an approver until the
// connection closes: the desktop approver's feed. Its final reply comes only
// when the daemon shuts down. One WATCH per connection.
func (c *conn) watch(f *protocol.Frame) (*protocol.Frame, error) {
	if err := c.requireApprover(f.Verb); err != nil {
		return nil, err
	}
	if !c.watching.CompareAndSwap(false, true) {
		return nil, &protocol.Error{Code: protocol.CodeLimit, Message: "this connection is already watching"}
	}
	defer c.watching.Store(false)
	w := &watchNotifier{events: make(chan *protocol.Frame, watchBuffer), lost: make(chan struct{})}
	feed := watchFeed{w, f.ID}
	cancel := c.s.queue.subscribe(feed)
	defer cancel()
	for _, v := range c.s.queue.list() {
		feed.Pending(v)
	}
	for {
		select {
		case ev := <-w.events:
			if !c.send(ev) {
				return nil, nil
			}
		case <-w.lost:
			c.s.logf("approver pid %d fell behind its WATCH feed; closing its connection", c.id.PID)
			c.cancel()
			c.nc.Close()
			return nil, nil
		case <-c.ctx.Done():
			return &protocol.Frame{Kind: protocol.KindOK}, nil
		}
	}
}
