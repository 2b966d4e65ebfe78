package keyd

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/grant/lens"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
	"github.com/parley-keyd/parley-keyd/policies"
)

// The request pipeline. Handle takes one request from any transport (the
// socket, the phone page) with the caller the transport identified, runs it
// through the steps of its verb, and writes exactly one audit record for it,
// whatever the outcome (DESIGN.md property 11):
//
//	validate → prove → decide → (ask a human) → sign → record → reply
//
// Every step is a function of the request alone; nothing here reads a
// socket, so the pipeline is tested without one.

// request is one request on its way through the pipeline, with the record
// that will be written for it.
type request struct {
	ctx    context.Context // ends when the requester goes away, which withdraws it
	caller Caller
	f      *protocol.Frame
	events func(message string, data any) // non-final replies; nil drops them
	rec    audit.Record
	// issued is set once a grant was signed: its record must be durable
	// before the reply leaves (property 2).
	issued bool
	// check is the principal signature's check, running beside the
	// record's write (sigcheck.go); nil when the signer checked it.
	check *checkedSigner
	// approval is the human's approval of this request, told at the end
	// whether the grant was issued (Approval.settle).
	approval *Approval
	// recorded is set once the request's record is written (record): a
	// step whose record must precede what it causes writes it early.
	recorded bool
	// charged is set once the request counted against its caller's rate
	// (chargeFor); over when it found the rate used up, and overWho names
	// the bucket: its record is then cut and folded (rate.go).
	charged bool
	over    bool
	overWho string
	// under is the remembered approval a GRANT is issued under, and
	// started the one its human approval started (remembered.go).
	under, started *rememberedApproval
}

func (r *request) event(message string, data any) {
	if r.events != nil {
		r.events(message, data)
	}
}

// AuditSink is where the daemon records every request. Append returns only
// once the record is durable; the daemon releases a grant only after that.
// AppendWhile is Append running during once, before it returns, while the
// record is being committed (audit.Log.AppendWhile): the daemon checks a
// grant's signature there.
type AuditSink interface {
	Append(rec audit.Record) (uint64, error)
	AppendWhile(rec audit.Record, during func()) (uint64, error)
}

// folder is an AuditSink that folds repeats of a refusal into one counted
// record (audit.Log.AppendFolded), so that a flood of identical refusals
// does not flood the log, and none is dropped without a count.
type folder interface {
	AppendFolded(rec audit.Record) (uint64, bool, error)
}

// Handle runs one request from caller through the pipeline and returns its
// final reply or the refusal. events receives the non-final replies (the
// match code while a human decides). ctx ends when the requester goes away:
// a request waiting for a human is then withdrawn.
//
// Handle writes exactly one audit record for the request. A reply carrying
// a grant is returned only once that record is durable; if it cannot be
// written, the grant is dropped and the request refused with "unavailable".
func (s *Server) Handle(ctx context.Context, caller Caller, f *protocol.Frame, events func(message string, data any)) (*protocol.Frame, error) {
	r := &request{ctx: ctx, caller: caller, f: f, events: events,
		rec: audit.Record{RequestID: newRequestID(), Verb: f.Verb, Caller: caller.audit()}}
	if f.Verb == protocol.VerbGrant || f.Verb == protocol.VerbConsent {
		s.issuing.Add(1) // sigcheck.go
		defer s.issuing.Add(-1)
	}
	// Property 14: every request counts against its caller's rate. A verb
	// that names a holder key counts once its step has read the key.
	if !namesHolder(f.Verb) {
		if err := s.chargeFor(r, s.policy.Load(), ""); err != nil {
			return s.finish(r, nil, err)
		}
	}
	reply, err := s.run(r)
	return s.finish(r, reply, err)
}

// run refuses a verb the table does not hold, or a caller without its
// role, and hands the request to its verb's handler.
func (s *Server) run(r *request) (*protocol.Frame, error) {
	v, ok := lookupVerb(r.f.Verb)
	if !ok {
		return nil, unknownVerb(r.f.Verb)
	}
	if err := v.allows(r.caller); err != nil {
		return nil, err
	}
	return v.handle(s, r)
}

