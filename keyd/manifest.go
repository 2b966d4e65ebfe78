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
	for i := range verbTable {
		if v := &verbTable[i]; v.may(r) {
			m.Verbs = append(m.Verbs, v.manifest())
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
