package keyd

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/parley-keyd/parley-keyd/policies"
)

// rememberPolicy has a rule that lets approvals be remembered (mail), a
// strong one that does too (bank), and one that does not (files).
const rememberPolicy = `
version = 1
[[agent]]
name = "tester"
any = true
rate = 100000
pending = 60

[[rule]]
name = "mail"
agents = ["tester"]
action = "ask"
svc = ["mail.example"]
can = ["mail.*"]
max_exp = "1h"
per = "50.00USD"
risk = "medium"
remember = "8h"
channels = ["terminal", "desktop"]

[[rule]]
name = "bank"
agents = ["tester"]
action = "ask"
svc = ["bank.example"]
strong = true
remember = "1h"

[[rule]]
name = "files"
agents = ["tester"]
action = "ask"
svc = ["files.example"]
channels = ["terminal", "desktop"]

[[consent]]
name = "ask-consent"
agents = ["*"]
channels = ["terminal"]
max_exp = "15m"
`

// withPolicy starts the harness with policy text, and writes it where a
// reload reads it.
func withPolicy(text string) harnessOpt {
	return func(c *Config, o *Options) {
		p, err := policies.Parse([]byte(text), "test.toml")
		if err != nil {
			panic(err)
		}
		o.Policy = p
	}
}

func rememberHarness(t *testing.T, opts ...harnessOpt) *harness {
	t.Helper()
	return newHarness(t, append([]harnessOpt{withPolicy(rememberPolicy)}, opts...)...)
}

func usd(cents int64) grant.Caveat { return grant.Per(grant.Money{Amount: cents, Currency: "USD"}) }

// mailScope is the request the tests have remembered.
func mailScope() []grant.Caveat {
	return []grant.Caveat{grant.Svc("mail.example"), grant.Can("mail.inbox.*"), usd(500), grant.Risk("low")}
}

// remember asks for cavs, approves it with remember on the terminal and
// returns the grant, which names the remembered approval.
func remember(t *testing.T, h *harness, key ed25519.PrivateKey, length string, cavs ...grant.Caveat) *protocol.GrantResult {
	t.Helper()
	a := askGrant(t, h.client(), key, cavs...)
	if err := h.client().ApproveWith(ctxT(t), a.ev.Request, a.ev.Code, "terminal", client.ApproveOptions{Remember: length}); err != nil {
		t.Fatalf("approve --remember %s: %v", length, err)
	}
	res, err := a.wait(t)
	if err != nil {
		t.Fatal(err)
	}
	if res.Remembered == "" || res.Decision != "ask" || res.Until == 0 {
		t.Fatalf("the approved grant names no remembered approval: %+v", res)
	}
	return res
}

// grantOrAsk asks for cavs on a connection of its own and reports whether
// the daemon issued a grant at once, asked a human (then the request is
// withdrawn), or refused.
func grantOrAsk(t *testing.T, h *harness, key ed25519.PrivateKey, cavs ...grant.Caveat) (res *protocol.GrantResult, asked bool, err error) {
	t.Helper()
	c := h.client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var ev atomic.Bool
	res, err = c.Grant(ctx, key, cavs, func(protocol.Event) { ev.Store(true); cancel() })
	if ev.Load() {
		return nil, true, nil
	}
	return res, false, err
}

