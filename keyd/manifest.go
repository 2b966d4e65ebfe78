package keyd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
)

var manifestVerbs = []protocol.ManifestVerb{
	{Name: protocol.VerbHello, Role: "any", Summary: "This manifest."},
	{Name: protocol.VerbGrant, Role: "agent", Summary: "Ask for a root grant to your key; EVENTs carry the match code while a human decides.",
		Params: map[string]string{"grant": "{holder: string — ed25519 key, caveats: any[] — §6.3 caveats}", "proof": "{key: string, ts: int, sig: string} — verb GRANT, target b64url(sha256(canonical(grant))), aud principal"}},
	{Name: protocol.VerbExplain, Role: "agent", Summary: "Which rule would decide a GRANT and what it would issue; signs nothing.",
		Params: map[string]string{"grant": "{holder: string, caveats: any[]}"}},
	{Name: protocol.VerbConsent, Role: "agent", Summary: "Ask for a consent grant (§6.6) for one proposal; always decided by a human.",
		Params: map[string]string{"service": "string", "consent": "any — consent object or consent_required ERROR frame", "proposal": "any — proposal or PROPOSALS frame", "holder": "string — ed25519 key", "proof": "{key, ts, sig} — verb CONSENT, target the consent hash, aud principal"}},
	{Name: protocol.VerbPending, Role: "approver", Summary: "List requests waiting for a human."},
	{Name: protocol.VerbApprove, Role: "approver", Summary: "Approve a waiting request with the match code the requester was shown.",
		Params: map[string]string{"request": "string", "match": "string", "channel?": "terminal|desktop"}},
	{Name: protocol.VerbDeny, Role: "approver", Summary: "Deny a waiting request.", Params: map[string]string{"request": "string"}},
	{Name: protocol.VerbWatch, Role: "approver", Summary: "Stream pending requests, their ends and the audit log's signed checkpoints as EVENTs."},
	{Name: protocol.VerbAudit, Role: "approver", Summary: "Read the audit log: a page of records, as stored and rendered.",
		Params: map[string]string{"audit?": "{from?: int — seq, since?: int, until?: int — unix seconds, grant?: string, limit?: int, wait?: bool}"}},
	{Name: protocol.VerbLock, Role: "approver", Summary: "Stop button: refuse every new request and withdraw every waiting one until UNLOCK; survives a restart.",
		Params: map[string]string{"reason?": "string — for the audit log"}},
	{Name: protocol.VerbUnlock, Role: "approver", Summary: "Lift the lock; refused to an approver who may also act as an agent."},
}

// hello answers HELLO with the daemon's manifest for this caller.
func (s *Server) hello(req *request) (*protocol.Frame, error) {
	cfg := s.cfg.Load()
	r := req.caller.Roles
	id := req.caller.Identity
	pol := s.policy.Load()
	m := protocol.Manifest{
		Service: protocol.ManifestService{ID: "parley-keyd", Name: "parley-keyd",
			Summary: "Holds the principal key; issues attenuated and consent grants by policy and human approval."},
		Version: protocol.DaemonVersion, Protocol: protocol.Version, Principal: s.principal,
		Limits: protocol.ManifestLimits{Frame: protocol.MaxFrame, Inflight: maxInflight, Caveats: grant.MaxRequestCaveats,
			ApprovalTimeout: int(cfg.ApprovalTimeout.Seconds()), ProofWindow: 300},
		Channels: s.channels(),
		Caller:   protocol.ManifestCaller{User: id.User, UID: id.UID, PID: id.PID, Weak: r.Weak},
	}
	if r.Agent {
		m.Caller.Roles = append(m.Caller.Roles, "agent")
		if name, ok := pol.AgentFor(req.caller.policy("")); ok {
			m.Caller.Agent = name
			m.Limits.MaxPending = pol.MaxPending(name)
		}
		m.May = pol.Allowed(req.caller.policy(""))
	}
	if r.Approver {
		m.Caller.Roles = append(m.Caller.Roles, "approver")
		m.Key = s.keyStatus(req.ctx)
	}
	if st, ok := s.LockState(); ok {
		m.Locked = lockView(st)
	}
	now := s.now().Unix()
	for _, p := range s.previous {
		if p.Until > now {
			m.Previous = append(m.Previous, p)
		}
	}
	for _, v := range manifestVerbs {
		if v.Role == "any" || (v.Role == "agent" && r.Agent) || (v.Role == "approver" && r.Approver) {
			m.Verbs = append(m.Verbs, v)
		}
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	return &protocol.Frame{Kind: protocol.KindBrief, Data: raw}, nil
}

// channels lists the approval channels that can reach a human right now.
func (s *Server) channels() []string {
	ch := []string{"terminal"}
	s.queue.mu.Lock()
	n := len(s.queue.notifiers)
	s.queue.mu.Unlock()
	if n > 0 {
		ch = append(ch, "desktop")
	}
	if s.cfg.Load().PhoneURL() != "" {
		ch = append(ch, "phone")
	}
	return ch
}

// keyCheckTimeout bounds the health check behind an approver's HELLO.
const keyCheckTimeout = 5 * time.Second

// keyStatus describes the signer and checks, within keyCheckTimeout, that it
// answers, when the signer can tell (the backends of keyd/signer can).
func (s *Server) keyStatus(ctx context.Context) *protocol.ManifestKey {
	h, ok := s.signer.(signer.Health)
	if !ok {
		return nil
	}
	d := h.Describe()
	k := &protocol.ManifestKey{Backend: d.Backend, Key: d.Key, Version: d.Version, Answers: true}
	ctx, cancel := context.WithTimeout(ctx, keyCheckTimeout)
	defer cancel()
	if err := h.Check(ctx); err != nil {
		var u *signer.UnavailableError
		k.Problem = keyProblem(err)
		if errors.As(err, &u) {
			// Whether the service answered and refused, or did not
			// answer at all, with the cause: a 403 is not an outage.
			k.Answers, k.Refuses, k.Problem = u.Answered, u.Answered, keyProblem(u.Err)
		}
	}
	return k
}

// keyProblem is a backend's error for status: one line, its cause kept.
func keyProblem(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 300 {
		s = strings.ToValidUTF8(s[:300], "") + "…"
	}
	return s
}