// finish is the pipeline's one exit: it completes the request's record from
// the outcome and writes it.
func (s *Server) finish(r *request, reply *protocol.Frame, err error) (*protocol.Frame, error) {
	rec := &r.rec
	if err == nil && r.issued {
		if e := s.refuseIfDamaged(); e != nil {
			// The scrub found damage while this grant was being decided.
			rec.Kind, rec.Decision, rec.Message = audit.KindDeny, string(e.Code), "signed, then discarded: the audit log failed verification before the grant left"
			s.discard(r)
			r.settle(e)
			return nil, e
		}
		// Attack: a grant signed while the human pressed Stop (a slow key
		// service, an approval a moment before) leaving after LOCK said
		// that nothing would. The lock is checked once the grant is
		// signed, and a LOCK waits for the grants already past this
		// check to be recorded (lockState.mu).
		s.lock.mu.RLock()
		if st := s.lock.cur; st != nil {
			s.lock.mu.RUnlock()
			e := lockedError(*st)
			rec.Kind, rec.Decision, rec.Message = audit.KindDeny, string(e.Code), "signed, then discarded: the daemon was locked before the grant left"
			s.discard(r)
			r.settle(e)
			return nil, e
		}
		// Issue 24: a grant under a remembered approval that ended
		// meanwhile (FORGET, LOCK, a reload) does not leave; ending one
		// waits for the grants already past this check to be recorded.
		if e := s.releaseRemembered(r); e != nil {
			s.lock.mu.RUnlock()
			rec.Kind, rec.Decision, rec.Message = audit.KindDeny, string(e.Code), "signed, then discarded: "+e.Message
			s.discard(r)
			r.settle(e)
			return nil, e
		}
		// Property 2: the grant leaves only once its record is durable,
		// and only with a signature that verifies, checked meanwhile.
		seq, aerr, cerr := s.appendChecked(*rec, r.check)
		if cerr != nil {
			s.faulty(r, seq, aerr, cerr)
		}
		s.lock.mu.RUnlock()
		switch {
		case aerr != nil:
			s.logf("audit append failed, grant %s discarded: %v", rec.GrantID, aerr)
			reply, err = nil, s.unavailableAudit(aerr)
		case cerr != nil:
			reply, err = nil, &protocol.Error{Code: protocol.CodeInternal, Message: "the daemon failed to sign the grant"}
		}
		r.settle(err)
		return reply, err
	}
	switch {
	case err != nil:
		var e *protocol.Error
		if !errors.As(err, &e) {
			// A bug, or a failure the requester need not read: the detail
			// goes to the record and the log, a plain refusal to the wire.
			s.logf("%s %s from %s: %v", r.f.Verb, rec.RequestID, r.caller.name(), err)
			if rec.Message == "" {
				rec.Message = err.Error()
			}
			e = &protocol.Error{Code: protocol.CodeInternal, Message: "the daemon failed to handle the request"}
			err = e
		}
		if rec.Kind == "" {
			// The step that refused set no kind of its own (a policy
			// refusal does): the code says what happened.
			rec.Kind, rec.Decision = refusalKind(r.f.Verb, e.Code), string(e.Code)
		}
		if rec.Message == "" {
			rec.Message = e.Message
		}
	case rec.Kind == "":
		rec.Kind = audit.KindRequest
		if rec.Decision == "" {
			rec.Decision = "ok"
		}
	}
	if !r.recorded {
		// A request refused before its step counted it counts now.
		s.chargeFor(r, s.policy.Load(), "")
		if r.over && !changesState(rec) {
			s.auditOver(*rec, r.overWho)
		} else {
			s.auditFolded(*rec)
		}
	}
	r.settle(err)
	return reply, err
}

// discard records r's grant, signed and not released, as refused. The
// signature's check runs all the same: a fault in the signing is worth
// knowing whether or not the grant leaves.
func (s *Server) discard(r *request) {
	s.record(r)
	if r.check != nil {
		if err := r.check.check(); err != nil {
			s.logf("grant %s (%s), discarded already: %v; the signing may be faulty", r.rec.GrantID, r.rec.RequestID, err)
		}
	}
}