func listRemembered(t *testing.T, h *harness) []protocol.RememberedView {
	t.Helper()
	l, err := h.client().Remembered(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestRememberedIssuesWithinScope: a GRANT within a remembered approval
// is issued at once, for a slice at most, and says so on the wire and in
// the audit log; REMEMBERED lists it with its count.
func TestRememberedIssuesWithinScope(t *testing.T) {
	h := rememberHarness(t)
	key := newAgentKey(t)
	// The choices offered: the ladder below the rule's remember, then it;
	// none for a rule without remember.
	for _, tc := range []struct {
		cavs []grant.Caveat
		want string
	}{{[]grant.Caveat{grant.Svc("bank.example")}, "15m"}, {[]grant.Caveat{grant.Svc("files.example")}, ""}} {
		a := askGrant(t, h.client(), key, tc.cavs...)
		p, err := h.client().Pending(ctxT(t))
		if err != nil || len(p) != 1 {
			t.Fatal(p, err)
		}
		if got := strings.Join(p[0].Remember, ","); got != strings.TrimPrefix(tc.want+",1h", ",1h") && got != tc.want+",1h" {
			t.Errorf("%s: remember choices %q", p[0].Rule, got)
		}
		h.client().Deny(ctxT(t), a.ev.Request, "terminal")
		a.wait(t)
	}
	a := askGrant(t, h.client(), key, mailScope()...)
	p, err := h.client().Pending(ctxT(t))
	if err != nil || len(p) != 1 {
		t.Fatal(p, err)
	}
	if got := strings.Join(p[0].Remember, ","); got != "15m,1h,2h,8h" {
		t.Errorf("pending remember choices %q, want 15m,1h,2h,8h", got)
	}
	if err := h.client().ApproveWith(ctxT(t), a.ev.Request, a.ev.Code, "terminal", client.ApproveOptions{Remember: "2h"}); err != nil {
		t.Fatal(err)
	}
	first, err := a.wait(t)
	if err != nil || first.Remembered == "" {
		t.Fatalf("approved with remember: %+v %v", first, err)
	}
	start := time.Now()
	if first.Until < start.Add(2*time.Hour-time.Minute).Unix() || first.Until > start.Add(2*time.Hour+time.Minute).Unix() {
		t.Errorf("until %d is not 2h from now", first.Until)
	}
	for i := 0; i < 3; i++ {
		// Another key of the same agent and uid, and a narrower request.
		res, asked, err := grantOrAsk(t, h, newAgentKey(t), grant.Svc("mail.example"), grant.Can("mail.inbox.list"), usd(100), grant.Risk("low"))
		if err != nil || asked {
			t.Fatalf("a request within the remembered one: asked %v, %v", asked, err)
		}
		if res.Decision != "remembered" || res.Remembered != first.Remembered || res.Until != first.Until {
			t.Errorf("grant under it: %+v", res)
		}
		if res.Expires > time.Now().Unix()+10*60 {
			t.Errorf("a grant under it lives until %d, more than remember_exp (10m) from now", res.Expires)
		}
		rec := grantRecord(t, h, res.GrantID)
		if rec.Kind != audit.KindIssue || rec.Decision != "remembered" || rec.DecidedBy == nil || rec.DecidedBy.Remembered != first.Remembered {
			t.Errorf("audit record %+v", rec)
		}
	}
	l := listRemembered(t, h)
	if len(l) != 1 || l[0].ID != first.Remembered || l[0].Issued != 3 || l[0].Agent != "tester" || l[0].Channel != "terminal" ||
		l[0].Until != first.Until || !strings.Contains(l[0].Text, "mail.inbox.*") {
		t.Errorf("REMEMBERED = %+v", l)
	}
	var started bool
	for _, r := range auditRecords(t, h) {
		if r.Kind == audit.KindRemember && r.Remembered != nil && r.Remembered.ID == first.Remembered {
			started = r.Remembered.Until == first.Until && r.Remembered.Slice == 600 && r.DecidedBy.Approver != ""
		}
	}
	if !started {
		t.Error("no remember record of the approval")
	}
}

// TestRememberedOneCaveatWider is issue 24's attack: a request one caveat
// wider than the remembered one is decided as if nothing were remembered
// (a human is asked, or the policy refuses), and one asking past its end is
// cut to the slice.
func TestRememberedOneCaveatWider(t *testing.T) {
	h := rememberHarness(t)
	key := newAgentKey(t)
	first := remember(t, h, key, "1h", mailScope()...)
	base := mailScope()
	wider := map[string][]grant.Caveat{
		"another service":  {grant.Svc("mail.example", "files.example"), base[1], base[2], base[3]},
		"can one level up": {base[0], grant.Can("mail.*"), base[2], base[3]},
		"a higher per":     {base[0], base[1], usd(501), base[3]},
		"no per":           {base[0], base[1], base[3]},
		"a risk above":     {base[0], base[1], base[2], grant.Risk("medium")},
		"another verb":     {base[0], base[1], base[2], base[3], grant.Verbs("DELETE")},
	}
	for name, cavs := range wider {
		res, asked, err := grantOrAsk(t, h, key, cavs...)
		if err == nil && !asked {
			t.Errorf("%s: issued at once: %+v", name, res)
		}
	}
	// Within it, asking for longer than its end: the grant is cut.
	res, asked, err := grantOrAsk(t, h, key, append(mailScope(), grant.Exp(first.Until+3600))...)
	if err == nil && !asked {
		if res.Expires > time.Now().Unix()+600 || res.Expires > first.Until {
			t.Errorf("an expiry past the end: the grant lives until %d (approval ends %d)", res.Expires, first.Until)
		}
	} else {
		// Past max_exp: the rule cuts nothing, so it is not within; the
		// request is decided without the approval, which is the point.
		if asked {
			t.Logf("an expiry past the rule's max_exp asks a human")
		}
	}
	res, asked, err = grantOrAsk(t, h, key, append(mailScope(), grant.Exp(time.Now().Unix()+50*60))...)
	if err != nil || asked {
		t.Fatalf("a request within, asking 50m: asked %v, %v", asked, err)
	}
	if res.Expires > time.Now().Unix()+600 || len(res.Narrowed) == 0 {
		t.Errorf("asking 50m under a 10m slice: expires %d, narrowed %q", res.Expires, res.Narrowed)
	}
}

// TestRememberApproveRefused: an APPROVE asking to remember what may not be
// remembered is refused whole, and the request still waits: nothing was
// approved once instead.
func TestRememberApproveRefused(t *testing.T) {
	h := rememberHarness(t)
	key := newAgentKey(t)
	for name, tc := range map[string]struct {
		cavs     []grant.Caveat
		remember string
		channel  string
		msg      string
	}{
		"rule without remember":  {[]grant.Caveat{grant.Svc("files.example")}, "1h", "terminal", "does not let"},
		"longer than the rule":   {mailScope(), "9h", "terminal", "at most 8h"},
		"not a duration":         {mailScope(), "forever", "terminal", "not a length"},
		"cut on the desktop":     {append([]grant.Caveat{grant.Svc("mail.example")}, grant.Can(manyPatterns(20)...), usd(500)), "1h", "desktop", "too long for a notification"},
		"weak for a strong rule": {[]grant.Caveat{grant.Svc("bank.example")}, "1h", "terminal", "strong"},
	} {
		t.Run(name, func(t *testing.T) {
			a := askGrant(t, h.client(), key, tc.cavs...)
			err := h.client().ApproveWith(ctxT(t), a.ev.Request, a.ev.Code, tc.channel, client.ApproveOptions{Remember: tc.remember})
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("APPROVE remember %s: %v, want a refusal saying %q", tc.remember, err, tc.msg)
			}
			p, err := h.client().Pending(ctxT(t))
			if err != nil || len(p) != 1 || p[0].ID != a.ev.Request {
				t.Fatalf("the request no longer waits after a refused APPROVE: %+v %v", p, err)
			}
			if err := h.client().Deny(ctxT(t), a.ev.Request, "terminal"); err != nil {
				t.Fatal(err)
			}
			a.wait(t)
		})
	}
	if l := listRemembered(t, h); len(l) != 0 {
		t.Errorf("remembered after refusals: %+v", l)
	}
}

func manyPatterns(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "mail.folder" + string(rune('a'+i)) + ".read"
	}
	return out
}

