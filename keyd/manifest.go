package keyd

import (
	"encoding/json"
	"fmt"

	"github.com/parley-keyd/parley-keyd/grant"
)

// DaemonVersion is the daemon's release, reported by HELLO.
const DaemonVersion = "0.1.0"

// Manifest is the data of a BRIEF reply to HELLO: everything a client needs
// to speak to the daemon without documentation.
type Manifest struct {
	Service   ManifestService `json:"service"`
	Version   string          `json:"version"`
	Protocol  int             `json:"protocol"`
	Principal string          `json:"principal"`
	Limits    ManifestLimits  `json:"limits"`
	Channels  []string        `json:"channels"`
	Caller    ManifestCaller  `json:"caller"`
	// May is what the policy lets this caller ask for: per rule, whether it
	// is issued at once or needs approval.
	May   any            `json:"may,omitempty"`
	Verbs []ManifestVerb `json:"verbs"`
}

// ManifestService names the daemon as a Parley BRIEF names a service.
type ManifestService struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Summary string `json:"summary"`
}

// ManifestLimits are the bounds the daemon enforces on this caller.
type ManifestLimits struct {
	Frame           int `json:"frame"`
	Inflight        int `json:"inflight"`
	Caveats         int `json:"caveats"`
	ApprovalTimeout int `json:"approval_timeout"`
	ProofWindow     int `json:"proof_window"`
	MaxPending      int `json:"max_pending,omitempty"`
}

// ManifestCaller is who the daemon thinks the caller is.
type ManifestCaller struct {
	User  string   `json:"user"`
	UID   uint32   `json:"uid"`
	PID   int32    `json:"pid"`
	Roles []string `json:"roles"`
	Agent string   `json:"agent,omitempty"`
	Weak  bool     `json:"weak,omitempty"`
}

// ManifestVerb describes one verb in the compact parameter schema of §4.1.1.
type ManifestVerb struct {
	Name    string            `json:"name"`
	Role    string            `json:"role"`
	Summary string            `json:"summary"`
	Params  map[string]string `json:"params,omitempty"`
}

var manifestVerbs = []ManifestVerb{
	{Name: VerbHello, Role: "any", Summary: "This manifest."},
	{Name: VerbGrant, Role: "agent", Summary: "Ask for a root grant to your key; EVENTs carry the match code while a human decides.",
		Params: map[string]string{"grant": "{holder: string — ed25519 key, caveats: any[] — §6.3 caveats}", "proof": "{key: string, ts: int, sig: string} — verb GRANT, target b64url(sha256(canonical(grant))), aud principal"}},
	{Name: VerbExplain, Role: "agent", Summary: "Which rule would decide a GRANT and what it would issue; signs nothing.",
		Params: map[string]string{"grant": "{holder: string, caveats: any[]}"}},
	{Name: VerbConsent, Role: "agent", Summary: "Ask for a consent grant (§6.6) for one proposal; always decided by a human.",
		Params: map[string]string{"service": "string", "consent": "any — consent object or consent_required ERROR frame", "proposal": "any — proposal or PROPOSALS frame", "holder": "string — ed25519 key", "proof": "{key, ts, sig} — verb CONSENT, target the consent hash, aud principal"}},
	{Name: VerbPending, Role: "approver", Summary: "List requests waiting for a human."},
	{Name: VerbApprove, Role: "approver", Summary: "Approve a waiting request with the match code the requester was shown.",
		Params: map[string]string{"request": "string", "match": "string", "channel?": "terminal|desktop"}},
	{Name: VerbDeny, Role: "approver", Summary: "Deny a waiting request.", Params: map[string]string{"request": "string"}},
	{Name: VerbWatch, Role: "approver", Summary: "Stream pending requests and their ends as EVENTs."},
}

func (c *conn) hello(f *Frame) (*Frame, error) {
	cfg := c.s.cfg.Load()
	r := cfg.roles(c.id)
	pol := c.s.policy.Load()
	m := Manifest{
		Service: ManifestService{ID: "parley-keyd", Name: "parley-keyd",
			Summary: "Holds the principal key; issues attenuated and consent grants by policy and human approval."},
		Version: DaemonVersion, Protocol: Version, Principal: c.s.principal,
		Limits: ManifestLimits{Frame: MaxFrame, Inflight: maxInflight, Caveats: grant.MaxRequestCaveats,
			ApprovalTimeout: int(cfg.ApprovalTimeout.Seconds()), ProofWindow: 300},
		Channels: c.s.channels(),
		Caller:   ManifestCaller{User: c.id.User, UID: c.id.UID, PID: c.id.PID, Weak: r.Weak},
	}
	if r.Agent {
		m.Caller.Roles = append(m.Caller.Roles, "agent")
		if name, ok := pol.AgentFor(c.caller("")); ok {
			m.Caller.Agent = name
			m.Limits.MaxPending = pol.MaxPending(name)
		}
		m.May = pol.Allowed(c.caller(""))
	}
	if r.Approver {
		m.Caller.Roles = append(m.Caller.Roles, "approver")
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
	return &Frame{Kind: KindBrief, Data: raw}, nil
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