// faulty reports that the signature on r's grant failed the check that ran
// while its record was written (sigcheck.go): a fault in the signing
// (hardware, or a bug), which can give the key away, so it goes to the
// daemon's log whatever else failed. When the grant's record was written
// (as seq; aerr is nil), a second record of the request says that the grant
// was discarded (docs/audit.md). It names the grant by its id and carries
// neither its caveats nor its expiry, which only an issued grant's record
// has.
func (s *Server) faulty(r *request, seq uint64, aerr, err error) {
	s.logf("grant %s (%s) discarded: %v; the signing may be faulty", r.rec.GrantID, r.rec.RequestID, err)
	if aerr != nil {
		return // no record of the grant: the refusal is the audit's (finish)
	}
	rec := r.rec
	rec.Kind, rec.Decision, rec.Issued, rec.Expiry = audit.KindError, string(protocol.CodeInternal), nil, 0
	rec.Message = fmt.Sprintf("signed and recorded as seq %d, then discarded: %v", seq, err)
	if _, aerr := s.audit.Append(rec); aerr != nil {
		s.logf("audit append failed for %s %s: %v", rec.Kind, rec.RequestID, aerr)
	}
}

// record writes r's record now, as it stands, durably; finish then writes
// none. A failure is logged: what the record describes has happened.
func (s *Server) record(r *request) {
	r.recorded = true
	if _, err := s.audit.Append(r.rec); err != nil {
		s.logf("audit append failed for %s %s: %v", r.rec.Kind, r.rec.RequestID, err)
	}
}

// settle tells the human who approved r how it ended.
func (r *request) settle(err error) {
	if r.approval != nil {
		r.approval.settle(err)
	}
}

// refusalKind is the record kind of a request that ended without a grant.
func refusalKind(verb string, code protocol.Code) string {
	switch {
	case code == protocol.CodeTimeout:
		return audit.KindTimeout
	case code == codeWithdrawn:
		return audit.KindWithdrawn
	case code == protocol.CodeInternal:
		return audit.KindError
	}
	if v, ok := lookupVerb(verb); ok && v.refused != "" {
		return v.refused
	}
	return audit.KindRequest
}

// auditFolded records rec, a record that issued nothing (a refused request,
// a reload, loaded or refused), folding identical repeats into counted
// records, never dropping one. What it records stands whether or not the
// record could be written; a failure is logged.
func (s *Server) auditFolded(rec audit.Record) {
	var err error
	if f, ok := s.audit.(folder); ok {
		_, _, err = f.AppendFolded(rec)
	} else {
		_, err = s.audit.Append(rec)
	}
	if err != nil {
		s.logf("audit append failed for %s %s: %v", rec.Kind, rec.RequestID, err)
	}
}

func (s *Server) unavailableAudit(err error) error {
	e := &protocol.Error{Code: protocol.CodeUnavailable, Message: "the audit log cannot be written, so no grant was issued",
		Fix: "an admin checks the state folder's disk space and permissions", Retry: 5}
	var v *audit.VanishedError
	var w *audit.WaitingError
	if errors.As(err, &w) {
		// Started while the key service was down: the log's open
		// checkpoint, and so every record, waits for the signer.
		e.Message = "the daemon's key service has not yet signed the audit log's open checkpoint, so no grant was issued"
		e.Fix = "ask again later; an approver sees the key service's state with: parley-grant status"
		e.Retry = max(int(w.Retry.Seconds()+0.5), 1)
	}
	if errors.As(err, &v) {
		e.Message = "the audit log was moved, removed or truncated under the daemon, so no grant was issued"
		e.Fix = "an admin restores the log, or makes the daemon start a new segment with: systemctl reload parley-keyd"
	}
	return e
}