// TestCheckRememberConsent: a consent is never remembered, whatever its
// view says.
func TestCheckRememberConsent(t *testing.T) {
	it := &pendingItem{view: protocol.PendingView{ID: "r_x", Kind: "consent", Remember: []string{"1h"}}}
	if err := checkRemember(it, Approval{Remember: time.Hour, Channel: "terminal"}); err == nil || !strings.Contains(err.Error(), "never remembered") {
		t.Fatalf("consent remembered: %v", err)
	}
}

// TestRememberedEndsOnForgetLockReload: FORGET, LOCK and a reload that no
// longer allows it end a remembered approval, each with a forget record; a
// reload that changes nothing keeps it, and none stretches it.
func TestRememberedEndsOnForgetLockReload(t *testing.T) {
	h := rememberHarness(t)
	key := newAgentKey(t)
	ended := func(id string) audit.Record {
		t.Helper()
		for _, r := range auditRecords(t, h) {
			if r.Kind == audit.KindForget && r.Remembered != nil && r.Remembered.ID == id {
				return r
			}
		}
		t.Fatalf("no forget record of %s", id)
		return audit.Record{}
	}
	stillIssues := func(id string) {
		t.Helper()
		res, asked, err := grantOrAsk(t, h, key, mailScope()...)
		if err != nil || asked || res.Remembered != id {
			t.Fatalf("under %s: asked %v, %v, %+v", id, asked, err, res)
		}
	}
	asks := func(why string) {
		t.Helper()
		if res, asked, err := grantOrAsk(t, h, key, mailScope()...); err == nil && !asked {
			t.Fatalf("%s: still issued at once: %+v", why, res)
		}
	}

	// FORGET.
	a := remember(t, h, key, "2h", mailScope()...)
	stillIssues(a.Remembered)
	if err := h.client().Forget(ctxT(t), a.Remembered, "done"); err != nil {
		t.Fatal(err)
	}
	asks("after FORGET")
	if r := ended(a.Remembered); r.Decision != "forgotten" || !strings.Contains(r.Message, "done") || r.DecidedBy == nil || r.DecidedBy.Approver == "" {
		t.Errorf("forget record %+v", r)
	}
	wantCode(t, h.client().Forget(ctxT(t), a.Remembered, ""), protocol.CodeNotFound)

	// A reload that changes nothing keeps it; one with a shorter remember
	// shortens it, never lengthens it; one without remember ends it.
	b := remember(t, h, key, "2h", mailScope()...)
	h.reload(t, rememberPolicy)
	stillIssues(b.Remembered)
	h.reload(t, strings.Replace(rememberPolicy, `remember = "8h"`, `remember = "1h"`, 1))
	if l := listRemembered(t, h); len(l) != 1 || l[0].Until > time.Now().Unix()+3600+5 {
		t.Errorf("after a reload to remember 1h: %+v", l)
	}
	h.reload(t, strings.Replace(rememberPolicy, `remember = "8h"`, `remember = "9h"`, 1))
	if l := listRemembered(t, h); len(l) != 1 || l[0].Until != b.Until {
		t.Errorf("a reload to remember 9h stretched or lost it: %+v (until was %d)", l, b.Until)
	}
	h.reload(t, strings.Replace(rememberPolicy, `remember = "8h"`+"\n", "", 1))
	asks("after a reload without remember")
	if r := ended(b.Remembered); r.Decision != "reloaded" {
		t.Errorf("reload's forget record %+v", r)
	}
	h.reload(t, rememberPolicy)
	c := remember(t, h, key, "2h", mailScope()...)
	h.reload(t, strings.Replace(rememberPolicy, `can = ["mail.*"]`, `can = ["mail.outbox.*"]`, 1))
	if r := ended(c.Remembered); r.Decision != "reloaded" || !strings.Contains(r.Message, "no longer covers") {
		t.Errorf("a reload that no longer covers the scope: %+v", r)
	}

	// A reload that makes the rule strong ends a weak approval (the test's
	// user is agent and approver, so its approvals are weak).
	h.reload(t, rememberPolicy)
	e := remember(t, h, key, "2h", mailScope()...)
	h.reload(t, strings.Replace(rememberPolicy, `remember = "8h"`, `remember = "8h"`+"\nstrong = true", 1))
	asks("after a reload that makes the rule strong")
	if r := ended(e.Remembered); r.Decision != "reloaded" || !strings.Contains(r.Message, "strong") {
		t.Errorf("a reload to a strong rule: %+v", r)
	}

	// LOCK.
	h.reload(t, rememberPolicy)
	d := remember(t, h, key, "2h", mailScope()...)
	if _, _, err := h.client().Lock(ctxT(t), "stop"); err != nil {
		t.Fatal(err)
	}
	if r := ended(d.Remembered); r.Decision != "locked" {
		t.Errorf("lock's forget record %+v", r)
	}
	if l := listRemembered(t, h); len(l) != 0 {
		t.Errorf("remembered after LOCK: %+v", l)
	}
}

