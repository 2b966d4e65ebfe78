package keyd

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/journal"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/peercred"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/parley-keyd/parley-keyd/policies"
)

// requestRecords returns the records that stand for requests (not the
// daemon's own start, stop and checkpoints), each folded record counted for
// the requests it stands for, after the daemon stopped (which writes every
// folded count).
func requestRecords(t *testing.T, h *harness) (n int, recs []audit.Record) {
	t.Helper()
	h.stop()
	select {
	case <-h.served:
		h.served <- nil // for the harness's cleanup
	case <-time.After(15 * time.Second):
		t.Fatal("the daemon did not stop")
	}
	for _, r := range auditRecords(t, h) {
		switch r.Kind {
		case audit.KindStart, audit.KindStop, audit.KindCheckpoint, audit.KindRecovered, audit.KindPolicyReload:
			continue
		}
		recs = append(recs, r)
		if r.Folded != nil {
			n += r.Folded.Count
		} else {
			n++
		}
	}
	return n, recs
}

// TestEveryRequestAuditedOnce sends frames of every outcome a caller the
// daemon accepted can cause, the refusals before the policy decision
// included (a frame that is not JSON, an unknown verb, a bad proof, an
// agent's PENDING, a rate limit), and finds exactly one record for each
// (property 11). Before the one pipeline exit, the refusals before the
// policy decision left no record at all.
func TestEveryRequestAuditedOnce(t *testing.T) {
	h := newHarness(t)
	r := h.raw()
	holder := grant.FormatPublicKey(newAgentKey(t).Public().(ed25519.PublicKey))
	frames := []string{
		`{"parley":1,"id":"h","verb":"HELLO"}`,
		`{nope`,
		`[1,2]`,
		`{"parley":1,"verb":"HELLO"}`,
		`{"parley":2,"id":"v","verb":"HELLO"}`,
		`{"parley":1,"id":"u","verb":"STEAL"}`,
		`{"parley":1,"id":"g","verb":"GRANT"}`,
		`{"parley":1,"id":"p","verb":"GRANT","grant":{"holder":"` + holder + `","caveats":[]}}`,
		`{"parley":1,"id":"c","verb":"GRANT","grant":{"holder":"` + holder + `","caveats":[{"admin":true}]}}`,
		`{"parley":1,"id":"e","verb":"EXPLAIN","grant":{"holder":"` + holder + `","caveats":[]}}`,
		`{"parley":1,"id":"a","verb":"APPROVE","request":"r_nothing","match":"10"}`,
		`{"parley":1,"id":"d","verb":"DENY","request":"r_nothing"}`,
		`{"parley":1,"id":"l","verb":"PENDING"}`,
		`{"parley":1,"id":"h2","verb":"HELLO"}`,
		`{"parley":1,"id":"h2","verb":"HELLO","VERB":"GRANT"}`,
	}
	for _, f := range frames {
		r.send(f + "\n")
		if got := r.read(); got.Kind == protocol.KindEvent {
			t.Fatalf("unexpected event %+v", got)
		}
	}
	// Requests through the client, too: a grant by policy, one refused by
	// policy, one the human denies.
	c := h.client()
	if _, err := c.Grant(ctxT(t), newAgentKey(t), []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find")}, nil); err != nil {
		t.Fatal(err)
	}
	_, err := c.Grant(ctxT(t), newAgentKey(t), []grant.Caveat{grant.Can("bank.transfer")}, nil)
	wantCode(t, err, protocol.CodeForbidden)
	a := askGrant(t, h.client(), newAgentKey(t), grant.Can("mail.read"))
	if err := h.client().Deny(ctxT(t), a.ev.Request, "terminal"); err != nil {
		t.Fatal(err)
	}
	_, err = a.wait(t)
	wantCode(t, err, protocol.CodeDenied)
	// Each client's HELLO is a request too: the clients that asked for a
	// grant sent one each for the principal their proofs name (two).
	want := len(frames) + 3 + 1 + 2 // the frames; grant, refusal and ask; deny; two HELLOs
	n, recs := requestRecords(t, h)
	if n != want {
		var b strings.Builder
		for _, r := range recs {
			fmt.Fprintf(&b, "  %s %s %s %s\n", r.Kind, r.Verb, r.Decision, r.Message)
		}
		t.Errorf("%d requests left %d records, want one each:\n%s", want, n, b.String())
	}
	for _, r := range recs {
		if r.Caller == nil || r.RequestID == "" && r.Folded == nil {
			t.Errorf("record without caller or request id: %+v", r)
		}
	}
}

