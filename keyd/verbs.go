package keyd

import (
	"fmt"

	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// The daemon's verbs, in one table (docs/protocol.md).
//
// To add a verb: its name in keyd/protocol, one entry in the table below (in
// the order HELLO lists it), and its handler, which runs once the caller's
// role was checked. The table is what the rest of the daemon reads: the
// reader's unknown-verb check, the dispatch, the role check, HELLO's
// manifest, the reader's inline rule, when a request counts against the
// rate, and the record kind of a refusal. Two rules of one verb each stay
// with their code: one WATCH per connection (readLoop), and an UNLOCK past
// the rate refused even to an approver (chargeFor).
//
// TestVerbsAgreeEverywhere fails for a verb that keyd/protocol defines and
// the table does not hold, and for a change to HELLO's list of verbs until
// keyd/testdata/manifest_verbs.json is rewritten (-update-verbs).

// role is who may call a verb. It comes from the kernel's uid (Roles),
// never from the frame.
type role int

const (
	roleAny      role = iota // any caller the daemon accepted
	roleAgent                // an agent user
	roleApprover             // an approver user, or the paired phone
)

func (r role) String() string {
	switch r {
	case roleAgent:
		return "agent"
	case roleApprover:
		return "approver"
	}
	return "any"
}

// verb is one entry of the table.
type verb struct {
	name string
	role role
	// does says what an approver verb does, for the refusal an agent that
	// sends it gets ("approve requests"); "" is "use NAME".
	does string
	// inline lets the connection's reader run a lone request itself
	// (conn.runInline). A verb that streams, or waits as a rule, is not.
	inline bool
	// holder: the request names a holder key, and counts against the rate
	// once its step has read the key (chargeFor); any other request counts
	// before its step runs.
	holder bool
	// refused is the record kind of a refusal that is no timeout,
	// withdrawal or failure of the daemon (refusalKind); "" is
	// audit.KindRequest.
	refused string
	// summary and params are what HELLO's manifest says of the verb.
	summary string
	params  map[string]string
	handle  func(*Server, *request) (*protocol.Frame, error)
}

// verbTable is the table, in the order HELLO lists the verbs; verbByName
// indexes it. They are filled in init, as HELLO's handler reads them.
var (
	verbTable  []verb
	verbByName map[string]*verb
)

func init() {
	verbTable = []verb{
		{name: protocol.VerbHello, role: roleAny, inline: true, handle: (*Server).hello,
			summary: "This manifest."},
		{name: protocol.VerbGrant, role: roleAgent, inline: true, holder: true, refused: audit.KindDeny, handle: (*Server).grantRequest,
			summary: "Ask for a root grant to your key; EVENTs carry the match code while a human decides.",
			params: map[string]string{"grant": "{holder: string — ed25519 key, caveats: any[] — §6.3 caveats}",
				"proof": "{key: string, ts: int, sig: string} — verb GRANT, target b64url(sha256(canonical(grant))), aud principal"}},
		{name: protocol.VerbExplain, role: roleAgent, inline: true, holder: true, handle: (*Server).explain,
			summary: "Which rule would decide a GRANT and what it would issue; signs nothing.",
			params:  map[string]string{"grant": "{holder: string, caveats: any[]}"}},
		{name: protocol.VerbConsent, role: roleAgent, inline: true, holder: true, refused: audit.KindDeny, handle: (*Server).consent,
			summary: "Ask for a consent grant (§6.6) for one proposal; always decided by a human.",
			params: map[string]string{"service": "string", "consent": "any — consent object or consent_required ERROR frame",
				"proposal": "any — proposal or PROPOSALS frame", "holder": "string — ed25519 key",
				"proof": "{key, ts, sig} — verb CONSENT, target the consent hash, aud principal"}},
		{name: protocol.VerbPending, role: roleApprover, does: "list pending requests", inline: true, handle: (*Server).pending,
			summary: "List requests waiting for a human."},
		{name: protocol.VerbApprove, role: roleApprover, does: "approve requests", inline: true, refused: audit.KindDecide,
			handle:  func(s *Server, r *request) (*protocol.Frame, error) { return s.decide(r, true) },
			summary: "Approve a waiting request with the match code the requester was shown.",
			params: map[string]string{"request": "string", "match": "string", "channel?": "terminal|desktop",
				"remember?": "string — keep approving this request for that long, one of the request's remember choices (2h)"}},
		{name: protocol.VerbDeny, role: roleApprover, does: "deny requests", inline: true, refused: audit.KindDecide,
			handle:  func(s *Server, r *request) (*protocol.Frame, error) { return s.decide(r, false) },
			summary: "Deny a waiting request.", params: map[string]string{"request": "string"}},
		{name: protocol.VerbWatch, role: roleApprover, does: "watch pending requests", handle: (*Server).watch,
			summary: "Stream pending requests, their ends and the audit log's signed checkpoints as EVENTs."},
		{name: protocol.VerbAudit, role: roleApprover, handle: (*Server).auditRead,
			summary: "Read the audit log: a page of records, as stored and rendered.",
			params:  map[string]string{"audit?": "{from?: int — seq, since?: int, until?: int — unix seconds, grant?: string, limit?: int, wait?: bool}"}},
		{name: protocol.VerbLock, role: roleApprover, does: "lock the daemon", inline: true, handle: (*Server).lockRequest,
			summary: "Stop button: refuse every new request and withdraw every waiting one until UNLOCK; survives a restart.",
			params:  map[string]string{"reason?": "string — for the audit log"}},
		{name: protocol.VerbUnlock, role: roleApprover, does: "unlock the daemon", inline: true, handle: (*Server).unlockRequest,
			summary: "Lift the lock; refused to an approver who may also act as an agent."},
		// Approvers see and end every remembered approval, an agent its
		// own (remembered.go checks which, as the role alone cannot).
		{name: protocol.VerbRemembered, role: roleAny, inline: true, handle: (*Server).rememberedRequest,
			summary: "List remembered approvals: an approver sees all, an agent its own.",
			params:  map[string]string{"holder?": "string — your key, for an agent the policy knows by its key"}},
		{name: protocol.VerbForget, role: roleAny, inline: true, handle: (*Server).forgetRequest,
			summary: "End a remembered approval at once (an approver, or the agent it serves).",
			params:  map[string]string{"request": "string — the remembered approval's id", "reason?": "string — for the audit log"}},
	}
	verbByName = make(map[string]*verb, len(verbTable))
	for i := range verbTable {
		v := &verbTable[i]
		if verbByName[v.name] != nil || v.handle == nil {
			panic("keyd: verb " + v.name + " is in the table twice or has no handler")
		}
		verbByName[v.name] = v
	}
}

// lookupVerb returns the table's entry for name, matched exactly.
func lookupVerb(name string) (*verb, bool) {
	v, ok := verbByName[name]
	return v, ok
}

// unknownVerb is the refusal of a verb the table does not hold.
func unknownVerb(name string) *protocol.Error {
	return &protocol.Error{Code: protocol.CodeBadFrame, Message: fmt.Sprintf("unknown verb %q", name),
		Fix: "send HELLO to list the verbs"}
}

// allows refuses c the verb unless c has its role. Property 4: an agent
// cannot approve its own request.
func (v *verb) allows(c Caller) error {
	switch {
	case v.role == roleAgent && !c.Roles.Agent:
		return &protocol.Error{Code: protocol.CodeForbidden,
			Message: fmt.Sprintf("%s may approve but not ask for grants (%s)", c.phrase(), v.name)}
	case v.role == roleApprover && !c.Roles.Approver:
		does := v.does
		if does == "" {
			does = "use " + v.name
		}
		return &protocol.Error{Code: protocol.CodeForbidden,
			Message: fmt.Sprintf("%s is an agent and may not %s", c.phrase(), does),
			Fix:     "a human approves with parley-grant approve, as a user listed in access.approver_users"}
	}
	return nil
}

// manifest is what HELLO says of the verb.
func (v *verb) manifest() protocol.ManifestVerb {
	return protocol.ManifestVerb{Name: v.name, Role: v.role.String(), Summary: v.summary, Params: v.params}
}

// may reports whether a caller with roles r may call the verb.
func (v *verb) may(r Roles) bool {
	return v.role == roleAny || v.role == roleAgent && r.Agent || v.role == roleApprover && r.Approver
}
