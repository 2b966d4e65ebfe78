package protocol

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
	// Key is where the principal key lives and whether it answers; only
	// approvers are told.
	Key *ManifestKey `json:"key,omitempty"`
	// Previous lists principal keys rotated out that services should still
	// trust until their time: grants they signed live until then at most.
	Previous []PreviousKey `json:"previous,omitempty"`
	// Locked is present while an approver has locked the daemon: every
	// GRANT, CONSENT and EXPLAIN is refused with "locked" until UNLOCK.
	Locked *LockView `json:"locked,omitempty"`
}

// LockView says who locked the daemon, how, when and why.
type LockView struct {
	By      string `json:"by"`
	Channel string `json:"channel"`
	Reason  string `json:"reason,omitempty"`
	At      int64  `json:"at"` // unix seconds
}

// ManifestKey describes the signer of the principal key for an approver:
// its backend, the key in it, the pinned version, and whether a health
// check just now was answered (docs/key-service.md).
type ManifestKey struct {
	Backend string `json:"backend"`
	Key     string `json:"key"`
	Version string `json:"version,omitempty"`
	Answers bool   `json:"answers"`
	// Refuses is set when the backend answers but refuses to sign (a key
	// service's 403: the daemon's token or its policy), so that grants
	// are refused as unavailable although it answers.
	Refuses bool `json:"refuses,omitempty"`
	// Problem says what is wrong when the backend does not answer, or
	// answers with a key that is no longer fit (exportable, a version that
	// may no longer sign).
	Problem string `json:"problem,omitempty"`
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

// PreviousKey is a principal key rotated out, trusted until Until (unix
// seconds).
type PreviousKey struct {
	Key   string `json:"key"`
	Until int64  `json:"until"`
}

// AuditDamage is a WATCH event of message "audit-damage": the daemon's scrub
// found damage in its audit log, and it issues nothing until an admin
// acknowledges it; or, with Cleared, an admin did. Reason is one of the
// stable reasons of audit verify (chain, seq, checkpoint-signature, …).
type AuditDamage struct {
	Reason  string `json:"reason,omitempty"`
	File    string `json:"file,omitempty"`
	Line    int    `json:"line,omitempty"`
	Seq     uint64 `json:"seq,omitempty"`
	Detail  string `json:"detail,omitempty"`
	Found   string `json:"found,omitempty"`
	Message string `json:"message,omitempty"`
	Cleared bool   `json:"cleared,omitempty"`
}