// TestRefusalFloodFolded sends the same bad frame many times: the log folds
// the repeats into counted records instead of writing one each, and the
// counts add up to every frame (property 11: no refusal is dropped
// silently).
func TestRefusalFloodFolded(t *testing.T) {
	h := newHarness(t)
	r := h.raw()
	const flood = 500
	for range flood {
		r.send("{nope\n")
	}
	for range flood {
		r.read()
	}
	n, recs := requestRecords(t, h)
	if n != flood {
		t.Errorf("%d bad frames counted %d times", flood, n)
	}
	if len(recs) > flood/10 {
		t.Errorf("%d bad frames wrote %d records: not folded", flood, len(recs))
	}
}

// TestHandleWithoutSocket runs the pipeline with no transport at all: a
// caller as the kernel would describe it, a frame, and the events. It is
// what the phone page does.
func TestHandleWithoutSocket(t *testing.T) {
	h := newHarness(t)
	key := newAgentKey(t)
	holder := grant.FormatPublicKey(key.Public().(ed25519.PublicKey))
	cavs := []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find")}
	body, _ := json.Marshal(protocol.GrantBody{Holder: holder, Caveats: cavs})
	digest, err := protocol.GrantDigest(body)
	if err != nil {
		t.Fatal(err)
	}
	proof, err := grant.MakeProof(key, h.srv.Principal(), protocol.ProofVerbGrant, digest, time.Now().Unix())
	if err != nil {
		t.Fatal(err)
	}
	id := selfIdentity(t)
	agent := Caller{Identity: id, Roles: Roles{Agent: true}}
	reply, err := h.srv.Handle(context.Background(), agent, &protocol.Frame{Verb: protocol.VerbGrant, Grant: body, Proof: &proof}, nil)
	if err != nil || reply.Kind != protocol.KindGrant {
		t.Fatalf("reply %+v, %v", reply, err)
	}
	var res protocol.GrantResult
	if err := json.Unmarshal(reply.Data, &res); err != nil {
		t.Fatal(err)
	}
	if rec := grantRecord(t, h, res.GrantID); rec.Kind != audit.KindIssue || rec.Verb != "GRANT" || rec.Caller.PID != 1 {
		t.Errorf("record %+v", rec)
	}
	// The same frame from a caller that may only approve is refused, and
	// the refusal is recorded with that caller.
	approver := Caller{Identity: id, Roles: Roles{Approver: true}}
	_, err = h.srv.Handle(context.Background(), approver, &protocol.Frame{Verb: protocol.VerbGrant, Grant: body, Proof: &proof}, nil)
	wantCode(t, err, protocol.CodeForbidden)
}

// TestPhoneDecidesThroughThePipeline approves a waiting request the way the
// phone page does: the approval is strong, names the device, and leaves a
// record of its own.
func TestPhoneDecidesThroughThePipeline(t *testing.T) {
	h := newHarness(t, func(c *Config, o *Options) {
		o.Policy = mustPolicy(t, strings.Replace(testPolicy, `channels = ["terminal", "desktop"]`, `channels = ["terminal", "phone"]`, 1))
	})
	a := askGrant(t, h.client(), newAgentKey(t), grant.Can("mail.read"))
	if err := h.srv.Decide(a.ev.Request, true, a.ev.Code, "pixel"); err != nil {
		t.Fatal(err)
	}
	res, err := a.wait(t)
	if err != nil {
		t.Fatal(err)
	}
	if res.Channel != "phone" || res.Strength != "strong" || res.Approver != "phone:pixel" {
		t.Errorf("result %+v", res)
	}
	_, recs := requestRecords(t, h)
	var decided bool
	for _, r := range recs {
		if r.Kind == audit.KindDecide && r.Verb == "APPROVE" && r.Target == a.ev.Request && r.Caller.Device == "pixel" && r.Decision == "approved" {
			decided = true
		}
	}
	if !decided {
		t.Errorf("no record of the phone's approval in %+v", recs)
	}
}

