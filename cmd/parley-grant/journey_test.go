package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testdaemon"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testservice"
	"github.com/parley-keyd/parley-keyd/keyd"
	"golang.org/x/sys/unix"
)

// This file holds the end-to-end journey of issue 6: an agent gets a grant
// from a real daemon, uses it at a real Parley service over the HTTP bridge,
// is refused with consent_required, gets the human's consent through
// parley-grant consent and a terminal approval, commits, and passes a
// narrowed grant to a sub-agent. The daemon runs in process (keyd.Server on a
// temporary socket, identities from SO_PEERCRED); every command is the real
// parley-grant binary, which TestMain puts on PATH.

// journeyPolicy gives every caller shop grants at once, capped at 20.00 USD
// per COMMIT, and asks the human in the terminal for every consent.
const journeyPolicy = `version = 1
[[agent]]
name = "shopper"
any = true
rate = 100000
pending = 8

[[rule]]
name = "shop-auto"
agents = ["shopper"]
action = "auto"
svc = ["shop.example", "other.example"]
can = ["shop.*"]
max_exp = "1h"
per = "20.00USD"

[[rule]]
name = "never-bank"
agents = ["shopper"]
action = "deny"
can = ["bank.*"]

[[rule]]
name = "ask-mail"
agents = ["shopper"]
action = "ask"
can = ["mail.*"]
max_exp = "1h"
channels = ["terminal"]

[[consent]]
name = "shop-consent"
agents = ["*"]
svc = ["shop.example", "other.example"]
channels = ["terminal"]
max_exp = "15m"
`

// testDaemon is a real parley-keyd server on a temporary socket, with the
// current OS user as agent and approver (a dual-role user, so approvals are
// weak, as in the quickstart).
type testDaemon struct {
	t    *testing.T
	dir  string
	sock string
	srv  *keyd.Daemon
	seen *seenRequests
}

// seenRequests records every request a human channel was shown.
type seenRequests struct {
	mu    sync.Mutex
	views []protocol.PendingView
}

func (s *seenRequests) Pending(v protocol.PendingView) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.views = append(s.views, v)
}

func (s *seenRequests) Ended(string, string, string) {}

func (s *seenRequests) list() []protocol.PendingView {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.views)
}

// startDaemon serves policy on a new socket until the test ends. edit may
// change the configuration first, the socket path among it.
func startDaemon(t *testing.T, policy string, edit func(*keyd.Config)) *testDaemon {
	t.Helper()
	dir := t.TempDir()
	d := &testDaemon{t: t, dir: dir, sock: filepath.Join(dir, "agent.sock"), seen: &seenRequests{}}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := keyd.ParseConfig([]byte(keyd.DefaultConfig(d.sock, u.Username, u.Username)), filepath.Join(dir, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(cfg)
		d.sock = cfg.Socket
	}
	d.srv = testdaemon.Start(t, cfg, policy, dir)
	d.srv.Subscribe(d.seen)
	return d
}

func newTestKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// writeAgentKey writes a new agent key file into dir.
func writeAgentKey(t *testing.T, dir string) (string, ed25519.PrivateKey) {
	t.Helper()
	key := newTestKey(t)
	path := filepath.Join(dir, "agent.key")
	if err := writeAgentKeyFile(path, key); err != nil {
		t.Fatal(err)
	}
	return path, key
}

func pubOf(k ed25519.PrivateKey) string { return grant.FormatPublicKey(k.Public().(ed25519.PublicKey)) }

// cliEnv is the environment the binary runs in: no key path or socket from
// the developer's own environment, a HOME of its own.
func cliEnv(t *testing.T, sock, keyPath string) []string {
	home := t.TempDir()
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "USER=tester",
		protocol.SocketEnv + "=" + sock, agentKeyEnv + "=" + keyPath}
}

type cliResult struct {
	stdout, stderr string
	code           int
}