// parseGrantBody validates a GRANT or EXPLAIN body: a holder key and caveats
// of the kinds §6.3 defines, each well-formed, none repeated. The caveats are
// read once, by grant.ParseRequest, which says what each means (fail closed:
// property 6); the policy decides on what it returns.
func parseGrantBody(raw json.RawMessage, now int64) (protocol.GrantBody, ed25519.PublicKey, grant.Request, error) {
	var body protocol.GrantBody
	if len(raw) == 0 {
		return body, nil, grant.Request{}, &protocol.Error{Code: protocol.CodeInvalidParams, Message: "the request needs a \"grant\" object with \"holder\" and \"caveats\""}
	}
	// One strict reading (property 9): "Holder" beside "holder", or a
	// second "holder", is refused rather than read one way here and
	// another in the proof's digest.
	if err := grant.DecodeStrictKnown(raw, &body); err != nil {
		return body, nil, grant.Request{}, &protocol.Error{Code: protocol.CodeInvalidParams, Message: "the \"grant\" object is malformed: " + jsonErr(err)}
	}
	holder, err := grant.ParsePublicKey(body.Holder)
	if err != nil {
		// Property 10: grant.ParsePublicKey refuses small-order keys,
		// whose grants anyone could use with a forged proof.
		return body, nil, grant.Request{}, &protocol.Error{Code: protocol.CodeInvalidParams, Message: "the holder key is refused: " + shortErr(err),
			Fix: "print your key with: parley-grant pubkey"}
	}
	req, err := grant.ParseRequest(body.Caveats, now)
	if err != nil {
		return body, holder, grant.Request{}, &protocol.Error{Code: protocol.CodeInvalidParams, Message: err.Error()}
	}
	return body, holder, *req, nil
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`null`)
	}
	return b
}

// caveatsJSON is the caveat list of a record as json.Marshal writes it.
// Caveats come canonical from grant, so the list is their MarshalJSON
// joined, unless one holds a byte that json.Marshal escapes (<, >, &,
// U+2028, U+2029): that list goes through json.Marshal. FuzzCaveatsJSON
// holds the two equal.
func caveatsJSON(cavs []grant.Caveat) json.RawMessage {
	b := make([]byte, 0, 2+48*len(cavs))
	b = append(b, '[')
	for i, c := range cavs {
		if i > 0 {
			b = append(b, ',')
		}
		start := len(b)
		var err error
		if b, err = c.AppendJSON(b); err != nil || bytes.ContainsAny(b[start:], "<>&\u2028\u2029") {
			return caveatsMarshal(cavs)
		}
	}
	return append(b, ']')
}

func caveatsMarshal(cavs []grant.Caveat) json.RawMessage {
	if cavs == nil {
		cavs = []grant.Caveat{}
	}
	return mustJSON(cavs)
}

// checkProof verifies that the caller holds holder's private key (property 3):
// a proof by that key over target, for this daemon's audience, within ±300 s.
func (s *Server) checkProof(r *request, holder, verb, target string, now int64) error {
	p := r.f.Proof
	if p == nil {
		return &protocol.Error{Code: protocol.CodeUnauthorized, Message: "the request needs a proof that you hold the holder key",
			Fix: "parley-grant adds it for you; a client signs {aud: principal key, verb, target, ts} (docs/protocol.md)"}
	}
	if p.Key != holder {
		return &protocol.Error{Code: protocol.CodeUnauthorized, Message: "the proof is made by a different key than the holder"}
	}
	if err := grant.VerifyProof(*p, s.principal, verb, target, now); err != nil {
		return &protocol.Error{Code: protocol.CodeUnauthorized, Message: "the proof of the holder key does not verify: " + shortErr(err)}
	}
	return nil
}

// agent names the caller's policy agent. The request counted against that
// agent's rate for the caller's uid when its holder key was read
// (chargeFor). Attack: one OS user using up another's rate. The rate is
// counted per agent and per uid: an agent that matches many users
// (any = true, a group) is many callers (issue 10 item 5).
func (s *Server) agent(r *request, pol *policies.Policy, holder string) (string, error) {
	name, ok := pol.AgentFor(r.caller.policy(holder))
	if !ok {
		return "", &protocol.Error{Code: protocol.CodeForbidden,
			Message: fmt.Sprintf("the policy names no agent for %s with this key", r.caller.phrase()),
			Fix:     "an admin adds an [[agent]] entry for this user, executable or key to the policy"}
	}
	return name, nil
}