// TestRememberedAgentSeesOwn: an agent lists and forgets only its own; an
// approver all. The test's user is both (dual role): as an agent of
// another policy agent it sees none.
func TestRememberedAgentSeesOwn(t *testing.T) {
	h := rememberHarness(t)
	key := newAgentKey(t)
	a := remember(t, h, key, "1h", mailScope()...)
	// An agent-only caller of another uid is covered by the real-users
	// test; here the store's owner check is asked directly.
	m := h.srv.remembered.get(a.Remembered)
	other := &request{caller: Caller{Roles: Roles{Agent: true}}, f: &protocol.Frame{}}
	other.caller.Identity.UID = m.uid + 1
	if h.srv.owns(other, m) {
		t.Error("an agent of another uid owns the approval")
	}
	same := &request{caller: Caller{Roles: Roles{Agent: true}}, f: &protocol.Frame{}}
	same.caller.Identity.UID = m.uid
	if !h.srv.owns(same, m) {
		t.Error("the agent of the same uid does not own its approval")
	}
}

// TestRememberedForgetRace races FORGET against many GRANTs within the
// remembered approval: every grant under it is recorded before its forget
// record, and none asked for after FORGET's OK is issued under it.
func TestRememberedForgetRace(t *testing.T) {
	h := rememberHarness(t)
	key := newAgentKey(t)
	a := remember(t, h, key, "2h", mailScope()...)
	var forgot atomic.Bool
	var askedAfter atomic.Int64
	type result struct {
		after bool // asked for after FORGET's OK
		res   *protocol.GrantResult
	}
	var mu sync.Mutex
	var results []result
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := h.client()
			defer c.Close()
			for {
				select {
				case <-stop:
					return
				default:
				}
				after := forgot.Load()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				res, err := c.Grant(ctx, key, mailScope(), func(protocol.Event) { cancel() })
				cancel()
				if err != nil {
					// Asked a human (withdrawn) once it ended: this
					// connection's request is gone; use a new one.
					if after {
						askedAfter.Add(1)
					}
					c.Close()
					c = h.client()
					continue
				}
				mu.Lock()
				results = append(results, result{after, res})
				mu.Unlock()
			}
		}()
	}
	waitFor(t, "grants under the approval", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(results) >= 20
	})
	if err := h.client().Forget(ctxT(t), a.Remembered, "race"); err != nil {
		t.Fatal(err)
	}
	forgot.Store(true)
	waitFor(t, "requests after FORGET", func() bool { return askedAfter.Load() >= 8 })
	close(stop)
	wg.Wait()
	var forgetSeq uint64
	issued := map[string]uint64{}
	for _, r := range auditRecords(t, h) {
		switch {
		case r.Kind == audit.KindForget && r.Remembered != nil && r.Remembered.ID == a.Remembered:
			forgetSeq = r.Seq
		case r.Kind == audit.KindIssue && r.DecidedBy != nil && r.DecidedBy.Remembered == a.Remembered:
			issued[r.GrantID] = r.Seq
			if forgetSeq != 0 {
				t.Errorf("grant %s issued under %s at seq %d, after its forget record", r.GrantID, a.Remembered, r.Seq)
			}
		}
	}
	if forgetSeq == 0 {
		t.Fatal("no forget record")
	}
	for _, r := range results {
		if r.res.Remembered != a.Remembered {
			continue
		}
		if r.after {
			t.Errorf("grant %s asked for after FORGET's OK was issued under it", r.res.GrantID)
		}
		if seq, ok := issued[r.res.GrantID]; !ok || seq > forgetSeq {
			t.Errorf("grant %s that left has no record before the forget record", r.res.GrantID)
		}
	}
	t.Logf("%d grants under the approval before FORGET", len(issued))
}