// cliBinary returns the real parley-grant: TestMain copies the test binary
// onto PATH under that name, and it runs main's run() there.
func cliBinary(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("parley-grant")
	if err != nil {
		t.Fatalf("parley-grant is not on PATH (TestMain puts it there): %v", err)
	}
	return p
}

// cli runs parley-grant with env and args and checks its exit code.
func cli(t *testing.T, env []string, want int, args ...string) cliResult {
	t.Helper()
	cmd := exec.Command(cliBinary(t), args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := cliResult{out.String(), errb.String(), 0}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	if r.code != want {
		t.Fatalf("parley-grant %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, want, r.stdout, r.stderr)
	}
	return r
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitUntil polls cond until it holds or 20 s pass.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// background is a parley-grant run that waits for a human.
type background struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr lockedBuffer
	done   chan error
}

func startCLI(t *testing.T, env []string, args ...string) *background {
	t.Helper()
	b := &background{done: make(chan error, 1)}
	b.cmd = exec.Command(cliBinary(t), args...)
	b.cmd.Env = env
	b.cmd.Stdout, b.cmd.Stderr = &b.stdout, &b.stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.done <- b.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-b.done:
		default:
			b.cmd.Process.Kill()
			<-b.done
		}
	})
	return b
}

var waitingLine = regexp.MustCompile(`waiting for approval of (r_[a-z0-9]+).*; match code: (\d\d)`)

// matchCode waits for the request id and match code on b's stderr.
func (b *background) matchCode(t *testing.T) (id, code string) {
	t.Helper()
	var m []string
	waitUntil(t, "the match code on stderr", func() bool {
		m = waitingLine.FindStringSubmatch(b.stderr.String())
		return m != nil
	})
	return m[1], m[2]
}

// wait waits for b to exit and returns its exit code.
func (b *background) wait(t *testing.T) int {
	t.Helper()
	select {
	case err := <-b.done:
		b.done <- err
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(30 * time.Second):
		t.Fatalf("parley-grant %v did not exit; stderr: %s", b.cmd.Args[1:], b.stderr.String())
	}
	return -1
}

// openPTY returns the two ends of a new pseudo-terminal.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		testpeer.Unavailable(t, fmt.Sprintf("needs a pseudo-terminal for the human's approval: %v", err))
	}
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pts: %v", err)
	}
	return m, s
}

// approveInTerminal runs parley-grant approve ID on a real terminal, as the
// human would: it waits for the prompt, checks what the human was shown
// before it, and types the code. It returns everything the terminal showed.
func approveInTerminal(t *testing.T, env []string, id, code string, mustShow ...string) string {
	t.Helper()
	master, slave := openPTY(t)
	defer master.Close()
	cmd := exec.Command(cliBinary(t), "approve", id)
	cmd.Env = append(env, "TERM=dumb")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var screen lockedBuffer
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			screen.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	const prompt = "Match code shown where the agent asked: "
	waitUntil(t, "the approval prompt", func() bool { return strings.Contains(screen.String(), prompt) })
	shown, _, _ := strings.Cut(screen.String(), prompt)
	for _, s := range mustShow {
		if !strings.Contains(shown, s) {
			t.Errorf("the human was not shown %q before the prompt:\n%s", s, shown)
		}
	}
	if _, err := master.Write([]byte(code + "\n")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("approve: %v\n%s", err, screen.String())
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("approve did not exit:\n%s", screen.String())
	}
	waitUntil(t, "approve's last words", func() bool { return strings.Contains(screen.String(), "approved "+id) })
	return screen.String()
}

// shop is a test Parley service on an HTTP bridge.
func shop(t *testing.T, id, principal string) *httptest.Server {
	srv := httptest.NewServer(testservice.New(testservice.Config{ID: id, Principals: []string{principal}}))
	t.Cleanup(srv.Close)
	return srv
}

func order(item string, cents int64) map[string]any {
	return map[string]any{"item": item, "price": cents, "currency": "USD"}
}

// want checks that a reply has kind and returns it.
func want(t *testing.T, kind string) func(*testservice.Reply, error) *testservice.Reply {
	return func(r *testservice.Reply, err error) *testservice.Reply {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if r.Kind != kind {
			t.Fatalf("got %s, want %s", r.Raw, kind)
		}
		return r
	}
}

