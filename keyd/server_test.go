package keyd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/client"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/policies"
)

// testPolicy lets the test agent get calendar grants at once and asks the
// human for everything else.
const testPolicy = `
version = 1
[[agent]]
name = "tester"
any = true
rate = 100000
pending = 4

[[rule]]
name = "calendar-auto"
agents = ["tester"]
action = "auto"
svc = ["cal.example"]
can = ["calendar.*"]
max_exp = "1h"

[[rule]]
name = "never-bank"
agents = ["tester"]
action = "deny"
can = ["bank.*"]

[[rule]]
name = "ask-rest"
agents = ["*"]
action = "ask"
max_exp = "1h"
default_exp = "15m"
channels = ["terminal", "desktop"]

[[consent]]
name = "ask-consent"
agents = ["*"]
channels = ["terminal"]
max_exp = "15m"
`

type harness struct {
	t      *testing.T
	dir    string
	sock   string
	srv    *Daemon
	stop   context.CancelFunc // ends Run
	key    ed25519.PrivateKey // the principal
	cfg    *Config
	served chan error
}

func me(t *testing.T) string {
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}

type harnessOpt func(*Config, *Options)

func newHarness(t *testing.T, opts ...harnessOpt) *harness {
	t.Helper()
	dir := t.TempDir()
	h := &harness{t: t, dir: dir, sock: filepath.Join(dir, "agent.sock"), served: make(chan error, 1)}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	h.key = priv
	u := me(t)
	cfg, err := ParseConfig([]byte(DefaultConfig(h.sock, u, u)), filepath.Join(dir, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	h.cfg = cfg
	pol, err := policies.Parse([]byte(testPolicy), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Config: cfg, Policy: pol, Signer: priv, State: dir, Logf: t.Logf}
	for _, f := range opts {
		f(cfg, &o)
	}
	h.srv, err = New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	h.stop = stop
	go func() { h.served <- h.srv.Run(ctx, ln) }()
	waitStarted(t, h.srv)
	t.Cleanup(func() {
		stop()
		select {
		case err := <-h.served:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("the daemon did not stop within 15 s")
		}
	})
	return h
}

func (h *harness) client() *client.Client {
	h.t.Helper()
	c, err := client.Dial(h.sock)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c
}

func newAgentKey(t *testing.T) ed25519.PrivateKey {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return priv
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func wantCode(t *testing.T, err error, code protocol.Code) {
	t.Helper()
	var e *protocol.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("got error %v, want code %s", err, code)
	}
}

// grantRecord returns the audit record of the grant id.
func grantRecord(t *testing.T, h *harness, id string) audit.Record {
	t.Helper()
	for _, r := range auditRecords(t, h) {
		if r.GrantID == id {
			return r
		}
	}
	t.Fatalf("no audit record of grant %s", id)
	return audit.Record{}
}

func auditRecords(t *testing.T, h *harness) []audit.Record {
	t.Helper()
	f, err := os.Open(filepath.Join(h.dir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := audit.VerifyChain(f); err != nil {
		t.Fatalf("audit log does not verify: %v", err)
	}
	f.Seek(0, 0)
	var out []audit.Record
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func TestHelloManifest(t *testing.T) {
	h := newHarness(t)
	m, err := h.client().Hello(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if m.Principal != grant.FormatPublicKey(h.key.Public().(ed25519.PublicKey)) {
		t.Errorf("principal = %s", m.Principal)
	}
	if m.Caller.UID != uint32(os.Getuid()) || m.Caller.PID != int32(os.Getpid()) {
		t.Errorf("caller = %+v, want this process", m.Caller)
	}
	if strings.Join(m.Caller.Roles, ",") != "agent,approver" || !m.Caller.Weak {
		t.Errorf("roles = %v weak=%v, want agent,approver weak", m.Caller.Roles, m.Caller.Weak)
	}
	if m.Caller.Agent != "tester" || m.Limits.Frame != protocol.MaxFrame {
		t.Errorf("manifest = %+v", m)
	}
	var names []string
	for _, v := range m.Verbs {
		names = append(names, v.Name)
	}
	if got := strings.Join(names, " "); got != "HELLO GRANT EXPLAIN CONSENT PENDING APPROVE DENY WATCH AUDIT LOCK UNLOCK REMEMBERED FORGET" {
		t.Errorf("verbs = %s", got)
	}
}

func TestGrantAuto(t *testing.T) {
	h := newHarness(t)
	agent := newAgentKey(t)
	now := time.Now().Unix()
	res, err := h.client().Grant(ctxT(t), agent, []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.*"), grant.Exp(now + 1800)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := grant.Decode(res.Token)
	if err != nil {
		t.Fatal(err)
	}
	holder := grant.FormatPublicKey(agent.Public().(ed25519.PublicKey))
	if tok.Holder() != holder || tok.Issuer() != h.srv.Principal() {
		t.Errorf("holder %s issuer %s", tok.Holder(), tok.Issuer())
	}
	if exp, ok := tok.Expiry(); !ok || exp != now+1800 {
		t.Errorf("expiry = %d, %v; want %d", exp, ok, now+1800)
	}
	if res.Decision != "auto" || res.Rule != "calendar-auto" {
		t.Errorf("decided by %s/%s, want auto/calendar-auto", res.Decision, res.Rule)
	}
	// The grant works at the service it names, for the agent's key only.
	ctx := grant.Context{Service: "cal.example", Verb: "ASK", Capability: "calendar.find", Now: now, ProofKey: holder}
	if _, err := grant.Verify([]string{res.Token}, []string{h.srv.Principal()}, ctx); err != nil {
		t.Errorf("issued grant does not verify: %v", err)
	}
	ctx.Service = "bank.example"
	if _, err := grant.Verify([]string{res.Token}, []string{h.srv.Principal()}, ctx); err == nil {
		t.Error("issued grant works at another service")
	}
	// Property 2: the grant is in the audit log, which verifies.
	recs := auditRecords(t, h)
	last := recs[len(recs)-1]
	if last.Kind != "issue" || last.GrantID != tok.ID() || last.Holder != holder || last.Expiry != now+1800 || last.DecidedBy.Rule != "calendar-auto" {
		t.Errorf("audit record = %+v", last)
	}
	if last.Caller == nil || last.Caller.PID != int32(os.Getpid()) {
		t.Errorf("audit caller = %+v", last.Caller)
	}
	raw, _ := json.Marshal(last)
	if strings.Contains(string(raw), res.Token) || strings.Contains(string(raw), `"s":`) {
		t.Error("audit record holds the token or a signature")
	}
}

func TestGrantDeniedByPolicy(t *testing.T) {
	h := newHarness(t)
	_, err := h.client().Grant(ctxT(t), newAgentKey(t), []grant.Caveat{grant.Can("bank.transfer")}, nil)
	wantCode(t, err, protocol.CodeForbidden)
	var e *protocol.Error
	errors.As(err, &e)
	if e.Rule != "never-bank" || e.Fix == "" {
		t.Errorf("refusal = %+v, want rule never-bank and a fix", e)
	}
	recs := auditRecords(t, h)
	if last := recs[len(recs)-1]; last.Kind != "deny" || last.DecidedBy.Rule != "never-bank" {
		t.Errorf("audit = %+v", last)
	}
}

// asked starts a grant request that needs approval and returns the event
// with the match code and a channel carrying the final result.
type asked struct {
	ev  protocol.Event
	res chan error
	tok chan *protocol.GrantResult
}

func askGrant(t *testing.T, c *client.Client, key ed25519.PrivateKey, cavs ...grant.Caveat) *asked {
	t.Helper()
	a := &asked{res: make(chan error, 1), tok: make(chan *protocol.GrantResult, 1)}
	evs := make(chan protocol.Event, 4)
	go func() {
		r, err := c.Grant(ctxT(t), key, cavs, func(e protocol.Event) { evs <- e })
		a.tok <- r
		a.res <- err
	}()
	select {
	case a.ev = <-evs:
	case err := <-a.res:
		t.Fatalf("request ended before waiting for approval: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no EVENT with a match code")
	}
	if a.ev.Request == "" || len(a.ev.Code) != 2 {
		t.Fatalf("event = %+v", a.ev)
	}
	return a
}

func (a *asked) wait(t *testing.T) (*protocol.GrantResult, error) {
	t.Helper()
	select {
	case err := <-a.res:
		return <-a.tok, err
	case <-time.After(15 * time.Second):
		t.Fatal("request did not end")
	}
	return nil, nil
}

func TestGrantAskApprove(t *testing.T) {
	h := newHarness(t)
	a := askGrant(t, h.client(), newAgentKey(t), grant.Can("mail.read"))
	human := h.client()
	pend, err := human.Pending(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(pend) != 1 || pend[0].ID != a.ev.Request {
		t.Fatalf("pending = %+v", pend)
	}
	v := pend[0]
	if strings.Contains(v.Text, a.ev.Code+" ") || !strings.Contains(v.Text, "mail.read") || v.Rule != "ask-rest" {
		t.Errorf("rendering = %q", v.Text)
	}
	if len(v.Choices) != 3 || !contains(v.Choices, a.ev.Code) {
		t.Errorf("choices %v do not hold the code %s", v.Choices, a.ev.Code)
	}
	if err := human.Approve(ctxT(t), v.ID, a.ev.Code, "terminal"); err != nil {
		t.Fatal(err)
	}
	res, err := a.wait(t)
	if err != nil {
		t.Fatal(err)
	}
	if res.Decision != "ask" || res.Channel != "terminal" || res.Strength != "weak" || !strings.Contains(res.Approver, me(t)) {
		t.Errorf("result = %+v", res)
	}
	tok, _ := grant.Decode(res.Token)
	last := grantRecord(t, h, tok.ID())
	if last.Kind != audit.KindIssue || last.DecidedBy.Channel != "terminal" || last.DecidedBy.Strength != "weak" || last.DecidedBy.Approver == "" {
		t.Errorf("audit = %+v", last)
	}
	// Default lifetime of the ask rule: 15 minutes.
	if exp, _ := tok.Expiry(); exp > time.Now().Unix()+15*60 {
		t.Errorf("expiry %d beyond the default lifetime", exp)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestGrantWrongCodeDenies(t *testing.T) {
	h := newHarness(t)
	a := askGrant(t, h.client(), newAgentKey(t), grant.Can("mail.read"))
	wrong := "10"
	if a.ev.Code == wrong {
		wrong = "11"
	}
	err := h.client().Approve(ctxT(t), a.ev.Request, wrong, "terminal")
	wantCode(t, err, protocol.CodeDenied)
	_, err = a.wait(t)
	wantCode(t, err, protocol.CodeDenied)
	// A second try with the right code finds nothing: one guess only.
	err = h.client().Approve(ctxT(t), a.ev.Request, a.ev.Code, "terminal")
	wantCode(t, err, protocol.CodeNotFound)
}

func TestGrantDeny(t *testing.T) {
	h := newHarness(t)
	a := askGrant(t, h.client(), newAgentKey(t), grant.Can("mail.read"))
	if err := h.client().Deny(ctxT(t), a.ev.Request, "terminal"); err != nil {
		t.Fatal(err)
	}
	_, err := a.wait(t)
	wantCode(t, err, protocol.CodeDenied)
	// The DENY's record and the GRANT's are written at once, in either
	// order: the GRANT's is its last of verb GRANT.
	recs := auditRecords(t, h)
	var last audit.Record
	for _, r := range recs {
		if r.Verb == protocol.VerbGrant {
			last = r
		}
	}
	if last.Kind != "deny" || last.Decision != "denied" || last.GrantID != "" {
		t.Errorf("audit = %+v", last)
	}
}

func TestGrantApprovalTimeout(t *testing.T) {
	h := newHarness(t, func(c *Config, o *Options) { c.ApprovalTimeout.Duration = 300 * time.Millisecond })
	a := askGrant(t, h.client(), newAgentKey(t), grant.Can("mail.read"))
	_, err := a.wait(t)
	wantCode(t, err, protocol.CodeTimeout)
	if p := h.srv.Pending(); len(p) != 0 {
		t.Errorf("pending after timeout = %v", p)
	}
}

func TestGrantWithdrawnOnDisconnect(t *testing.T) {
	h := newHarness(t)
	c, err := client.Dial(h.sock)
	if err != nil {
		t.Fatal(err)
	}
	askGrant(t, c, newAgentKey(t), grant.Can("mail.read"))
	c.Close()
	waitFor(t, "the request to be withdrawn", func() bool { return len(h.srv.Pending()) == 0 })
	waitFor(t, "the withdrawal record", func() bool {
		recs := auditRecords(t, h)
		return len(recs) > 0 && recs[len(recs)-1].Kind == "withdrawn"
	})
}

func TestShutdownAnswersWaiting(t *testing.T) {
	h := newHarness(t)
	a := askGrant(t, h.client(), newAgentKey(t), grant.Can("mail.read"))
	h.stop()
	_, err := a.wait(t)
	wantCode(t, err, protocol.CodeUnavailable)
}

func TestPendingLimit(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	for i := 0; i < 4; i++ {
		askGrant(t, c, newAgentKey(t), grant.Can(fmt.Sprintf("mail.r%d", i)))
	}
	_, err := c.Grant(ctxT(t), newAgentKey(t), []grant.Caveat{grant.Can("mail.x")}, nil)
	wantCode(t, err, protocol.CodeLimit)
}

// rawConn speaks frames by hand, for what the typed client never sends.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	br *bufio.Reader
}

func (h *harness) raw() *rawConn {
	nc, err := net.Dial("unix", h.sock)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { nc.Close() })
	return &rawConn{t: h.t, nc: nc, br: bufio.NewReaderSize(nc, 1<<16)}
}

func (r *rawConn) send(s string) {
	r.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.nc.Write([]byte(s)); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawConn) read() protocol.Frame {
	r.t.Helper()
	r.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := r.br.ReadBytes('\n')
	if err != nil {
		r.t.Fatal(err)
	}
	var f protocol.Frame
	if err := json.Unmarshal(line, &f); err != nil {
		r.t.Fatalf("reply %q: %v", line, err)
	}
	return f
}

func TestFramesBadInputKeepsConnection(t *testing.T) {
	h := newHarness(t)
	r := h.raw()
	big := `{"parley":1,"id":"big","verb":"HELLO","pad":"` + strings.Repeat("x", protocol.MaxFrame+10) + `"}` + "\n"
	cases := []struct {
		name, send string
		code       protocol.Code
		re         string
	}{
		{"fail/oversized", big, protocol.CodeBadFrame, ""},
		{"fail/not-json", "{nope\n", protocol.CodeBadFrame, ""},
		{"fail/array", "[1,2]\n", protocol.CodeBadFrame, ""},
		{"fail/no-id", `{"parley":1,"verb":"HELLO"}` + "\n", protocol.CodeBadFrame, ""},
		{"fail/wrong-version", `{"parley":2,"id":"v","verb":"HELLO"}` + "\n", protocol.CodeBadFrame, "v"},
		{"fail/unknown-verb", `{"parley":1,"id":"u","verb":"STEAL"}` + "\n", protocol.CodeBadFrame, "u"},
		{"fail/grant-no-body", `{"parley":1,"id":"g","verb":"GRANT"}` + "\n", protocol.CodeInvalidParams, "g"},
		{"fail/grant-no-proof", `{"parley":1,"id":"p","verb":"GRANT","grant":{"holder":"` + grant.FormatPublicKey(newAgentKey(t).Public().(ed25519.PublicKey)) + `","caveats":[]}}` + "\n", protocol.CodeUnauthorized, "p"},
		{"fail/unknown-caveat", `{"parley":1,"id":"c","verb":"GRANT","grant":{"holder":"` + grant.FormatPublicKey(newAgentKey(t).Public().(ed25519.PublicKey)) + `","caveats":[{"admin":true}]}}` + "\n", protocol.CodeInvalidParams, "c"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r.send(tc.send)
			f := r.read()
			if f.Kind != protocol.KindError || f.Code != tc.code || f.Re != tc.re || f.Message == "" {
				t.Errorf("reply = %+v, want ERROR %s re %q", f, tc.code, tc.re)
			}
			// The connection stays usable after every bad frame.
			r.send(`{"parley":1,"id":"ok","verb":"HELLO"}` + "\n")
			if f := r.read(); f.Kind != protocol.KindBrief || f.Re != "ok" {
				t.Errorf("after bad frame: %+v", f)
			}
		})
	}
}

func TestGrantProofChecks(t *testing.T) {
	h := newHarness(t)
	agent, other := newAgentKey(t), newAgentKey(t)
	holder := grant.FormatPublicKey(agent.Public().(ed25519.PublicKey))
	body := `{"holder":"` + holder + `","caveats":[{"can":["calendar.*"]},{"svc":["cal.example"]}]}`
	digest, err := protocol.GrantDigest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Unix()
	mk := func(k ed25519.PrivateKey, aud, verb, target string, ts int64) string {
		p, err := grant.MakeProof(k, aud, verb, target, ts)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(p)
		return string(b)
	}
	pr := h.srv.Principal()
	cases := []struct {
		name, proof string
		code        protocol.Code
	}{
		{"fail/other-key", mk(other, pr, "GRANT", digest, now), protocol.CodeUnauthorized},
		{"fail/other-audience", mk(agent, "ed25519:someone-else", "GRANT", digest, now), protocol.CodeUnauthorized},
		{"fail/other-verb", mk(agent, pr, "CONSENT", digest, now), protocol.CodeUnauthorized},
		{"fail/other-body", mk(agent, pr, "GRANT", "AAAA", now), protocol.CodeUnauthorized},
		{"fail/stale", mk(agent, pr, "GRANT", digest, now-301), protocol.CodeUnauthorized},
		{"ok/fresh", mk(agent, pr, "GRANT", digest, now), ""},
	}
	r := h.raw()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := fmt.Sprint(i)
			r.send(`{"parley":1,"id":"` + id + `","verb":"GRANT","grant":` + body + `,"proof":` + tc.proof + "}\n")
			f := r.read()
			if tc.code == "" {
				if f.Kind != protocol.KindGrant {
					t.Fatalf("reply = %+v", f)
				}
				return
			}
			if f.Kind != protocol.KindError || f.Code != tc.code {
				t.Errorf("reply = %+v, want %s", f, tc.code)
			}
		})
	}
}

// failingAudit is a log whose disk filled after the daemon started: it
// takes the start and stop records and refuses everything else.
type failingAudit struct{ n int }

func (f *failingAudit) AppendWhile(r audit.Record, during func()) (uint64, error) {
	during()
	return f.Append(r)
}

func (f *failingAudit) Append(r audit.Record) (uint64, error) {
	if r.Kind == audit.KindStart || r.Kind == audit.KindStop {
		return 1, nil
	}
	f.n++
	return 0, errors.New("disk full")
}

func TestAuditFailureRefusesGrant(t *testing.T) {
	fa := &failingAudit{}
	h := newHarness(t, func(c *Config, o *Options) { o.Audit = fa })
	res, err := h.client().Grant(ctxT(t), newAgentKey(t), []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find")}, nil)
	wantCode(t, err, protocol.CodeUnavailable)
	if res != nil || fa.n == 0 {
		t.Errorf("res = %v, appends = %d", res, fa.n)
	}
	// The daemon is still up.
	if _, err := h.client().Hello(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func TestRolesFromConfig(t *testing.T) {
	u := me(t)
	t.Run("fail/stranger", func(t *testing.T) {
		h := newHarness(t, func(c *Config, o *Options) { c.Access = Access{} })
		_, err := h.client().Hello(ctxT(t))
		wantCode(t, err, protocol.CodeUnauthorized)
	})
	t.Run("fail/agent-cannot-approve", func(t *testing.T) {
		h := newHarness(t, func(c *Config, o *Options) { c.Access = Access{AgentUsers: []string{u}} })
		c := h.client()
		_, err := c.Pending(ctxT(t))
		wantCode(t, err, protocol.CodeForbidden)
		wantCode(t, c.Approve(ctxT(t), "r_x", "12", "terminal"), protocol.CodeForbidden)
		wantCode(t, c.Deny(ctxT(t), "r_x", "terminal"), protocol.CodeForbidden)
	})
	t.Run("fail/approver-cannot-ask", func(t *testing.T) {
		h := newHarness(t, func(c *Config, o *Options) { c.Access = Access{ApproverUsers: []string{u}} })
		_, err := h.client().Grant(ctxT(t), newAgentKey(t), nil, nil)
		wantCode(t, err, protocol.CodeForbidden)
	})
	t.Run("ok/both-without-dual-is-agent-only", func(t *testing.T) {
		h := newHarness(t, func(c *Config, o *Options) {
			c.Access = Access{AgentUsers: []string{u}, ApproverGroups: []string{fmt.Sprint(os.Getgid())}}
		})
		_, err := h.client().Pending(ctxT(t))
		wantCode(t, err, protocol.CodeForbidden)
	})
}

func TestConcurrentClients(t *testing.T) {
	h := newHarness(t)
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	now := time.Now().Unix()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.Dial(h.sock)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			_, err = c.Grant(context.Background(), newAgentKey(t), []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find"), grant.Exp(now + 600)}, nil)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	issued := 0
	for _, r := range auditRecords(t, h) {
		if r.Kind == "issue" {
			issued++
		}
	}
	if issued != n {
		t.Errorf("audit holds %d issues, want %d", issued, n)
	}
}

// proposalFor builds a proposal as a service would send it, with its hash.
func proposalFor(t *testing.T, id string, amount int64, expires int64) (json.RawMessage, string) {
	t.Helper()
	p := map[string]any{
		"id": id, "capability": "shop.order", "summary": "Order 3 notebooks",
		"effects": []any{map[string]any{"op": "charge", "target": "card/visa-4242", "detail": "3 notebooks"}},
		"cost":    map[string]any{"amount": amount, "currency": "USD"}, "risk": "medium",
		"undo": nil, "expires": expires,
	}
	raw, _ := json.Marshal(p)
	hash, err := grant.ProposalHash(raw)
	if err != nil {
		t.Fatal(err)
	}
	p["hash"] = hash
	raw, _ = json.Marshal(p)
	return raw, hash
}

func consentFor(principal, id, hash string, expires int64) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"parley": 1, "id": "s9", "re": "4", "kind": "ERROR", "code": "consent_required",
		"message": "needs consent", "consent": map[string]any{"proposal": id, "hash": hash, "service": "shop.example",
			"capability": "shop.order", "principal": principal, "summary": "Order", "expires": expires}})
	return b
}

func TestConsentApproved(t *testing.T) {
	h := newHarness(t)
	agent := newAgentKey(t)
	exp := time.Now().Unix() + 600
	prop, hash := proposalFor(t, "p_1", 4500, exp)
	c := h.client()
	evs := make(chan protocol.Event, 1)
	done := make(chan *protocol.GrantResult, 1)
	errc := make(chan error, 1)
	go func() {
		r, err := c.Consent(ctxT(t), agent, "shop.example", consentFor(h.srv.Principal(), "p_1", hash, exp), prop, func(e protocol.Event) { evs <- e })
		done <- r
		errc <- err
	}()
	var ev protocol.Event
	select {
	case ev = <-evs:
	case err := <-errc:
		t.Fatalf("consent ended early: %v", err)
	}
	human := h.client()
	list, _ := human.Pending(ctxT(t))
	if len(list) != 1 || list[0].Kind != "consent" {
		t.Fatalf("pending = %+v", list)
	}
	// The human sees the daemon's rendering of the checked proposal.
	for _, want := range []string{"45.00 USD", "card/visa-4242", "risk: medium", "undo: never", hash} {
		if !strings.Contains(list[0].Text, want) {
			t.Errorf("rendering lacks %q:\n%s", want, list[0].Text)
		}
	}
	if err := human.Approve(ctxT(t), ev.Request, ev.Code, "terminal"); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	tok, err := grant.Decode(res.Token)
	if err != nil {
		t.Fatal(err)
	}
	// Property 5: exactly the five caveats of §6.6, in order.
	want, _ := json.Marshal(grant.ConsentCaveats("shop.example", "shop.order", hash, exp))
	got, _ := json.Marshal(tok.Blocks[0].Caveats)
	if string(got) != string(want) {
		t.Errorf("caveats = %s\nwant %s", got, want)
	}
	holder := grant.FormatPublicKey(agent.Public().(ed25519.PublicKey))
	trusted := []string{h.srv.Principal()}
	now := time.Now().Unix()
	commit := grant.Context{Service: "shop.example", Verb: "COMMIT", Capability: "shop.order", Now: now, ProofKey: holder,
		Proposal: &grant.Proposal{Hash: hash, Cost: &grant.Money{Amount: 4500, Currency: "USD"}, Risk: "medium"}}
	if _, err := grant.Verify([]string{res.Token}, trusted, commit); err != nil {
		t.Errorf("consent does not authorize its COMMIT: %v", err)
	}
	undo := grant.Context{Service: "shop.example", Verb: "UNDO", Capability: "shop.order", Now: now, ProofKey: holder}
	if _, err := grant.Verify([]string{res.Token}, trusted, undo); err == nil {
		t.Error("consent authorizes UNDO")
	}
	if last := grantRecord(t, h, tok.ID()); last.Kind != "consent" || last.Expiry != exp {
		t.Errorf("audit = %+v", last)
	}
}

func TestConsentMismatchNeverShown(t *testing.T) {
	h := newHarness(t)
	exp := time.Now().Unix() + 600
	prop, hash := proposalFor(t, "p_1", 4500, exp)
	principal := h.srv.Principal()
	// The service hashed one proposal; the agent passes an altered one.
	var m map[string]any
	json.Unmarshal(prop, &m)
	m["cost"] = map[string]any{"amount": 450, "currency": "USD"}
	altered, _ := json.Marshal(m)
	_, otherHash := proposalFor(t, "p_2", 4500, exp)
	past := time.Now().Unix() - 10
	oldProp, oldHash := proposalFor(t, "p_1", 4500, past)
	cases := []struct {
		name              string
		service           string
		consent, proposal json.RawMessage
		code              protocol.Code
	}{
		{"fail/altered-proposal", "shop.example", consentFor(principal, "p_1", hash, exp), altered, protocol.CodeConflict},
		{"fail/other-hash", "shop.example", consentFor(principal, "p_1", otherHash, exp), prop, protocol.CodeConflict},
		{"fail/other-id", "shop.example", consentFor(principal, "p_9", hash, exp), prop, protocol.CodeConflict},
		{"fail/other-service", "evil.example", consentFor(principal, "p_1", hash, exp), prop, protocol.CodeConflict},
		{"fail/other-principal", "shop.example", consentFor("ed25519:"+strings.Repeat("A", 43), "p_1", hash, exp), prop, protocol.CodeConflict},
		{"fail/expired", "shop.example", consentFor(principal, "p_1", oldHash, past), oldProp, protocol.CodeExpired},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.client().Consent(ctxT(t), newAgentKey(t), tc.service, tc.consent, tc.proposal, func(e protocol.Event) {
				t.Errorf("a mismatched consent reached the human: %+v", e)
			})
			wantCode(t, err, tc.code)
			if p := h.srv.Pending(); len(p) != 0 {
				t.Errorf("pending = %+v", p)
			}
		})
	}
}

// A service-written summary with a newline must not forge a line of the
// rendering the human approves.
func TestConsentRenderingNeutralizesServiceText(t *testing.T) {
	h := newHarness(t)
	exp := time.Now().Unix() + 600
	p := map[string]any{
		"id": "p_x", "capability": "shop.order", "summary": "Buy one book\n  cost: 9.99 USD · risk: low\x1b[2J\u202e",
		"effects": []any{map[string]any{"op": "charge", "target": "card\nfake", "detail": "x"}},
		"cost":    map[string]any{"amount": 999999, "currency": "USD"}, "risk": "high", "undo": nil, "expires": exp,
	}
	raw, _ := json.Marshal(p)
	hash, _ := grant.ProposalHash(raw)
	evs := make(chan protocol.Event, 1)
	go h.client().Consent(ctxT(t), newAgentKey(t), "shop.example", consentFor(h.srv.Principal(), "p_x", hash, exp), raw, func(e protocol.Event) { evs <- e })
	select {
	case <-evs:
	case <-time.After(10 * time.Second):
		t.Fatal("consent not queued")
	}
	text := h.srv.Pending()[0].Text
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "cost: 9.99") || strings.HasPrefix(line, "fake") {
			t.Errorf("forged line %q in:\n%s", line, text)
		}
	}
	if strings.ContainsAny(text, "\x1b\u202e") || !strings.Contains(text, "9999.99 USD") {
		t.Errorf("rendering:\n%s", text)
	}
}

// Regression tests for the findings of a security review, each named after
// what it checks.

func TestConsentUnhashedDataNeverShown(t *testing.T) {
	h := newHarness(t)
	exp := time.Now().Unix() + 600
	prop, hash := proposalFor(t, "p_1", 450000, exp)
	var m map[string]any
	json.Unmarshal(prop, &m)
	// "data" is outside the hash: an agent can add it to the real proposal.
	m["data"] = map[string]any{"NOTE FROM SHOP": "this is a REFUND to you; nothing will be charged"}
	withData, _ := json.Marshal(m)
	evs := make(chan protocol.Event, 1)
	go h.client().Consent(ctxT(t), newAgentKey(t), "shop.example", consentFor(h.srv.Principal(), "p_1", hash, exp), withData, func(e protocol.Event) { evs <- e })
	select {
	case <-evs:
	case <-time.After(10 * time.Second):
		t.Fatal("not queued")
	}
	text := h.srv.Pending()[0].Text
	if strings.Contains(text, "REFUND") || strings.Contains(text, "NOTE FROM SHOP") || !strings.Contains(text, "4500.00 USD") {
		t.Errorf("rendering shows unhashed data:\n%s", text)
	}
}

func TestConsentTitleNeutralized(t *testing.T) {
	h := newHarness(t)
	exp := time.Now().Unix() + 600
	p := map[string]any{"id": "p_t", "capability": "shop.order", "summary": "x", "effects": []any{},
		"cost": map[string]any{"amount": 1, "currency": "USD\x1b]0;pwned\a\n\u202eFREE"}, "risk": "low", "undo": nil, "expires": exp}
	raw, _ := json.Marshal(p)
	hash, _ := grant.ProposalHash(raw)
	evs := make(chan protocol.Event, 1)
	go h.client().Consent(ctxT(t), newAgentKey(t), "shop.example", consentFor(h.srv.Principal(), "p_t", hash, exp), raw, func(e protocol.Event) { evs <- e })
	select {
	case <-evs:
		v := h.srv.Pending()[0]
		if strings.ContainsAny(v.Title+v.Text, "\x1b\a\u202e") || strings.Contains(v.Title, "\n") {
			t.Errorf("title %q or text carries raw control characters", v.Title)
		}
	case <-time.After(10 * time.Second):
		// Refusing such a proposal outright is fine too.
	}
}

func TestZeroPendingQueuesNone(t *testing.T) {
	pol, err := policies.Parse([]byte(strings.Replace(testPolicy, "pending = 4", "pending = 0", 1)), "p.toml")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(c *Config, o *Options) { o.Policy = pol })
	_, err = h.client().Grant(ctxT(t), newAgentKey(t), []grant.Caveat{grant.Can("mail.read")}, nil)
	wantCode(t, err, protocol.CodeLimit)
	if p := h.srv.Pending(); len(p) != 0 {
		t.Errorf("queued with pending = 0: %v", p)
	}
}