// TestRememberedClockSetBack: a wall clock set back does not stretch a
// remembered approval: it ends when its length has passed on the
// monotonic clock, with a forget record.
func TestRememberedClockSetBack(t *testing.T) {
	var offset atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	short := strings.Replace(rememberPolicy, `remember = "8h"`, `remember = "4s"`+"\nremember_exp = \"4s\"", 1)
	h := newHarness(t, withPolicy(short), func(c *Config, o *Options) { o.Now = clock })
	key := newAgentKey(t)
	approved := time.Now()
	a := remember(t, h, key, "4s", mailScope()...)
	// Back by less than the proof window (±300 s), so proofs still
	// verify, and than the rate's burst, so that the rate still lets
	// requests through.
	offset.Store(int64(-30 * time.Second))
	// 2.5 s after the approval, 1.5 s are left of it: a grant under it
	// lives no longer, though the wall clock says 31.5 s are left.
	for time.Since(approved) < 2500*time.Millisecond {
		time.Sleep(50 * time.Millisecond)
	}
	res, asked, err := grantOrAsk(t, h, key, mailScope()...)
	if err != nil || asked {
		t.Fatalf("under it, after the clock went back: asked %v, %v", asked, err)
	}
	if left := res.Expires - clock().Unix(); left > 2 {
		t.Errorf("after the clock went back 30s: a grant under it lives %ds more, past the approval's end", left)
	}
	waitFor(t, "the approval to end", func() bool { return len(listRemembered(t, h)) == 0 })
	if res, asked, err = grantOrAsk(t, h, key, mailScope()...); err != nil || !asked {
		t.Fatalf("after its length passed, with the clock set back 30s: asked %v, %v, %+v", asked, err, res)
	}
	var expired bool
	for _, r := range auditRecords(t, h) {
		expired = expired || (r.Kind == audit.KindForget && r.Remembered != nil && r.Remembered.ID == a.Remembered && r.Decision == "expired")
	}
	if !expired {
		t.Error("no expired record")
	}
}

