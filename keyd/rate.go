package keyd

import (
	"fmt"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/parley-keyd/parley-keyd/policies"
)

// The record rate (DESIGN.md property 14). Every request leaves a record
// (property 11), so a caller that sends requests faster than its rate
// would grow the log faster than its rate too, and a full disk stops
// issuance for everyone. Attack: an agent that sends EXPLAIN with a fresh
// holder key each time, on four connections, wrote 19,000–27,000 fsynced
// records in 5 s under a rate of 30 a minute (issue 20 item 2); the fresh
// key made every record unlike the last, so none folded.
//
// So every request counts against its caller's rate, whatever its verb and
// outcome: HELLO, PENDING, a malformed frame, an unknown verb, a refusal
// alike. A caller is an agent of the policy and a uid (as for GRANT since
// issue 10), or, when the policy names no agent for it, its uid alone with
// callerRate. Within its rate a request gets a record of its own, whole.
// Past it:
//
//   - an agent's request is refused with "limit" and a retry;
//   - an approver's request is still answered (an agent that shares the
//     human's OS user, a weak approver, must not keep the human from
//     approving, denying, locking or reading the log by using up the uid's
//     rate), except UNLOCK, which is refused;
//
// and either way its record is cut to what no caller chooses (the caller's
// uid and user, the verb if it is one the daemon knows, the kind and the
// outcome) and folded with its repeats for overRateFold into one counted
// record (audit.Log.AppendFoldedFor). A record that says the daemon's
// state changed is always written whole: an approval or denial of a
// waiting request (there are only as many as the agents' rates let wait),
// a lock that locked (it needs an UNLOCK before it, which the rate bounds).

// callerRate is the requests a minute of a caller the policy names no agent
// for: an approver who is not an agent user, an agent user that no
// [[agent]] matches, a paired phone.
const callerRate = 60

// overRateFold is how long the records of a caller past its rate fold: the
// rate's horizon, a minute. A caller past its rate then adds at most two
// records a minute for each verb and outcome (the first of a run, and the
// count of its repeats), whatever fields it chooses.
const overRateFold = time.Minute

// rateFolder is an AuditSink that folds for a window of its own: the
// daemon's audit.Log.
type rateFolder interface {
	AppendFoldedFor(rec audit.Record, window time.Duration) (uint64, bool, error)
}

// namesHolder reports whether verb names a holder key (verb.holder), which
// decides the policy's agent; its step counts it against the rate once the
// holder is read (chargeFor). Every other verb counts as it enters the
// pipeline.
func namesHolder(verb string) bool {
	v, ok := lookupVerb(verb)
	return ok && v.holder
}

// rateBucket names the bucket a request of c counts against: the agent pol
// names for c asking for holder's key, and c's uid; or, when pol names no
// agent (or c is no agent user), "" and the uid, with callerRate. A paired
// phone has a bucket of its own. who says it in a phrase, for refusals
// and records.
func rateBucket(c Caller, pol *policies.Policy, holder string) (name string, uid uint32, rate int, who bucketWho) {
	if c.Device != "" {
		// A colon is in no agent's name: the bucket is the phone's own.
		return "phone:" + c.Device, 0, callerRate, bucketWho{device: c.Device}
	}
	uid = c.Identity.UID
	if c.Roles.Agent {
		if a, ok := pol.AgentFor(c.policy(holder)); ok {
			return a, uid, pol.Rate(a), bucketWho{agent: a, user: c.Identity.User}
		}
	}
	return "", uid, callerRate, bucketWho{user: c.Identity.User}
}

// bucketWho is what a bucket's phrase is made of, put into words only for
// a request past its rate: under load every request was charged, and
// every one built a phrase that none but a refusal reads.
type bucketWho struct{ device, agent, user string }

func (w bucketWho) String() string {
	switch {
	case w.device != "":
		return "the paired phone " + w.device
	case w.agent != "":
		return fmt.Sprintf("agent %q for user %s", w.agent, w.user)
	}
	return "user " + w.user
}

// overRate counts one request of c against its bucket and reports whether
// the bucket was empty, how long until one request fits, and who the
// bucket is (only when it was empty).
func (s *Server) overRate(c Caller, pol *policies.Policy, holder string) (over bool, retry time.Duration, who string) {
	name, uid, rate, w := rateBucket(c, pol, holder)
	ok, retry := s.limiter.Take(name, uid, rate, s.now())
	if ok {
		return false, retry, ""
	}
	return true, retry, w.String()
}

// chargeFor counts r against its caller's rate, once, as a request for
// holder's key ("" for none). Past the rate it returns the refusal, unless
// r is an approver's request, which is answered anyway (its record folds).
func (s *Server) chargeFor(r *request, pol *policies.Policy, holder string) error {
	if r.charged {
		return nil
	}
	r.charged = true
	over, retry, who := s.overRate(r.caller, pol, holder)
	if !over {
		return nil
	}
	r.over, r.overWho = true, who
	if r.caller.Roles.Approver && !namesHolder(r.f.Verb) && r.f.Verb != protocol.VerbUnlock {
		return nil
	}
	secs := max(int(retry.Seconds()+0.999), 1)
	return &protocol.Error{Code: protocol.CodeLimit, Retry: secs,
		Message: fmt.Sprintf("%s is over its request rate", who)}
}

// changesState reports whether rec says the daemon's state changed: a
// grant, an approval or denial of a waiting request, an unlock. Such a
// record is written whole whatever the rate (see above); a lock that
// locked is written before its request ends (lockRequest).
func changesState(rec *audit.Record) bool {
	switch rec.Kind {
	case audit.KindIssue, audit.KindConsent:
		return true
	case audit.KindDecide:
		return rec.Decision == "approved" || rec.Decision == "denied"
	case audit.KindUnlock:
		return rec.Decision == "unlocked"
	}
	return false
}

// overRecord is the record of a request past its caller's rate: what no
// caller chooses, so that its repeats fold however the caller varies its
// frames. Attack: a fresh holder key, request id, match code, seq, verb
// name or member name, or another program or unit of the same uid, in
// each request, so that no two records are alike.
func overRecord(rec audit.Record, who string) audit.Record {
	out := audit.Record{Kind: rec.Kind, RequestID: rec.RequestID, Decision: rec.Decision,
		Message: "past the rate of " + who + ": requests alike in verb and outcome are counted in one record a minute"}
	if _, ok := lookupVerb(rec.Verb); ok {
		out.Verb = rec.Verb
	}
	switch out.Kind {
	case audit.KindDeny, audit.KindTimeout, audit.KindWithdrawn, audit.KindError, audit.KindDecide:
	default:
		// A LOCK that found the daemon locked, an UNLOCK that found it
		// unlocked: no state changed, and the record folds as a request.
		out.Kind = audit.KindRequest
	}
	if c := rec.Caller; c != nil {
		out.Caller = &audit.Caller{UID: c.UID, User: c.User, Device: c.Device}
	}
	return out
}

// auditOver records a request past its caller's rate, folded with its
// repeats for overRateFold. A failure is logged: the request's outcome
// stands.
func (s *Server) auditOver(rec audit.Record, who string) {
	rec = overRecord(rec, who)
	var err error
	switch a := s.audit.(type) {
	case rateFolder:
		_, _, err = a.AppendFoldedFor(rec, overRateFold)
	case folder:
		_, _, err = a.AppendFolded(rec)
	default:
		_, err = s.audit.Append(rec)
	}
	if err != nil {
		s.logf("audit append failed for %s %s: %v", rec.Kind, rec.RequestID, err)
	}
}
