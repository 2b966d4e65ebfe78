package audit

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
)

// The kinds of audit record. Log.Append refuses any other kind, so that a
// typo cannot produce a record that tools reading the log do not recognise.
const (
	KindIssue        = "issue"         // a grant was issued
	KindConsent      = "consent"       // a consent grant (§6.6) was issued
	KindDeny         = "deny"          // a request was refused by policy or by the human
	KindTimeout      = "timeout"       // an approval timed out (fail closed: no grant)
	KindWithdrawn    = "withdrawn"     // the requester went away before a decision
	KindError        = "error"         // a request failed inside the daemon
	KindPolicyReload = "policy-reload" // the policy was reloaded (or a reload was refused)
	KindStart        = "start"         // the daemon started
	KindStop         = "stop"          // the daemon stopped cleanly
	// KindRequest is a request that asked for no grant (HELLO, EXPLAIN,
	// PENDING, WATCH, AUDIT, …): its decision is "ok" or the code of its
	// refusal. With the kinds above, every request the daemon accepted
	// from a caller has exactly one record, whatever its outcome.
	KindRequest = "request"
	// KindDecide is an approver's APPROVE or DENY of a waiting request,
	// named by Target: "approved", "denied", or the code of its refusal.
	KindDecide = "decide"
	// KindRecovered says what the log found and repaired when it was opened
	// or reopened: a torn or NUL-filled tail it cut, a previous run that ended
	// without its stop checkpoint, a file moved, deleted or truncated under
	// the daemon. Only the log writes it.
	KindRecovered = "recovered"
	// KindCheckpoint holds a signed checkpoint (see Checkpoint). Only the
	// log writes it.
	KindCheckpoint = "checkpoint"
	KindLock       = "lock"   // an approver locked the daemon: every request is refused
	KindUnlock     = "unlock" // an approver lifted the lock
	// KindAcknowledged follows the checkpoint that begins a new segment
	// after an admin acknowledged damage the scrub found (parley-keyd audit
	// acknowledge): Damage names it, Message gives the admin's reason,
	// DecidedBy the admin. Only the log writes it.
	KindAcknowledged = "acknowledged"
	// KindRemember is a remembered approval starting (issue 24): the
	// human approved a GRANT and had it remembered. Remembered says which,
	// for whom and until when; Issued holds the approved caveats,
	// DecidedBy the approver. KindForget is its end: Remembered names it,
	// Decision says why (forgotten, locked, reloaded, expired), DecidedBy
	// and Message who and in what words.
	KindRemember = "remember"
	KindForget   = "forget"
)

// KindUnsigned says that a checkpoint was due and its signer could not sign
// it (a key service that was down at the daemon's stop), and why: the
// records since the last checkpoint are covered by none until the next.
// Only the log writes it.
const KindUnsigned = "unsigned"

// kinds are the kinds a caller may append.
var kinds = map[string]bool{
	KindIssue: true, KindConsent: true, KindDeny: true, KindTimeout: true,
	KindWithdrawn: true, KindError: true, KindPolicyReload: true,
	KindStart: true, KindStop: true, KindRequest: true, KindDecide: true, KindLock: true, KindUnlock: true,
	KindRemember: true, KindForget: true,
}