func TestReloadRemovesApproverFromOpenConnection(t *testing.T) {
	h := newHarness(t)
	human := h.client()
	if _, err := human.Pending(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	cfg := *h.cfg
	cfg.Access = Access{AgentUsers: []string{me(t)}}
	h.srv.swap(&cfg, nil)
	// The connection opened before the reload has lost its approver role.
	_, err := human.Pending(ctxT(t))
	wantCode(t, err, protocol.CodeForbidden)
}

func TestConnectionsPerUserBounded(t *testing.T) {
	h := newHarness(t, func(c *Config, o *Options) { c.MaxConnectionsPerUser = 3 })
	for i := 0; i < 3; i++ {
		if _, err := h.client().Hello(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	_, err := h.client().Hello(ctxT(t))
	wantCode(t, err, protocol.CodeLimit)
}

func TestConsentWithoutPrincipalRefused(t *testing.T) {
	h := newHarness(t)
	exp := time.Now().Unix() + 600
	prop, hash := proposalFor(t, "p_1", 100, exp)
	_, err := h.client().Consent(ctxT(t), newAgentKey(t), "shop.example", consentFor("", "p_1", hash, exp), prop, func(e protocol.Event) {
		t.Error("a consent for no principal reached the human")
	})
	wantCode(t, err, protocol.CodeConflict)
}

func TestAuditRecordOfHugeConsentBounded(t *testing.T) {
	h := newHarness(t)
	exp := time.Now().Unix() + 600
	prop, hash := proposalFor(t, "p_1", 100, exp)
	var c map[string]any
	json.Unmarshal(consentFor(h.srv.Principal(), "p_1", hash, exp), &c)
	c["consent"].(map[string]any)["summary"] = strings.Repeat("spam ", 180_000)
	big, _ := json.Marshal(c)
	cl, _ := client.Dial(h.sock)
	evs := make(chan protocol.Event, 1)
	go cl.Consent(ctxT(t), newAgentKey(t), "shop.example", big, prop, func(e protocol.Event) { evs <- e })
	<-evs
	cl.Close() // withdraws: the record is written then
	waitFor(t, "the withdrawal record", func() bool {
		recs := auditRecords(t, h)
		return len(recs) > 0 && recs[len(recs)-1].Kind == "withdrawn"
	})
	recs := auditRecords(t, h)
	if n := len(recs[len(recs)-1].Requested); n > audit.MaxRecord {
		t.Errorf("audit record holds %d bytes of the request", n)
	}
}

// TestServeAfterShutdownClosesListener: a SIGTERM right after start can
// reach Shutdown before Serve has registered its listener. Serve then
// refuses, and closes the listener, so the socket file does not outlive the
// daemon (seen once: the file left behind after a clean stop).
func TestServeAfterShutdownClosesListener(t *testing.T) {
	h := newHarness(t)
	// The harness's own listener is served first (a HELLO answered), so
	// that only the late one below meets the shutdown.
	if _, err := h.client().Hello(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "late.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Serve(ln); err == nil {
		t.Fatal("Serve after Shutdown accepted")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket file outlived Serve: %v", err)
	}
}

// waitStarted returns once Run has written the log's open checkpoint and
// start record: tests that call Handle or the log directly, without the
// socket, come after them as requests do.
func waitStarted(t testing.TB, d *Daemon) {
	t.Helper()
	if d.AuditLog() == nil {
		return
	}
	select {
	case <-d.AuditLog().Started():
	case <-time.After(15 * time.Second):
		t.Fatal("the daemon's audit log did not start within 15 s")
	}
}

// TestShutdownWhileRequestsArrive: clients that keep sending while the
// daemon shuts down, one request at a time (run by the reader itself) and
// many at once (run by handlers), race Shutdown, which waits for every
// handler before it closes their connections. A handler started after
// that wait began is one the wait does not see (the race detector caught
// the reader's WaitGroup.Add racing Shutdown's Wait in CI). Shutdown must
// return, and every connection end.
func TestShutdownWhileRequestsArrive(t *testing.T) {
	h := newHarness(t)
	hello := `{"parley":1,"id":"h","verb":"HELLO"}` + "\n"
	var wg sync.WaitGroup
	var answered atomic.Int64
	conns := make([]net.Conn, 0, 12)
	for i := range 12 {
		nc, err := net.Dial("unix", h.sock)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, nc)
		pipelined := i%2 == 1
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer nc.Close()
			br := bufio.NewReader(nc)
			burst := []byte(hello)
			if pipelined {
				var b strings.Builder
				for k := range 4 {
					fmt.Fprintf(&b, `{"parley":1,"id":"h%d","verb":"HELLO"}`+"\n", k)
				}
				burst = []byte(b.String())
			}
			nc.SetDeadline(time.Now().Add(30 * time.Second))
			for {
				if _, err := nc.Write(burst); err != nil {
					return
				}
				for range bytes.Count(burst, []byte("\n")) {
					if _, err := br.ReadBytes('\n'); err != nil {
						return
					}
					answered.Add(1)
				}
			}
		}()
	}
	waitFor(t, "requests to be answered", func() bool { return answered.Load() > 200 })
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := h.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with requests arriving: %v", err)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		for _, nc := range conns {
			nc.Close()
		}
		t.Fatal("a connection outlived Shutdown")
	}
}
