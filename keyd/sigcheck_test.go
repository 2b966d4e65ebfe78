package keyd

import (
	"crypto/ed25519"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// heldCheck stands in for ed25519.Verify in the check of the principal's
// signatures: once armed, the next check waits until the test answers it
// on verdict (true: the real check decides; false: a fault).
type heldCheck struct {
	armed   atomic.Bool
	entered chan struct{}
	verdict chan bool
}

func newHeldCheck() *heldCheck {
	return &heldCheck{entered: make(chan struct{}), verdict: make(chan bool)}
}

func (c *heldCheck) verify(pub ed25519.PublicKey, msg, sig []byte) bool {
	if c.armed.CompareAndSwap(true, false) {
		close(c.entered)
		if !<-c.verdict {
			return false
		}
	}
	return ed25519.Verify(pub, msg, sig)
}

func withHeldCheck(c *heldCheck) harnessOpt {
	return func(_ *Config, o *Options) { o.verify = c.verify }
}

// recordOf returns the record of the grant request with a holder key of
// holder, if the log's file holds it now.
func recordOf(t *testing.T, h *harness, holder string) (audit.Record, bool) {
	t.Helper()
	for _, r := range auditRecords(t, h) {
		if r.Holder == holder && (r.Kind == audit.KindIssue || r.Kind == audit.KindConsent) {
			return r, true
		}
	}
	return audit.Record{}, false
}

// TestSignatureCheckedBesideTheWrite: on an idle log the check of the
// principal's signature runs while the grant's record is written, not
// before it, and the grant waits for both. With the check held, the record
// is in the log's file and the grant does not leave; once the check
// passes, the grant that leaves is the one recorded. (On a busy log the
// check runs first, as the record waits for the group ahead of it: a grant
// that meets the daemon's own writer at work, the zeros written ahead or a
// checkpoint, is asked again, up to 20 times.)
func TestSignatureCheckedBesideTheWrite(t *testing.T) {
	c := newHeldCheck()
	h := newHarness(t, withHeldCheck(c))
	type out struct {
		r   *protocol.GrantResult
		err error
	}
	for attempt := 1; ; attempt++ {
		agent := newAgentKey(t)
		holder := grant.FormatPublicKey(agent.Public().(ed25519.PublicKey))
		c.entered = make(chan struct{})
		c.armed.Store(true)
		res := make(chan out, 1)
		go func() {
			r, err := h.client().Grant(ctxT(t), agent, []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find")}, nil)
			res <- out{r, err}
		}()
		select {
		case <-c.entered:
		case o := <-res:
			t.Fatalf("the grant ended before its signature was checked: %+v, %v", o.r, o.err)
		case <-time.After(10 * time.Second):
			t.Fatal("the grant's signature was never checked")
		}
		rec, written := recordOf(t, h, holder)
		select {
		case o := <-res:
			t.Fatalf("the grant left before its signature was checked: %+v, %v", o.r, o.err)
		default:
		}
		c.verdict <- true
		o := <-res
		if o.err != nil {
			t.Fatalf("grant after the check passed: %v", o.err)
		}
		if !written {
			if attempt == 20 {
				t.Fatal("in 20 grants the check never ran while the record was written")
			}
			continue
		}
		if o.r.GrantID != rec.GrantID {
			t.Fatalf("grant %s left, %s was recorded", o.r.GrantID, rec.GrantID)
		}
		return
	}
}

// TestAttackFaultySignatureNeverLeaves: a signature of the principal key
// that fails its check (a fault while signing) is found once the grant's
// record is on its way to the log: the grant, or consent, must still not
// leave, the approver must hear that nothing was issued, and the log must
// say that the recorded grant was discarded. The daemon then goes on
// issuing.
func TestAttackFaultySignatureNeverLeaves(t *testing.T) {
	for _, kind := range []string{"grant", "consent", "approved"} {
		t.Run(kind, func(t *testing.T) {
			c := newHeldCheck()
			h := newHarness(t, withHeldCheck(c))
			c.armed.Store(true)
			var (
				tok *protocol.GrantResult
				err error
			)
			switch kind {
			case "grant":
				agent := newAgentKey(t)
				done := make(chan struct{})
				go func() {
					defer close(done)
					tok, err = h.client().Grant(ctxT(t), agent, []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find")}, nil)
				}()
				<-c.entered
				c.verdict <- false
				<-done
			default:
				var a *asked
				if kind == "consent" {
					a = askConsentForTest(t, h)
				} else {
					a = askGrant(t, h.client(), newAgentKey(t), grant.Can("mail.read"))
				}
				approved := make(chan error, 1)
				go func() { approved <- h.client().Approve(ctxT(t), a.ev.Request, a.ev.Code, "terminal") }()
				<-c.entered
				c.verdict <- false
				if err := <-approved; err == nil {
					t.Error("the approver was told the grant was issued")
				}
				tok, err = a.wait(t)
			}
			if err == nil {
				t.Fatalf("a grant with a faulty signature left the daemon: %+v", tok)
			}
			wantCode(t, err, protocol.CodeInternal)
			recs := auditRecords(t, h)
			var issued, dropped *audit.Record
			for i := range recs {
				switch r := &recs[i]; {
				case r.Kind == audit.KindIssue || r.Kind == audit.KindConsent:
					issued = r
				case r.Kind == audit.KindError && issued != nil && r.RequestID == issued.RequestID:
					dropped = r
				}
			}
			if issued == nil || dropped == nil {
				t.Fatalf("the log holds no issue record and its discard: %+v", recs)
			}
			if want := fmt.Sprintf("signed and recorded as seq %d, then discarded", issued.Seq); !strings.Contains(dropped.Message, want) ||
				dropped.GrantID != issued.GrantID {
				t.Fatalf("discard record %+v, want %q for grant %s", dropped, want, issued.GrantID)
			}
			// The next grant is checked for real, and leaves.
			if _, err := h.client().Grant(ctxT(t), newAgentKey(t), []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find")}, nil); err != nil {
				t.Fatalf("grant after the fault: %v", err)
			}
		})
	}
}

// TestAttackFaultyWhileRefused: a faulty signature is reported in the
// daemon's log even when the grant is refused for another reason at the
// same moment (here the audit log cannot be written): the fault is the
// sign of an attack on the key, and must not go unseen.
func TestAttackFaultyWhileRefused(t *testing.T) {
	var out syncBuffer
	fa := &failingAudit{}
	h := newHarness(t, func(_ *Config, o *Options) {
		o.Audit = fa
		o.verify = func(ed25519.PublicKey, []byte, []byte) bool { return false }
		o.Logf = func(format string, args ...any) { fmt.Fprintf(&out, format+"\n", args...) }
	})
	res, err := h.client().Grant(ctxT(t), newAgentKey(t), []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find")}, nil)
	wantCode(t, err, protocol.CodeUnavailable)
	if res != nil {
		t.Fatalf("a grant left: %+v", res)
	}
	if !strings.Contains(out.String(), "the signing may be faulty") {
		t.Fatalf("the daemon's log does not report the fault:\n%s", out.String())
	}
}

// TestIssuingCountsOnlyGrantsInFlight: the count that picks where a
// grant's signature is checked goes back to nothing after every way a
// GRANT or CONSENT ends (issued, refused, approved, denied, withdrawn), and
// a request waiting for a human is not counted while it waits. A count
// that leaked would keep the check out of the write for good.
func TestIssuingCountsOnlyGrantsInFlight(t *testing.T) {
	h := newHarness(t)
	idle := func(when string) {
		t.Helper()
		if n := h.srv.issuing.Load(); n != 0 {
			t.Fatalf("%s: %d grants counted in flight, want 0", when, n)
		}
	}
	approve := func(a *asked) {
		t.Helper()
		if err := h.client().Approve(ctxT(t), a.ev.Request, a.ev.Code, "terminal"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.wait(t); err != nil {
			t.Fatal(err)
		}
	}
	c := h.client()
	if _, err := c.Grant(ctxT(t), newAgentKey(t), []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find")}, nil); err != nil {
		t.Fatal(err)
	}
	idle("after an auto grant")
	_, err := c.Grant(ctxT(t), newAgentKey(t), []grant.Caveat{grant.Can("bank.transfer")}, nil)
	wantCode(t, err, protocol.CodeForbidden)
	idle("after a refusal")
	a := askGrant(t, h.client(), newAgentKey(t), grant.Can("mail.read"))
	idle("while a grant waits for a human")
	approve(a)
	idle("after an approved grant")
	a = askGrant(t, h.client(), newAgentKey(t), grant.Can("mail.read"))
	if err := h.client().Deny(ctxT(t), a.ev.Request, "terminal"); err != nil {
		t.Fatal(err)
	}
	_, err = a.wait(t)
	wantCode(t, err, protocol.CodeDenied)
	idle("after a denied grant")
	a = askConsentForTest(t, h)
	idle("while a consent waits for a human")
	approve(a)
	idle("after a consent")
	// Withdrawn: the requester goes away while the grant waits.
	wc := h.client()
	evs := make(chan protocol.Event, 1)
	done := make(chan error, 1)
	go func() {
		_, err := wc.Grant(ctxT(t), newAgentKey(t), []grant.Caveat{grant.Can("mail.read")}, func(e protocol.Event) { evs <- e })
		done <- err
	}()
	<-evs
	wc.Close()
	<-done
	waitFor(t, "the withdrawn grant to end", func() bool { return len(h.srv.queue.list()) == 0 })
	waitFor(t, "the withdrawn grant's count to end", func() bool { return h.srv.issuing.Load() == 0 })
}