// Record is one line of the audit log. Seq, Prev and Time are filled in
// by Log.Append; whatever the caller puts there is overwritten, and so are
// Cut, Folded and Checkpoint, which only the log sets.
//
// A record never holds a signature, a token or any key material: Holder is
// the holder's public key, Requested and Issued are caveat lists, GrantID is
// an identifier, not the grant. (A checkpoint's signature is over the log's
// head, not a grant, and cannot be used as one: see Checkpoint.)
type Record struct {
	Seq  uint64 `json:"seq"`
	Prev string `json:"prev"`
	Time string `json:"time"` // RFC 3339 with nanoseconds, UTC
	Kind string `json:"kind"`
	// RequestID is the id the daemon gave the request (never one a caller
	// chose).
	RequestID string `json:"request_id,omitempty"`
	// Verb is the request's verb (GRANT, CONSENT, HELLO, …), or empty for a
	// frame that could not be read as a request.
	Verb string `json:"verb,omitempty"`
	// Target is the waiting request an APPROVE or DENY names.
	Target    string          `json:"target,omitempty"`
	Caller    *Caller         `json:"caller,omitempty"`
	Holder    string          `json:"holder,omitempty"`
	Requested json.RawMessage `json:"requested,omitempty"`
	Issued    json.RawMessage `json:"issued,omitempty"`
	Decision  string          `json:"decision,omitempty"`
	DecidedBy *Decider        `json:"decided_by,omitempty"`
	GrantID   string          `json:"grant_id,omitempty"`
	Expiry    int64           `json:"expiry,omitempty"` // unix seconds
	Message   string          `json:"message,omitempty"`
	// Cut names the fields Append cut to their bound, with the size and
	// hash of what was there (see Bounds).
	Cut map[string]Cut `json:"cut,omitempty"`
	// Folded is set on a record that stands for repeats (AppendFolded).
	Folded *Folded `json:"folded,omitempty"`
	// Checkpoint is set on records of kind "checkpoint".
	Checkpoint *checkpoint.Checkpoint `json:"checkpoint,omitempty"`
	// Damage is set on records of kind "acknowledged": the damage the
	// admin acknowledged.
	Damage *Damage `json:"damage,omitempty"`
	// Remembered is set on records of kind "remember" and "forget".
	Remembered *Remembered `json:"remembered,omitempty"`
}

// Remembered is a remembered approval as its records name it: its id, the
// policy agent and the uid it serves, the rule that allowed it, its end
// (unix seconds) and each grant's lifetime under it (seconds).
type Remembered struct {
	ID    string `json:"id"`
	Agent string `json:"agent"`
	UID   uint32 `json:"uid"`
	Rule  string `json:"rule,omitempty"`
	Until int64  `json:"until,omitempty"`
	Slice int64  `json:"slice,omitempty"`
}

// Caller is the requester as the kernel identified it (see peercred.Get),
// or the paired phone the phone page relayed for (Device). Exe and Unit are
// what the daemon observed in /proc, not proven: another program of the
// same uid can appear as them, so their keys say so.
type Caller struct {
	UID    uint32 `json:"uid"`
	GID    uint32 `json:"gid"`
	PID    int32  `json:"pid"`
	User   string `json:"user,omitempty"`
	Exe    string `json:"exe_observed,omitempty"`
	Unit   string `json:"unit_observed,omitempty"`
	Device string `json:"device,omitempty"`
}

