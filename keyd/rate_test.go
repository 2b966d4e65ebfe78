package keyd

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/parley-keyd/parley-keyd/policies"
)

// The record rate (rate.go, DESIGN.md property 14), in process; the
// hostile callers as real OS users are cmd/parley-keyd's TestRateEveryVerb.

// withRate makes the test agent's rate n a minute.
func withRate(n string) harnessOpt {
	return func(c *Config, o *Options) {
		pol, err := policies.Parse([]byte(strings.Replace(testPolicy, "rate = 100000", "rate = "+n, 1)), "p.toml")
		if err != nil {
			panic(err)
		}
		o.Policy = pol
	}
}

// stopped stops the daemon and waits until its log is closed, with what
// folds still counted written.
func (h *harness) stopped() {
	h.t.Helper()
	h.stop()
	err := <-h.served
	h.served <- err // for the clean-up
}

// TestRateFreshHolderKeys: an agent past its rate that sends EXPLAIN,
// GRANT and HELLO with a fresh holder key each time is refused with
// "limit", and its refusals fold into a record or two per verb, which
// name no holder key, however many it sends.
func TestRateFreshHolderKeys(t *testing.T) {
	h := newHarness(t, withRate("3"), func(c *Config, o *Options) { c.Access = Access{AgentUsers: []string{me(t)}} })
	c := h.client()
	fresh := func() string {
		return grant.FormatPublicKey(newAgentKey(t).Public().(ed25519.PublicKey))
	}
	// Three within the rate: a grant (HELLO, for the principal key the
	// client signs its proofs for, and GRANT) and an EXPLAIN.
	if _, err := c.Grant(ctxT(t), newAgentKey(t), []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.read")}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Explain(ctxT(t), fresh(), []grant.Caveat{grant.Can("mail.read")}); err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := range n {
		var err error
		switch i % 4 {
		case 0:
			_, err = c.Explain(ctxT(t), fresh(), []grant.Caveat{grant.Can("mail.read")})
		case 1:
			_, err = c.Grant(ctxT(t), newAgentKey(t), []grant.Caveat{grant.Can("mail.read")}, nil)
		case 2:
			_, err = c.Hello(ctxT(t))
		case 3:
			_, err = c.Pending(ctxT(t)) // not an approver: refused all the same
		}
		var e *protocol.Error
		if !errors.As(err, &e) || e.Code != protocol.CodeLimit || e.Retry < 1 || !strings.Contains(e.Message, "over its request rate") {
			t.Fatalf("request %d past the rate: %v, want limit with a retry", i, err)
		}
	}
	h.stopped()
	counted := 0
	perVerb := map[string]int{}
	for _, r := range auditRecords(t, h) {
		if r.Decision != string(protocol.CodeLimit) {
			continue
		}
		perVerb[r.Verb]++
		if r.Holder != "" || r.Caller == nil || r.Caller.PID != 0 || r.Caller.Exe != "" || !strings.Contains(r.Message, "past the rate of agent \"tester\"") {
			t.Errorf("a record past the rate holds what the caller chose: %+v", r)
		}
		counted++
		if r.Folded != nil {
			counted += r.Folded.Count - 1
		}
	}
	if counted != n {
		t.Errorf("the records past the rate count %d requests, want %d", counted, n)
	}
	for verb, k := range perVerb {
		if k > 2 {
			t.Errorf("%d records of %s past the rate, want at most 2 (the first and the count)", k, verb)
		}
	}
}

// TestRateApproverServed: an approver past its rate is still answered
// (PENDING, LOCK), its reads fold, a lock that locks is recorded whole,
// and UNLOCK is refused.
func TestRateApproverServed(t *testing.T) {
	h := newHarness(t, func(c *Config, o *Options) { c.Access = Access{ApproverUsers: []string{me(t)}} })
	c := h.client()
	const n = callerRate + 40
	for i := range n {
		if _, err := c.Pending(ctxT(t)); err != nil {
			t.Fatalf("PENDING %d: %v", i, err)
		}
	}
	if _, msg, err := c.Lock(ctxT(t), "stop "+strings.Repeat("x", 10)); err != nil || msg != "locked" {
		t.Fatalf("LOCK past the rate: %q, %v", msg, err)
	}
	if _, msg, err := c.Lock(ctxT(t), "again"); err != nil || msg != "already locked" {
		t.Fatalf("LOCK again: %q, %v", msg, err)
	}
	_, err := c.Unlock(ctxT(t))
	wantCode(t, err, protocol.CodeLimit)
	h.stopped()
	pending, lock := 0, 0
	for _, r := range auditRecords(t, h) {
		switch {
		case r.Verb == protocol.VerbPending:
			pending++
		case r.Kind == audit.KindLock:
			lock++
			if r.DecidedBy == nil || r.DecidedBy.Approver == "" || r.Message != "stop xxxxxxxxxx" {
				t.Errorf("the lock's record is not whole: %+v", r)
			}
		}
	}
	// The rate's own, and the first and the count of the rest.
	if pending > callerRate+2 {
		t.Errorf("%d PENDING records for %d requests, want at most %d", pending, n, callerRate+2)
	}
	if lock != 1 {
		t.Errorf("%d lock records, want the one that locked", lock)
	}
}

// TestRateApprovalWhole: an approver past its rate still approves, and
// the approval's record names what it approved.
func TestRateApprovalWhole(t *testing.T) {
	h := newHarness(t, withRate("4"))
	agent := h.client()
	a := askGrant(t, agent, newAgentKey(t), grant.Can("mail.read")) // HELLO and GRANT
	human := h.client()
	for range 10 {
		if _, err := human.Pending(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	if err := human.Approve(ctxT(t), a.ev.Request, a.ev.Code, "terminal"); err != nil {
		t.Fatalf("APPROVE past the rate: %v", err)
	}
	if _, err := a.wait(t); err != nil {
		t.Fatal(err)
	}
	var got *audit.Record
	for _, r := range auditRecords(t, h) {
		if r.Verb == protocol.VerbApprove {
			got = &r
		}
	}
	if got == nil || got.Target != a.ev.Request || got.Decision != "approved" || got.Caller.PID == 0 {
		b, _ := json.Marshal(got)
		t.Errorf("the approval's record is not whole: %s", b)
	}
}