func mustPolicy(t *testing.T, text string) *policies.Policy {
	t.Helper()
	p, err := policies.Parse([]byte(text), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// reload writes text as the harness's policy file and reloads the daemon,
// as SIGHUP does.
func (h *harness) reload(t *testing.T, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(h.dir, "config.toml"), []byte(DefaultConfig(h.sock, me(t), me(t))), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.dir, "policy.toml"), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Reload(); err != nil {
		t.Fatal(err)
	}
}

// TestReloadKeepsApproval is issue 10's item 9: a SIGHUP that changes
// nothing used to void every approval given after it (the human was told
// "approved", the agent got conflict). A reload now re-decides a waiting
// request, and one it decides the same way waits on and is issued.
func TestReloadKeepsApproval(t *testing.T) {
	h := newHarness(t)
	a := askGrant(t, h.client(), newAgentKey(t), grant.Can("mail.read"))
	h.reload(t, testPolicy)
	h.reload(t, testPolicy+"\n# an edit that changes nothing\n")
	if err := h.client().Approve(ctxT(t), a.ev.Request, a.ev.Code, "terminal"); err != nil {
		t.Fatalf("approval after a reload: %v", err)
	}
	if res, err := a.wait(t); err != nil || res.Token == "" {
		t.Fatalf("grant after a reload that changed nothing: %+v, %v", res, err)
	}
}

// TestReloadRedecides reloads a policy that now refuses a waiting request:
// the request ends at once, the agent is told why, and an approver watching
// hears it ended and why; nobody can approve it any more.
func TestReloadRedecides(t *testing.T) {
	h := newHarness(t)
	type end struct{ id, outcome, reason string }
	ends := make(chan end, 4)
	watcher := h.client()
	go watcher.Watch(ctxT(t), client.Feed{Ended: func(id, outcome, reason string) { ends <- end{id, outcome, reason} }})
	waitFor(t, "the watcher", func() bool { return len(h.srv.channels()) > 1 })
	a := askGrant(t, h.client(), newAgentKey(t), grant.Can("mail.read"))
	h.reload(t, strings.Replace(testPolicy, `can = ["bank.*"]`, `can = ["bank.*", "mail.*"]`, 1))
	_, err := a.wait(t)
	wantCode(t, err, protocol.CodeForbidden)
	if !strings.Contains(err.Error(), "reloaded") || !strings.Contains(err.Error(), "never-bank") {
		t.Errorf("the agent was told %q", err)
	}
	select {
	case e := <-ends:
		if e.id != a.ev.Request || e.outcome != "forbidden" || !strings.Contains(e.reason, "reloaded") {
			t.Errorf("the approver was told %+v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the approver was not told")
	}
	err = h.client().Approve(ctxT(t), a.ev.Request, a.ev.Code, "terminal")
	wantCode(t, err, protocol.CodeNotFound)
}

// TestRenderedWhole is issue 10's item 2: a can list with mail.* and
// files.* after twenty calendar names was approved with those two never
// shown, because a rendering was cut at 4,000 characters and a line at 200.
// Every pattern is now on a line of its own, nothing is cut, and the
// summary counts them.
func TestRenderedWhole(t *testing.T) {
	h := newHarness(t)
	var pats []string
	for i := range 20 {
		pats = append(pats, fmt.Sprintf("calendar.%s", strings.Repeat(fmt.Sprintf("very-long-capability-name-%02d-", i), 6)))
	}
	pats = append(pats, "mail.*", "files.*")
	a := askGrant(t, h.client(), newAgentKey(t), grant.Can(pats...))
	v := h.srv.Pending()[0]
	for _, p := range pats {
		if !strings.Contains(v.Text, "  - "+p+"\n") {
			t.Errorf("pattern %q is not on a line of its own", p)
		}
	}
	if !strings.Contains(v.Summary, "22 capability patterns") || !strings.Contains(v.Text, "Capability patterns (22):") {
		t.Errorf("summary %q does not count the patterns", v.Summary)
	}
	if v.Lines != strings.Count(v.Text, "\n") || len(v.Text) < 4000 {
		t.Errorf("lines %d, text of %d bytes", v.Lines, len(v.Text))
	}
	var can []string
	for _, cv := range v.Scope.Caveats {
		if cv.Name == "can" {
			can, _ = grant.CaveatValue[[]string](cv)
		}
	}
	if len(can) != 22 || can[21] != "files.*" {
		t.Errorf("scope caveats %v", v.Scope.Caveats)
	}
	if err := h.client().Deny(ctxT(t), a.ev.Request, "terminal"); err != nil {
		t.Fatal(err)
	}
}

// TestBoundsRefuse asks for more patterns than the agent's bound: refused
// before any human is asked, with an error that says what to do.
func TestBoundsRefuse(t *testing.T) {
	h := newHarness(t, func(c *Config, o *Options) {
		o.Policy = mustPolicy(t, strings.Replace(testPolicy, "pending = 4", "pending = 4\nmax_patterns = 3", 1))
	})
	_, err := h.client().Grant(ctxT(t), newAgentKey(t), []grant.Caveat{grant.Can("a.x", "b.x", "c.x", "d.x")}, func(protocol.Event) {
		t.Error("a request beyond the bound reached a human")
	})
	wantCode(t, err, protocol.CodeInvalidParams)
	if e := err.(*protocol.Error); !strings.Contains(e.Message, "at most 3") || !strings.Contains(e.Fix, "max_patterns") {
		t.Errorf("refusal %+v", e)
	}
}

// consentWithEffects is a proposal of n effects, the last of which sends
// the calendar to an outside address, and its consent.
func consentWithEffects(t *testing.T, principal string, n int) (json.RawMessage, json.RawMessage) {
	t.Helper()
	exp := time.Now().Unix() + 600
	var effects []any
	for i := range n - 1 {
		effects = append(effects, map[string]any{"op": "update", "target": fmt.Sprintf("calendar/event-%03d", i), "field": "time",
			"from": "09:00", "to": "10:00", "detail": "move the meeting by an hour, as asked in the request of this morning"})
	}
	effects = append(effects, map[string]any{"op": "send", "target": "mailto:outside@evil.example", "detail": "the whole calendar"})
	p := map[string]any{"id": "p_many", "capability": "shop.order", "summary": "Tidy the calendar",
		"effects": effects, "cost": map[string]any{"amount": 100000, "currency": "USD"}, "risk": "high",
		"undo": nil, "expires": exp}
	raw, _ := json.Marshal(p)
	hash, err := grant.ProposalHash(raw)
	if err != nil {
		t.Fatal(err)
	}
	p["hash"] = hash
	raw, _ = json.Marshal(p)
	return raw, consentFor(principal, "p_many", hash, exp)
}

// TestConsentRenderedWhole is the rest of issue 10's item 2: a consent
// whose last effect sends the calendar outside, with the cost · risk · undo
// line after it, was approved with all of that cut. Now every effect, the
// summary first and the commit line last are in the text; a proposal with
// more effects than the agent's bound is refused before a human sees it.
func TestConsentRenderedWhole(t *testing.T) {
	h := newHarness(t)
	prop, consent := consentWithEffects(t, h.srv.Principal(), policies.DefaultMaxEffects)
	evs := make(chan protocol.Event, 1)
	cl := h.client()
	go cl.Consent(ctxT(t), newAgentKey(t), "shop.example", consent, prop, func(e protocol.Event) { evs <- e })
	select {
	case <-evs:
	case <-time.After(10 * time.Second):
		t.Fatal("the consent did not reach the human")
	}
	v := h.srv.Pending()[0]
	for _, want := range []string{"In short: 32 effects · cost 1000.00 USD · risk high · no undo", "mailto:outside@evil.example",
		"the whole calendar", "COMMIT exactly this proposal"} {
		if !strings.Contains(v.Text, want) {
			t.Errorf("the rendering lacks %q", want)
		}
	}
	var sp grant.Proposal
	if err := json.Unmarshal(v.Scope.Proposal, &sp); err != nil || len(sp.Effects) != 32 || sp.Effects[31].Target != "mailto:outside@evil.example" {
		t.Errorf("scope %s: %v", v.Scope.Proposal, err)
	}
	cl.Close()

	prop, consent = consentWithEffects(t, h.srv.Principal(), policies.DefaultMaxEffects+1)
	_, err := h.client().Consent(ctxT(t), newAgentKey(t), "shop.example", consent, prop, func(protocol.Event) {
		t.Error("a proposal beyond the bound reached a human")
	})
	wantCode(t, err, protocol.CodeInvalidParams)
	if !strings.Contains(err.Error(), "max_effects") {
		t.Errorf("refusal %v", err)
	}
}

// selfIdentity is the test process as the kernel would describe it, with a
// pid that marks it as made up.
func selfIdentity(t *testing.T) peercred.Identity {
	return peercred.Identity{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), PID: 1, User: me(t)}
}

// TestLogFloodFolded: an agent that closes a thousand connections in the
// middle of a frame makes the daemon log each one; with the journal logger
// serve uses (its window stretched), that is a few lines and a count, not a
// thousand lines (issue 10: one agent made the daemon print 9 500–17 000
// lines a second).
func TestLogFloodFolded(t *testing.T) {
	var out syncBuffer
	// The window is an hour so that the count does not depend on how fast
	// a loaded machine closes a thousand connections: with serve's 1 s
	// window a slow run spans several windows, each with its own budget.
	jl := journal.New(journal.Options{Identifier: "parley-keyd", Stderr: &out, NoJournal: true, Window: time.Hour})
	h := newHarness(t, func(c *Config, o *Options) { o.Logf = jl.Printf })
	const n = 1000
	for range n {
		r := h.raw()
		r.send(`{"parley":1,"id":"x","ve`)
		r.nc.Close()
	}
	// Every connection is gone when the server holds none.
	waitFor(t, "the connections to close", func() bool {
		h.srv.Server.mu.Lock()
		defer h.srv.Server.mu.Unlock()
		return len(h.srv.conns) == 0
	})
	jl.Flush()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) > 100 {
		t.Errorf("%d connections closed mid-frame wrote %d log lines", n, len(lines))
	}
	if !strings.Contains(out.String(), "[folded: ") {
		t.Errorf("no line counts what was folded:\n%s", out.String())
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