// TestRememberedSurvivesRestart: a remembered approval survives a restart;
// an ended one does not come back.
func TestRememberedSurvivesRestart(t *testing.T) {
	h := rememberHarness(t)
	key := newAgentKey(t)
	a := remember(t, h, key, "2h", mailScope()...)
	b := remember(t, h, key, "1h", grant.Svc("mail.example"), grant.Can("mail.drafts.*"), usd(500), grant.Risk("low"))
	if err := h.client().Forget(ctxT(t), b.Remembered, ""); err != nil {
		t.Fatal(err)
	}
	h2 := restartRemember(t, h)
	l := listRemembered(t, h2)
	if len(l) != 1 || l[0].ID != a.Remembered || l[0].Until != a.Until {
		t.Fatalf("after a restart: %+v", l)
	}
	res, asked, err := grantOrAsk(t, h2, key, mailScope()...)
	if err != nil || asked || res.Remembered != a.Remembered {
		t.Fatalf("after a restart, under it: asked %v, %v, %+v", asked, err, res)
	}
	if _, asked, err := grantOrAsk(t, h2, key, grant.Svc("mail.example"), grant.Can("mail.drafts.*"), usd(500), grant.Risk("low")); err == nil && !asked {
		t.Fatal("the forgotten approval came back after a restart")
	}
}