// UnmarshalJSON reads a caller, also from records written before the keys
// "exe" and "unit" said that they were observed.
func (c *Caller) UnmarshalJSON(b []byte) error {
	type plain Caller
	var v struct {
		plain
		Exe  string `json:"exe"`
		Unit string `json:"unit"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*c = Caller(v.plain)
	if c.Exe == "" {
		c.Exe = v.Exe
	}
	if c.Unit == "" {
		c.Unit = v.Unit
	}
	return nil
}

// Decider says who or what decided a request: a policy rule, or a human
// approver on a channel of some strength.
type Decider struct {
	Rule     string `json:"rule,omitempty"`
	Approver string `json:"approver,omitempty"` // user name, or uid when it has no name
	Channel  string `json:"channel,omitempty"`
	Strength string `json:"strength,omitempty"`
	// Remembered names the remembered approval a grant was issued under
	// (issue 24); Approver and Channel are then who approved that.
	Remembered string `json:"remembered,omitempty"`
}

// Cut describes a field value that Append shortened: its size in bytes and
// the chain-hash encoding (unpadded base64url SHA-256) of its bytes, so that
// someone who holds the original can show it is the one that was cut.
type Cut struct {
	Size   int    `json:"size"`
	SHA256 string `json:"sha256"`
}

// Folded says that a record stands for Count requests alike in everything
// but their request ids and times (AppendFolded): the first at First, the
// last at Last, with up to maxFoldIDs of their request ids.
type Folded struct {
	Count      int      `json:"count"`
	First      string   `json:"first"`
	Last       string   `json:"last"`
	RequestIDs []string `json:"request_ids,omitempty"`
}

// CutMarker ends a value that was cut to its bound.
const CutMarker = "…[cut]"

// The bounds of a record, in bytes of each field's value. Append cuts a
// longer value to its bound, ending it with CutMarker, and names the field
// in the record's "cut" with the original's size and hash. Together they
// keep an encoded record under MaxRecord even when every string is made of
// characters that JSON escapes six bytes long, so that no caller can make
// the daemon write a record without bound (issue 10: a refusal's reason of
// 17 KB went into one record whole).
const (
	MaxRecord     = 64 << 10 // an encoded record line, without its newline
	maxShort      = 128      // request_id, holder, decision, grant_id, user, decided_by.*
	maxUnit       = 256
	maxExe        = 1024
	maxMessage    = 2048
	maxCaveats    = 12 << 10 // requested, issued (raw JSON, which is not escaped again)
	maxFoldIDs    = 8
	maxFoldIDSize = 64
)

// chainHash is the encoding of every hash in the log: unpadded base64url
// (RFC 4648 §5) of a SHA-256.
func chainHash(b []byte) string {
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// bound cuts the fields of r to their bounds and records what it cut.
func bound(r *Record) {
	cut := func(name string, v *string, max int) {
		if len(*v) <= max {
			return
		}
		if r.Cut == nil {
			r.Cut = map[string]Cut{}
		}
		r.Cut[name] = Cut{Size: len(*v), SHA256: chainHash([]byte(*v))}
		*v = cutString(*v, max)
	}
	cut("request_id", &r.RequestID, maxShort)
	cut("verb", &r.Verb, maxShort)
	cut("target", &r.Target, maxShort)
	cut("holder", &r.Holder, maxShort)
	cut("decision", &r.Decision, maxShort)
	cut("grant_id", &r.GrantID, maxShort)
	cut("message", &r.Message, maxMessage)
	if c := r.Caller; c != nil {
		cc := *c
		cut("caller.user", &cc.User, maxShort)
		cut("caller.exe_observed", &cc.Exe, maxExe)
		cut("caller.unit_observed", &cc.Unit, maxUnit)
		cut("caller.device", &cc.Device, maxShort)
		r.Caller = &cc
	}
	if d := r.DecidedBy; d != nil {
		dd := *d
		cut("decided_by.rule", &dd.Rule, maxShort)
		cut("decided_by.approver", &dd.Approver, maxShort)
		cut("decided_by.channel", &dd.Channel, maxShort)
		cut("decided_by.strength", &dd.Strength, maxShort)
		cut("decided_by.remembered", &dd.Remembered, maxShort)
		r.DecidedBy = &dd
	}
	if m := r.Remembered; m != nil {
		mm := *m
		cut("remembered.id", &mm.ID, maxShort)
		cut("remembered.agent", &mm.Agent, maxShort)
		cut("remembered.rule", &mm.Rule, maxShort)
		r.Remembered = &mm
	}
	raw := func(name string, v *json.RawMessage) {
		if len(*v) <= maxCaveats {
			return
		}
		if r.Cut == nil {
			r.Cut = map[string]Cut{}
		}
		r.Cut[name] = Cut{Size: len(*v), SHA256: chainHash(*v)}
		// A cut list of caveats is no longer JSON of its kind: it becomes
		// a string holding its beginning, so that it cannot be read as
		// the whole list. Its size stays within the bound once escaped.
		s, _ := json.Marshal(cutString(string(*v), maxCaveats/6-len(CutMarker)))
		*v = s
	}
	raw("requested", &r.Requested)
	raw("issued", &r.Issued)
}

// cutString returns s when it has at most max bytes, else s cut to at most
// max bytes, ending with CutMarker, at a UTF-8 boundary.
func cutString(s string, max int) string {
	if len(s) <= max {
		return s
	}
	n := max - len(CutMarker)
	if n < 0 {
		n = 0
	}
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + CutMarker
}

// cutSize reports the original size of a cut field, for messages.
func (c Cut) String() string { return fmt.Sprintf("%d bytes, sha256 %s", c.Size, c.SHA256) }