// wantRefused checks that a reply is ERROR code, blocked among others by a
// caveat named need (when need is not empty).
func wantRefused(t *testing.T, code, need string) func(*testservice.Reply, error) *testservice.Reply {
	return func(r *testservice.Reply, err error) *testservice.Reply {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if r.Kind != "ERROR" || r.Code != code {
			t.Fatalf("got %s, want ERROR %s", r.Raw, code)
		}
		if need != "" && !slices.ContainsFunc(r.Need, func(c grant.Caveat) bool { return c.Name == need }) {
			t.Fatalf("need %v, want %q among them: %s", r.Need, need, r.Raw)
		}
		return r
	}
}

func proposalOf(t *testing.T, r *testservice.Reply) *grant.Proposal {
	t.Helper()
	p, err := r.Proposal()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestJourneyConsentRoundTrip(t *testing.T) {
	d := startDaemon(t, journeyPolicy, nil)
	principal := d.srv.Principal()
	shopSrv := shop(t, "shop.example", principal)
	otherSrv := shop(t, "other.example", principal)
	keyPath, key := writeAgentKey(t, t.TempDir())
	env := cliEnv(t, d.sock, keyPath)
	at := func(srv *httptest.Server, id string, k ed25519.PrivateKey) *testservice.Agent {
		return &testservice.Agent{URL: srv.URL, Service: id, Key: k}
	}
	agent := at(shopSrv, "shop.example", key)

	// The agent gets a grant capped at 20.00 USD per COMMIT, by policy.
	r := cli(t, env, 0, "issue", "--svc", "shop.example,other.example", "--can", "shop.*", "--per", "20.00USD", "--exp", "30m")
	if !strings.Contains(r.stderr, `by policy rule "shop-auto"`) {
		t.Errorf("issue stderr: %s", r.stderr)
	}
	g := strings.TrimSpace(r.stdout)

	// Within the cap it commits without anyone being asked.
	cheap := proposalOf(t, want(t, "PROPOSALS")(agent.Intent("shop.order", order("pen", 1000), g)))
	want(t, "RECEIPT")(agent.Commit(cheap.ID, cheap.Hash, g))

	// 45.00 USD is beyond it: COMMIT answers consent_required.
	proposals := want(t, "PROPOSALS")(agent.Intent("shop.order", order("book", 4500), g))
	p := proposalOf(t, proposals)
	refusal := wantRefused(t, "consent_required", "")(agent.Commit(p.ID, p.Hash, g))
	if refusal.Consent == nil || refusal.Consent.Hash != p.Hash || refusal.Consent.Principal != principal {
		t.Fatalf("consent object: %s", refusal.Raw)
	}
	dir := t.TempDir()
	consentFile, proposalsFile := filepath.Join(dir, "consent.json"), filepath.Join(dir, "proposals.json")
	os.WriteFile(consentFile, refusal.Raw, 0o600)
	os.WriteFile(proposalsFile, proposals.Raw, 0o600)

	// A proposal altered after the service hashed it is refused by the
	// daemon, and no human channel ever sees it.
	altered := bytes.Replace(proposals.Raw, []byte(`"amount":4500`), []byte(`"amount":450`), 1)
	if bytes.Equal(altered, proposals.Raw) {
		t.Fatalf("cannot alter %s", proposals.Raw)
	}
	alteredFile := filepath.Join(dir, "altered.json")
	os.WriteFile(alteredFile, altered, 0o600)
	r = cli(t, env, exitFail, "consent", "--service", "shop.example", "--consent", consentFile, "--proposal", alteredFile)
	if !strings.Contains(r.stderr, "does not match") || r.stdout != "" {
		t.Errorf("altered proposal: stdout %q, stderr %q", r.stdout, r.stderr)
	}
	if seen := d.seen.list(); len(seen) != 0 {
		t.Fatalf("an altered proposal reached a human channel: %+v", seen)
	}

	// The real one: the agent asks, the human sees the daemon's rendering
	// in the terminal and types the match code the agent shows.
	bg := startCLI(t, env, "consent", "--service", "shop.example", "--consent", consentFile, "--proposal", proposalsFile)
	id, code := bg.matchCode(t)
	approveInTerminal(t, env, id, code, id, "$ charge card/visa-4242 — 45.00 USD", "cost: 45.00 USD · risk: low · undo: 1h",
		"capability shop.order, hash "+p.Hash)
	if got := bg.wait(t); got != 0 {
		t.Fatalf("consent exit %d: %s", got, bg.stderr.String())
	}
	seen := d.seen.list()
	if len(seen) != 1 || seen[0].ID != id || seen[0].Kind != "consent" {
		t.Fatalf("human channels saw %+v, want only consent %s", seen, id)
	}
	c := strings.TrimSpace(bg.stdout.String())
	ct, err := grant.Decode(c)
	if err != nil {
		t.Fatalf("consent grant %q: %v", c, err)
	}
	var names []string
	for _, cv := range ct.Blocks[0].Caveats {
		names = append(names, cv.Name)
	}
	if strings.Join(names, ",") != "svc,verbs,can,only,exp" || ct.Holder() != pubOf(key) || ct.Issuer() != principal {
		t.Errorf("consent grant: caveats %v, holder %s, issuer %s", names, ct.Holder(), ct.Issuer())
	}

	// COMMIT with the consent grant returns a RECEIPT.
	receipt := want(t, "RECEIPT")(agent.Commit(p.ID, p.Hash, c))

	// The same consent grant authorizes nothing else.
	t.Run("fail/consent-for-undo", func(t *testing.T) {
		wantRefused(t, "forbidden", "verbs")(agent.Undo(receipt.ReceiptID(), c))
	})
	t.Run("fail/consent-for-another-capability", func(t *testing.T) {
		gift := proposalOf(t, want(t, "PROPOSALS")(agent.Intent("shop.gift", order("card", 4500), g)))
		wantRefused(t, "forbidden", "can")(agent.Commit(gift.ID, gift.Hash, c))
	})
	t.Run("fail/consent-at-another-service", func(t *testing.T) {
		other := at(otherSrv, "other.example", key)
		op := proposalOf(t, want(t, "PROPOSALS")(other.Intent("shop.order", order("book", 4500), g)))
		wantRefused(t, "forbidden", "svc")(other.Commit(op.ID, op.Hash, c))
	})
	t.Run("fail/consent-for-another-proposal", func(t *testing.T) {
		again := proposalOf(t, want(t, "PROPOSALS")(agent.Intent("shop.order", order("book", 4500), g)))
		wantRefused(t, "forbidden", "only")(agent.Commit(again.ID, again.Hash, c))
	})
	// The agent's own grant can undo it: the refusal above was the consent
	// grant's scope, not the service.
	want(t, "RECEIPT")(agent.Undo(receipt.ReceiptID(), g))

	// A sub-agent with a narrowed grant can ASK, but not COMMIT.
	t.Run("ok/sub-agent-asks-not-commits", func(t *testing.T) {
		subKey := newTestKey(t)
		r := cli(t, env, 0, "attenuate", g, "--to", pubOf(subKey), "--verbs", "ASK,INTENT", "--exp", "10m")
		sg := strings.TrimSpace(r.stdout)
		sub := at(shopSrv, "shop.example", subKey)
		want(t, "ANSWER")(sub.Ask("shop.status", sg))
		sp := proposalOf(t, want(t, "PROPOSALS")(sub.Intent("shop.order", order("pen", 500), sg)))
		wantRefused(t, "forbidden", "verbs")(sub.Commit(sp.ID, sp.Hash, sg))
		// The parent's grant on its own is no use to the sub-agent: it
		// does not hold it.
		wantRefused(t, "unauthorized", "")(sub.Commit(sp.ID, sp.Hash, g))
	})
}