// TestRememberedForgedInStateFolder is issue 24's attack: a store file
// written by someone who is not the daemon — an entry made up, one that
// points at a grant's record, one that brings back a forgotten approval, or
// one with its hash changed — is not honoured. The file the daemon wrote
// is, which shows the test can tell.
func TestRememberedForgedInStateFolder(t *testing.T) {
	h := rememberHarness(t)
	key := newAgentKey(t)
	a := remember(t, h, key, "2h", mailScope()...)
	gone := remember(t, h, key, "2h", grant.Svc("mail.example"), grant.Can("mail.drafts.*"), usd(500), grant.Risk("low"))
	goneFile := readStore(t, h)
	if err := h.client().Forget(ctxT(t), gone.Remembered, ""); err != nil {
		t.Fatal(err)
	}
	good := readStore(t, h)
	var issue audit.Record
	for _, r := range auditRecords(t, h) {
		if r.Kind == audit.KindIssue {
			issue = r
		}
	}
	issueHash, err := audit.HashAt(filepath.Join(h.dir, "audit.log"), issue.Seq)
	if err != nil {
		t.Fatal(err)
	}
	var goneEntry storeEntry
	for _, e := range goneFile.Remembered {
		if e.ID == gone.Remembered {
			goneEntry = e
		}
	}
	cur := h
	for name, f := range map[string]storeFile{
		"made up":          {Remembered: []storeEntry{{ID: "m_forged", Seq: 3, Hash: "AAAA"}}},
		"a grant's record": {Remembered: []storeEntry{{ID: a.Remembered, Seq: issue.Seq, Hash: issueHash.Hash}}},
		"forgotten":        {Remembered: []storeEntry{goneEntry}},
		"hash changed":     {Remembered: []storeEntry{{ID: a.Remembered, Seq: good.Remembered[0].Seq, Hash: strings.Repeat("A", 43)}}},
	} {
		writeStore(t, cur, f)
		cur = restartRemember(t, cur)
		if l := listRemembered(t, cur); len(l) != 0 {
			t.Errorf("%s: a forged store file is honoured: %+v", name, l)
		}
		if res, asked, err := grantOrAsk(t, cur, key, mailScope()...); err == nil && !asked {
			t.Errorf("%s: issued at once: %+v", name, res)
		}
	}
	writeStore(t, cur, good)
	cur = restartRemember(t, cur)
	if l := listRemembered(t, cur); len(l) != 1 || l[0].ID != a.Remembered {
		t.Fatalf("the daemon's own store file is not honoured: %+v", l)
	}
}

// restartRemember restarts h's daemon on the same state folder and key,
// with the remember policy.
func restartRemember(t *testing.T, h *harness, opts ...harnessOpt) *harness {
	t.Helper()
	h.stop()
	select {
	case err := <-h.served:
		h.served <- err
	case <-time.After(15 * time.Second):
		t.Fatal("the daemon did not stop")
	}
	dir, key := h.dir, h.key
	h2 := rememberHarness(t, append([]harnessOpt{func(c *Config, o *Options) { o.State, o.Signer = dir, key }}, opts...)...)
	h2.dir, h2.key = dir, key
	return h2
}

func readStore(t *testing.T, h *harness) storeFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.dir, RememberedFileName))
	if err != nil {
		t.Fatal(err)
	}
	var f storeFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