// grantRequest runs the pipeline for an attenuated root grant.
func (s *Server) grantRequest(r *request) (*protocol.Frame, error) {
	if err := s.refuseIfLocked(); err != nil {
		return nil, err
	}
	if e := s.refuseIfDamaged(); e != nil {
		return nil, e
	}
	now := s.now().Unix()
	body, holder, req, err := parseGrantBody(r.f.Grant, now)
	r.rec.Holder, r.rec.Requested = body.Holder, caveatsJSON(body.Caveats)
	// The rate is counted before the proof is checked: a caller past its
	// rate costs no signature check either.
	pol := s.policy.Load()
	if err := s.chargeFor(r, pol, body.Holder); err != nil {
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	digest, err := protocol.GrantDigest(r.f.Grant)
	if err != nil {
		return nil, &protocol.Error{Code: protocol.CodeInvalidParams, Message: "the \"grant\" object cannot be canonicalized: " + shortErr(err)}
	}
	if err := s.checkProof(r, body.Holder, protocol.ProofVerbGrant, digest, now); err != nil {
		return nil, err
	}
	agent, err := s.agent(r, pol, body.Holder)
	if err != nil {
		return nil, err
	}
	if err := checkBounds(req, pol.Bounds(agent)); err != nil {
		return nil, err
	}
	caller := r.caller.policy(body.Holder)
	d := pol.Decide(caller, req, now)
	r.rec.Decision, r.rec.DecidedBy = string(d.Action), &audit.Decider{Rule: d.Rule}
	switch d.Action {
	case policies.Auto:
	case policies.Ask:
		if s.underRemembered(r, agent, &d, req) {
			break // a human approved this already, and had it remembered
		}
		view := s.renderGrant(r, r.rec.RequestID, agent, body.Holder, d)
		view.Remember = rememberChoices(d.Remember)
		a, err := s.waitForHuman(r, view, agent, pol, d.Channels, d.Strong, redecideGrant(caller, req, now, d))
		if err != nil {
			return nil, err
		}
		if a.Remember > 0 {
			m, err := s.startRemembered(r, agent, d, a)
			if err != nil {
				return nil, err
			}
			r.started = m
			r.rec.DecidedBy.Remembered = m.id
		}
	default:
		r.rec.Kind = audit.KindDeny
		return nil, &protocol.Error{Code: protocol.CodeForbidden, Rule: d.Rule, Message: d.Reason,
			Fix: "see what the policy would allow with: parley-grant explain (same flags)"}
	}
	return s.issueGrant(r, holder, d)
}

// redecideGrant decides a waiting GRANT again under a reloaded policy, as
// it was asked at asked (property 9 of a reload): nil when the policy
// decides it as d, else the refusal that ends it.
func redecideGrant(caller policies.Caller, req grant.Request, asked int64, d policies.Decision) func(*policies.Policy) *protocol.Error {
	return func(p *policies.Policy) *protocol.Error {
		n := p.Decide(caller, req, asked)
		// The same grant fields are the same caveats (Request.Caveats).
		if n.Action == d.Action && n.Strong == d.Strong && slices.Equal(n.Channels, d.Channels) &&
			reflect.DeepEqual(n.Grant, d.Grant) {
			return nil
		}
		if n.Action == policies.Deny {
			return &protocol.Error{Code: protocol.CodeForbidden, Rule: n.Rule,
				Message: "the policy was reloaded while the request waited, and it now refuses it: " + n.Reason}
		}
		return &protocol.Error{Code: protocol.CodeConflict,
			Message: "the policy was reloaded while the request waited, and it now decides it differently; ask again"}
	}
}

// issueGrant signs the grant d decided, to holder, and answers with it.
func (s *Server) issueGrant(r *request, holder ed25519.PublicKey, d policies.Decision) (*protocol.Frame, error) {
	cavs := d.Grant.Caveats()
	// Property 3, checked again at the last moment: every issued grant
	// expires, and carries only well-formed caveats of the spec's kinds.
	now := s.now().Unix()
	if d.Grant.Exp <= now {
		return nil, &protocol.Error{Code: protocol.CodeExpired, Message: "the grant's expiry passed while the request waited"}
	}
	for _, cv := range cavs {
		if cv.Check() != nil {
			return nil, fmt.Errorf("refusing to sign caveat %s", cv.Name)
		}
	}
	nonce, err := grant.NewNonce(rand.Reader)
	if err != nil {
		return nil, err
	}
	sg, check := s.grantSigner()
	tok, err := grant.Issue(sg, holder, cavs, now, nonce)
	if err != nil {
		return nil, s.signFailed(r, err)
	}
	r.issued, r.check = true, check
	r.rec.Kind, r.rec.Issued, r.rec.GrantID, r.rec.Expiry = audit.KindIssue, caveatsJSON(cavs), tok.ID(), d.Grant.Exp
	if len(d.Narrowed) > 0 {
		r.rec.Message = "narrowed: " + strings.Join(d.Narrowed, "; ")
	}
	var until int64
	for _, m := range []*rememberedApproval{r.under, r.started} {
		if m != nil {
			until = m.until
		}
	}
	return grantReply(tok, cavs, d.Grant.Exp, r.rec, d.Narrowed, until)
}

// signFailed answers a grant the signer could not sign, with the signer's
// detail in the audit record and the daemon's log. A key service that is
// down, slow or refusing (signer.UnavailableError) is "unavailable" with a
// retry hint: the request may succeed later, and the daemon stays up. The
// agent is not told the key service's addresses.
func (s *Server) signFailed(r *request, err error) error {
	r.rec.Kind, r.rec.Message = audit.KindError, "signing failed: "+err.Error()
	s.logf("signing %s failed: %v", r.rec.RequestID, err)
	var u *signer.UnavailableError
	if errors.As(err, &u) {
		return &protocol.Error{Code: protocol.CodeUnavailable, Message: "the key service did not answer, so no grant was issued",
			Fix: "ask again later; an approver sees the key service's state with: parley-grant status", Retry: u.RetrySeconds()}
	}
	return &protocol.Error{Code: protocol.CodeInternal, Message: "the daemon failed to sign the grant"}
}

func grantReply(tok *grant.Token, cavs []grant.Caveat, exp int64, rec audit.Record, narrowed []string, until int64) (*protocol.Frame, error) {
	// rec.GrantID is tok.ID(), which issueGrant has just hashed.
	res := protocol.GrantResult{Token: tok.Encode(), GrantID: rec.GrantID, Expires: exp, Caveats: cavs, Decision: rec.Decision,
		Rule: rec.DecidedBy.Rule, Approver: rec.DecidedBy.Approver, Channel: rec.DecidedBy.Channel,
		Strength: rec.DecidedBy.Strength, Narrowed: narrowed, RequestID: rec.RequestID,
		Remembered: rec.DecidedBy.Remembered, Until: until}
	return protocol.GrantReplyFrame(&res)
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

// waitForHuman queues view for approval, tells the requester the match code
// and where to approve, and blocks until a human decides, the request times
// out, the requester goes away (which withdraws it), or a reloaded policy
// decides it differently (redecide says how; nil when it decides the same).
// The approval and who gave it go into the request's record.
func (s *Server) waitForHuman(r *request, view protocol.PendingView, agent string, pol *policies.Policy,
	chans []policies.Channel, strong bool, redecide func(*policies.Policy) *protocol.Error) (Approval, error) {
	for _, ch := range chans {
		view.Channels = append(view.Channels, string(ch))
	}
	view.Strong = strong
	cfg := s.cfg.Load()
	if base := cfg.PhoneURL(); base != "" && slices.Contains(view.Channels, string(policies.Phone)) {
		view.Link = base + "/r/" + view.ID
	}
	timeout := cfg.ApprovalTimeout.Duration
	view.Created = s.now().Unix()
	view.Expires = s.now().Add(timeout).Unix()
	it, err := s.queue.add(view, agent, r.caller.Identity.UID, pol.MaxPending(agent), pol, redecide)
	if err != nil {
		return Approval{}, err
	}
	// A request waiting for a human is not being issued (sigcheck.go).
	s.issuing.Add(-1)
	defer s.issuing.Add(1)
	r.event(fmt.Sprintf("waiting for approval of %s: confirm code %s", view.ID, it.code), map[string]any{
		"request": view.ID, "code": it.code, "channels": view.Channels, "strong": strong, "expires": view.Expires,
	})
	a := s.queue.wait(r.ctx, it, timeout)
	r.rec.DecidedBy.Approver, r.rec.DecidedBy.Channel, r.rec.DecidedBy.Strength = a.Approver, a.Channel, strength(a)
	if !a.Approved {
		code := a.Code
		if code == "" {
			code = protocol.CodeDenied
		}
		return a, &protocol.Error{Code: code, Message: a.Reason}
	}
	r.approval = &a
	// The human approved what the policy in force then decided. A reload
	// that came after the approval is checked here; one before it ended
	// the request already if it decided differently.
	if cur := s.policy.Load(); cur != it.decidedBy() {
		if e := redecide(cur); e != nil {
			return a, e
		}
	}
	return a, nil
}

// explain answers which rule would decide a GRANT and what it would issue,
// signing nothing.
func (s *Server) explain(r *request) (*protocol.Frame, error) {
	if err := s.refuseIfLocked(); err != nil {
		return nil, err
	}
	now := s.now().Unix()
	body, _, req, err := parseGrantBody(r.f.Grant, now)
	r.rec.Holder = body.Holder
	pol := s.policy.Load()
	if err := s.chargeFor(r, pol, body.Holder); err != nil {
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	d := pol.Decide(r.caller.policy(body.Holder), req, now)
	r.rec.Decision, r.rec.DecidedBy = "ok", &audit.Decider{Rule: d.Rule}
	// A GRANT a remembered approval covers is issued at once, with its
	// expiry cut to the slice: say so, as the GRANT would do it.
	var under *rememberedApproval
	if d.Action == policies.Ask {
		if m, exp, at := s.coveringRemembered(r, d.Agent, d); m != nil {
			cutToSlice(&d, m, req, exp, at)
			under = m
		}
	}
	out := map[string]any{
		"action": d.Action, "agent": d.Agent, "rule": d.Rule, "reason": d.Reason,
		"narrowed": d.Narrowed, "channels": d.Channels, "strong": d.Strong,
	}
	if under != nil {
		out["remembered"], out["until"] = under.id, under.until
	}
	if d.Action != policies.Deny {
		cavs := d.Grant.Caveats()
		out["caveats"] = cavs
		out["expires"] = d.Grant.Exp
		words := make([]string, len(cavs))
		for i, cv := range cavs {
			words[i] = lens.DescribeCaveat(cv)
		}
		out["allows"] = words
	}
	if name, ok := pol.AgentFor(r.caller.policy(body.Holder)); ok {
		if err := checkBounds(req, pol.Bounds(name)); err != nil {
			out["action"], out["reason"] = policies.Deny, err.(*protocol.Error).Message
		}
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
func (s *Server) consent(r *request) (*protocol.Frame, error) {
	if err := s.refuseIfLocked(); err != nil {
		return nil, err
	}
	if e := s.refuseIfDamaged(); e != nil {
		return nil, e
	}
	f := r.f
	now := s.now().Unix()
	r.rec.Holder = f.Holder
	pol := s.policy.Load()
	if err := s.chargeFor(r, pol, f.Holder); err != nil {
		return nil, err
	}
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
	// The service's summary is its own words: the record keeps a
	// neutralized copy (the audit log bounds it); the hash binds the real
	// proposal anyway.
	logged := cr
	logged.Summary = safe(cr.Summary)
	r.rec.Requested = mustJSON(logged)
	if err := s.checkProof(r, f.Holder, protocol.ProofVerbConsent, cr.Hash, now); err != nil {
		return nil, err
	}
	agent, err := s.agent(r, pol, f.Holder)
	if err != nil {
		return nil, err
	}
	// The proposal is parsed once, here; its hash, the policy's facts
	// and the human's rendering all come from this parse (property 9).
	prop, err := pickProposal(f.Proposal, cr.Proposal)
	if err != nil {
		return nil, err
	}
	if cr.Principal != s.principal {
		return nil, &protocol.Error{Code: protocol.CodeConflict, Message: "the consent request is not for this daemon's principal",
			Fix: "pass the consent_required error exactly as the service sent it; it names the principal"}
	}
	if err := grant.CheckConsent(cr, f.Service, prop, now); err != nil {
		// CheckConsent's codes (§7) are the protocol's codes of the same
		// names: conflict, expired and invalid_params.
		code := protocol.CodeConflict
		var ge *grant.Error
		if errors.As(err, &ge) {
			switch c := protocol.Code(ge.Code); c {
			case protocol.CodeExpired, protocol.CodeInvalidParams:
				code = c
			}
		}
		return nil, &protocol.Error{Code: code, Message: "the consent does not match the proposal: " + shortErr(err),
			Fix: "pass the proposal exactly as the service sent it, and the consent from the same service"}
	}
	if err := checkShowable(prop, pol.Bounds(agent)); err != nil {
		return nil, err
	}
	facts := policies.ConsentFacts{Service: f.Service, Capability: prop.Capability, Cost: prop.Cost,
		Risk: prop.Risk, Expires: prop.Expires, Now: now}
	caller := r.caller.policy(f.Holder)
	d := pol.DecideConsent(caller, facts)
	r.rec.DecidedBy = &audit.Decider{Rule: d.Rule}
	if d.Action != policies.Ask {
		r.rec.Kind, r.rec.Decision = audit.KindDeny, string(d.Action)
		return nil, &protocol.Error{Code: protocol.CodeForbidden, Rule: d.Rule, Message: d.Reason}
	}
	r.rec.Decision = string(policies.Ask)
	// The consent never outlives the proposal, nor the policy's cap.
	expiry := func(d policies.ConsentDecision) int64 {
		exp := min(cr.Expires, prop.Expires)
		if d.Expires != 0 {
			exp = min(exp, d.Expires)
		}
		return exp
	}
	shown := grant.ConsentCaveats(f.Service, prop.Capability, cr.Hash, expiry(d))
	view, err := s.renderConsent(r, r.rec.RequestID, agent, f.Holder, f.Service, prop, shown, d)
	if err != nil {
		return nil, err
	}
	redecide := func(p *policies.Policy) *protocol.Error {
		n := p.DecideConsent(caller, facts)
		if n.Action == d.Action && n.Strong == d.Strong && slices.Equal(n.Channels, d.Channels) && n.Expires == d.Expires {
			return nil
		}
		if n.Action != policies.Ask {
			return &protocol.Error{Code: protocol.CodeForbidden, Rule: n.Rule,
				Message: "the policy was reloaded while the consent waited, and it now refuses it: " + n.Reason}
		}
		return &protocol.Error{Code: protocol.CodeConflict,
			Message: "the policy was reloaded while the consent waited, and it now decides it differently; ask again"}
	}
	if _, err := s.waitForHuman(r, view, agent, pol, d.Channels, d.Strong, redecide); err != nil {
		return nil, err
	}
	exp := expiry(d)
	if exp <= s.now().Unix() {
		return nil, &protocol.Error{Code: protocol.CodeExpired, Message: "the proposal expired while waiting for approval"}
	}
	cr.Expires = exp
	nonce, err := grant.NewNonce(rand.Reader)
	if err != nil {
		return nil, err
	}
	now = s.now().Unix()
	sg, check := s.grantSigner()
	tok, err := grant.IssueConsent(sg, holder, cr, now, nonce)
	if err != nil {
		return nil, s.signFailed(r, err)
	}
	cavs := grant.ConsentCaveats(f.Service, prop.Capability, cr.Hash, exp)
	r.issued, r.check = true, check
	r.rec.Kind, r.rec.Issued, r.rec.GrantID, r.rec.Expiry = audit.KindConsent, caveatsJSON(cavs), tok.ID(), exp
	return grantReply(tok, cavs, exp, r.rec, nil, 0)
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