func writeStore(t *testing.T, h *harness, f storeFile) {
	t.Helper()
	b, _ := json.Marshal(f)
	if err := os.WriteFile(filepath.Join(h.dir, RememberedFileName), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRememberedForgetDuringSigning: a grant under a remembered approval
// is being signed (a slow key service) when the human forgets the
// approval and is told so. The grant must not leave: it is discarded, and
// the log says so after the forget record.
func TestRememberedForgetDuringSigning(t *testing.T) {
	g := &gateSigner{entered: make(chan struct{}), open: make(chan struct{})}
	h := rememberHarness(t, func(_ *Config, o *Options) {
		g.priv = o.Signer.(ed25519.PrivateKey)
		o.Signer = g
	})
	key := newAgentKey(t)
	a := remember(t, h, key, "2h", mailScope()...)
	g.armed.Store(true)
	type out struct {
		r   *protocol.GrantResult
		err error
	}
	res := make(chan out, 1)
	go func() {
		r, err := h.client().Grant(ctxT(t), key, mailScope(), nil)
		res <- out{r, err}
	}()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the grant under the approval was not signed")
	}
	if err := h.client().Forget(ctxT(t), a.Remembered, "now"); err != nil {
		t.Fatal(err)
	}
	close(g.open)
	o := <-res
	if o.err == nil {
		t.Fatalf("a grant signed before FORGET returned left after it: %+v", o.r)
	}
	wantCode(t, o.err, protocol.CodeForbidden)
	var forgot bool
	for _, r := range auditRecords(t, h) {
		if r.Kind == audit.KindForget && r.Remembered != nil && r.Remembered.ID == a.Remembered {
			forgot = true
		}
		if r.Kind == audit.KindIssue && r.DecidedBy != nil && r.DecidedBy.Remembered == a.Remembered && forgot {
			t.Errorf("issue record after the forget record: %+v", r)
		}
	}
}

// TestRememberedPhoneForget: the phone page lists remembered approvals and
// its Forget button ends one, audited as the device's FORGET.
func TestRememberedPhoneForget(t *testing.T) {
	h := rememberHarness(t)
	a := remember(t, h, newAgentKey(t), "1h", mailScope()...)
	if l := h.srv.Remembered(); len(l) != 1 || l[0].ID != a.Remembered {
		t.Fatalf("phone list %+v", l)
	}
	if err := h.srv.Forget(a.Remembered, "pixel", "from the phone"); err != nil {
		t.Fatal(err)
	}
	if l := h.srv.Remembered(); len(l) != 0 {
		t.Fatalf("after the phone's Forget: %+v", l)
	}
	var found bool
	for _, r := range auditRecords(t, h) {
		if r.Kind == audit.KindForget && r.DecidedBy != nil && r.DecidedBy.Channel == "phone" && r.DecidedBy.Approver == "phone:pixel" {
			found = true
		}
	}
	if !found {
		t.Error("no forget record from the phone")
	}
}

// TestRememberedRateStillApplies: grants under a remembered approval count
// against the agent's rate like any request.
func TestRememberedRateStillApplies(t *testing.T) {
	h := newHarness(t, withPolicy(strings.Replace(rememberPolicy, "rate = 100000", "rate = 8", 1)))
	key := newAgentKey(t)
	remember(t, h, key, "1h", mailScope()...)
	c := h.client()
	for i := 0; i < 12; i++ {
		_, err := c.Grant(ctxT(t), key, mailScope(), nil)
		if err == nil {
			continue
		}
		wantCode(t, err, protocol.CodeLimit)
		return
	}
	t.Fatal("12 grants under a remembered approval in a row, at a rate of 8 a minute, were all issued")
}

// TestRememberedExplainSays: EXPLAIN tells an agent what a GRANT would get
// under a remembered approval, which is issued at once though the rule
// asks: the approval's id, its end and the expiry cut to the slice. A
// request one caveat wider, and any request once the approval is
// forgotten, is explained as the rule alone decides it.
func TestRememberedExplainSays(t *testing.T) {
	h := rememberHarness(t)
	key := newAgentKey(t)
	holder := grant.FormatPublicKey(key.Public().(ed25519.PublicKey))
	first := remember(t, h, key, "1h", mailScope()...)
	explain := func(cavs ...grant.Caveat) *protocol.Explanation {
		t.Helper()
		c := h.client()
		defer c.Close()
		e, err := c.Explain(ctxT(t), holder, cavs)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := explain(append(mailScope(), grant.Exp(time.Now().Unix()+50*60))...)
	if e.Action != "ask" || e.Remembered != first.Remembered || e.Until != first.Until {
		t.Fatalf("EXPLAIN within the remembered scope: action %q, remembered %q until %d; want ask under %q until %d", e.Action, e.Remembered, e.Until, first.Remembered, first.Until)
	}
	if e.Expires > time.Now().Unix()+600 || len(e.Narrowed) == 0 || !strings.Contains(strings.Join(e.Narrowed, ";"), first.Remembered) {
		t.Errorf("EXPLAIN asking 50m under a 10m slice: expires %d, narrowed %q", e.Expires, e.Narrowed)
	}
	// What it said is what a GRANT gets.
	res, asked, err := grantOrAsk(t, h, key, append(mailScope(), grant.Exp(time.Now().Unix()+50*60))...)
	if err != nil || asked || res.Remembered != first.Remembered {
		t.Fatalf("GRANT after EXPLAIN: asked %v, %v, %+v", asked, err, res)
	}
	wider := append(mailScope()[:1:1], grant.Can("mail.*"), usd(500), grant.Risk("low"))
	if e := explain(wider...); e.Remembered != "" || e.Until != 0 || e.Action != "ask" {
		t.Errorf("EXPLAIN one caveat wider: action %q, remembered %q", e.Action, e.Remembered)
	}
	if err := h.client().Forget(ctxT(t), first.Remembered, ""); err != nil {
		t.Fatal(err)
	}
	if e := explain(mailScope()...); e.Remembered != "" || e.Action != "ask" {
		t.Errorf("EXPLAIN after forget: action %q, remembered %q", e.Action, e.Remembered)
	}
}
