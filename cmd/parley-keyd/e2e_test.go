package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/keyd/keystore"

	"github.com/parley-keyd/parley-keyd/keyd/audit"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
)

// These tests run the real binaries as real OS users: the daemon as a user
// of its own (as parley-keyd is in a real install), agents and the human as
// users of their own, and a stranger the configuration does not name.
// Identity comes from SO_PEERCRED. The users are this test process's own
// (testpeer.Name), never a real installation's parley-keyd.

var (
	e2eDaemonUser   = testpeer.Name("keyd")
	e2eAgentUser    = testpeer.Name("agent")
	e2eHumanUser    = testpeer.Name("human")
	e2eStrangerUser = testpeer.Name("stranger")
)

var e2ePolicy = `version = 1
[[agent]]
name = "bot"
user = ["` + e2eAgentUser + `"]
rate = 100000
pending = 8

[[rule]]
name = "calendar-auto"
agents = ["bot"]
action = "auto"
svc = ["cal.example"]
can = ["calendar.*"]
max_exp = "1h"

[[rule]]
name = "ask-rest"
agents = ["bot"]
action = "ask"
max_exp = "1h"
default_exp = "15m"
channels = ["terminal"]
`

type ids struct{ uid, gid uint32 }

type e2e struct {
	t                                   *testing.T
	base, state, etc, sock, bin, agentK string
	daemon, agent, human, stranger      ids
	proc                                *exec.Cmd
	stderr                              *syncBuffer
	exited                              chan error
}

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

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// binaries builds parley-keyd and parley-grant once into a folder every
// user can read.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "parley-e2e-bin-")
		if buildErr != nil {
			return
		}
		os.Chmod(buildDir, 0o755)
		out, err := exec.Command("go", "build", "-o", buildDir+"/",
			"github.com/parley-keyd/parley-keyd/cmd/parley-keyd",
			"github.com/parley-keyd/parley-keyd/cmd/parley-grant").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

func osUser(t *testing.T, name string) ids {
	uid, gid := testpeer.EnsureUser(t, name)
	return ids{uid, gid}
}

// newE2E sets up a state folder owned by the daemon's user, initialised by
// parley-keyd init run as that user, and an agent key owned by the agent.
func newE2E(t *testing.T) *e2e {
	t.Helper()
	testpeer.RequirePeers(t)
	e := &e2e{t: t, bin: binaries(t)}
	e.daemon = osUser(t, e2eDaemonUser)
	e.agent = osUser(t, e2eAgentUser)
	e.human = osUser(t, e2eHumanUser)
	e.stranger = osUser(t, e2eStrangerUser)
	e.base = testpeer.SharedDir(t)
	run := filepath.Join(e.base, "run")
	agentDir := filepath.Join(e.base, "agent")
	for _, d := range []struct {
		path string
		who  ids
	}{{run, e.daemon}, {agentDir, e.agent}} {
		if err := os.Mkdir(d.path, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chown(d.path, int(d.who.uid), int(d.who.gid))
	}
	// As tmpfiles.d does in a real install: the folder exists, 0700, owned
	// by the daemon's user, before init runs.
	e.state = filepath.Join(e.base, "state")
	if err := os.Mkdir(e.state, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chown(e.state, int(e.daemon.uid), int(e.daemon.gid))
	e.sock = filepath.Join(run, "agent.sock")
	e.agentK = filepath.Join(agentDir, "agent.key")
	// As the README says: root runs init, which writes the configuration
	// as root and creates the key as the state folder's owner.
	e.etc = filepath.Join(e.base, "etc")
	e.as(ids{0, 0}, 0, "parley-keyd", "init", "--state", e.state, "--config-dir", e.etc, "--socket", e.sock,
		"--socket-group", "", "--agent-user", e2eAgentUser, "--approver-user", e2eHumanUser)
	// Agents and the human are in no common group here, so the socket is
	// opened to all; the daemon still checks every peer's uid.
	cfgPath := filepath.Join(e.etc, "config.toml")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	e.writeOwned(cfgPath, string(bytes.Replace(cfg, []byte(`socket_mode = "0660"`), []byte(`socket_mode = "0666"`), 1)))
	e.writeOwned(filepath.Join(e.etc, "policy.toml"), e2ePolicy)
	e.as(e.agent, 0, "parley-grant", "keygen", "--out", e.agentK)
	return e
}

// onSmallFS moves the state folder onto a new tmpfs of size and returns the
// tmpfs's mount point, unmounted when the test ends.
func (e *e2e) onSmallFS(size string) string {
	e.t.Helper()
	small := filepath.Join(e.base, "small")
	os.Mkdir(small, 0o755)
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", small).CombinedOutput(); err != nil {
		testpeer.Unavailable(e.t, fmt.Sprintf("mount tmpfs: %v: %s", err, out))
	}
	e.t.Cleanup(func() { exec.Command("umount", "-l", small).Run() })
	if out, err := exec.Command("cp", "-a", e.state, small+"/").CombinedOutput(); err != nil {
		e.t.Fatalf("cp: %v: %s", err, out)
	}
	e.state = filepath.Join(small, "state")
	return small
}

// writeOwned writes a configuration file as an admin does: owned by root,
// readable by the daemon's group.
func (e *e2e) writeOwned(path, content string) {
	if err := os.WriteFile(path, []byte(content), 0o640); err != nil {
		e.t.Fatal(err)
	}
	os.Chown(path, 0, int(e.daemon.gid))
}

type result struct {
	stdout, stderr string
	code           int
}

// as runs one of the binaries as who and checks its exit code.
func (e *e2e) as(who ids, want int, bin string, args ...string) result {
	e.t.Helper()
	r := e.try(who, bin, args...)
	if r.code != want {
		e.t.Fatalf("%s %s as uid %d: exit %d, want %d\nstdout: %s\nstderr: %s", bin, strings.Join(args, " "), who.uid, r.code, want, r.stdout, r.stderr)
	}
	return r
}

func (e *e2e) try(who ids, bin string, args ...string) result {
	cmd := testpeer.RunAs(who.uid, who.gid, nil, filepath.Join(e.bin, bin), args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "USER=x", protocol.SocketEnv + "=" + e.sock, protocol.DaemonUserEnv + "=" + e2eDaemonUser, "PARLEY_KEYD_CONFIG_DIR=" + e.etc}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	return result{out.String(), errb.String(), code}
}

// start runs the daemon as its own user, with args added to serve's, and
// waits until it accepts.
func (e *e2e) start(args ...string) {
	e.t.Helper()
	cmd := testpeer.RunAs(e.daemon.uid, e.daemon.gid, nil, filepath.Join(e.bin, "parley-keyd"), append([]string{"serve", "--state", e.state}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "PARLEY_KEYD_CONFIG_DIR=" + e.etc}
	e.stderr = &syncBuffer{}
	cmd.Stderr = e.stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.proc = cmd
	e.exited = make(chan error, 1)
	go func() { e.exited <- cmd.Wait() }()
	e.t.Cleanup(func() {
		if e.proc == cmd {
			cmd.Process.Kill()
			<-e.exited
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case err := <-e.exited:
			e.proc = nil // the clean-up has nothing left to wait for
			e.t.Fatalf("daemon exited: %v\n%s", err, e.stderr)
		default:
		}
		if c, err := net.Dial("unix", e.sock); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("daemon did not start accepting:\n%s", e.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop sends sig and waits for the daemon to exit.
func (e *e2e) stop(sig syscall.Signal) error {
	e.t.Helper()
	e.proc.Process.Signal(sig)
	select {
	case err := <-e.exited:
		e.proc = nil
		return err
	case <-time.After(15 * time.Second):
		e.t.Fatal("daemon did not exit")
	}
	return nil
}

func (e *e2e) auditRecords() []audit.Record {
	e.t.Helper()
	// audit.Read reads every segment and stops at the zeros a running
	// daemon preallocates after its last record.
	var out []audit.Record
	err := audit.Read(filepath.Join(e.state, "audit.log"), audit.Filter{}, func(_ []byte, r *audit.Record) error {
		out = append(out, *r)
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// lastOfKind returns the last audit record of kind: every request leaves a
// record, so the one a test looks for is found by its kind, not its place.
func (e *e2e) lastOfKind(kind string) audit.Record {
	e.t.Helper()
	recs := e.auditRecords()
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Kind == kind {
			return recs[i]
		}
	}
	e.t.Fatalf("no audit record of kind %s", kind)
	return audit.Record{}
}

func (e *e2e) verifyAudit() {
	e.t.Helper()
	r := e.as(e.daemon, 0, "parley-keyd", "audit", "verify", "--state", e.state)
	if !strings.HasPrefix(r.stdout, "ok: ") {
		e.t.Fatalf("audit verify: %q", r.stdout)
	}
}

func TestE2EIdentityAndRoles(t *testing.T) {
	e := newE2E(t)
	e.start()

	// An agent gets a grant by policy; the daemon saw its real uid.
	r := e.as(e.agent, 0, "parley-grant", "issue", "--key", e.agentK, "--svc", "cal.example", "--can", "calendar.*", "--exp", "30m")
	tok, err := grant.Decode(strings.TrimSpace(r.stdout))
	if err != nil {
		t.Fatalf("issue printed %q: %v", r.stdout, err)
	}
	last := e.lastOfKind("issue")
	if last.GrantID != tok.ID() || last.Caller.UID != e.agent.uid || last.Caller.User != e2eAgentUser {
		t.Errorf("audit = %+v", last)
	}
	// The executable is not asserted: a daemon without CAP_SYS_PTRACE cannot
	// read /proc/PID/exe of another user's process (keyd's peer tests, as
	// root, check it is read when it can be).
	pub := e.as(e.daemon, 0, "parley-keyd", "pubkey", "--state", e.state)
	if tok.Issuer() != strings.TrimSpace(pub.stdout) {
		t.Errorf("issuer %s, principal %s", tok.Issuer(), pub.stdout)
	}

	// A user the configuration does not name is refused before any request.
	r = e.as(e.stranger, 3, "parley-grant", "status")
	if !strings.Contains(r.stderr, "may not use parley-keyd") {
		t.Errorf("stranger stderr = %q", r.stderr)
	}
	// The agent may not act as an approver.
	r = e.as(e.agent, 4, "parley-grant", "pending")
	if !strings.Contains(r.stderr, "is an agent and may not") {
		t.Errorf("agent pending stderr = %q", r.stderr)
	}
	e.as(e.agent, 4, "parley-grant", "approve", "r_abc", "--code", "12")
	r = e.as(e.human, 0, "parley-grant", "status")
	if !strings.Contains(r.stdout, "approver") || strings.Contains(r.stdout, "weak") {
		t.Errorf("human status = %q", r.stdout)
	}
}

var codeLine = regexp.MustCompile(`waiting for approval of (r_[a-z0-9]+).*; match code: (\d\d)`)

func TestE2EApprovalByAnotherUser(t *testing.T) {
	e := newE2E(t)
	e.start()
	// Exactly the command of the brief; the key comes from PARLEY_AGENT_KEY.
	cmd := testpeer.RunAs(e.agent.uid, e.agent.gid, nil, filepath.Join(e.bin, "parley-grant"), "issue", "--can", "calendar.*", "--exp", "1h")
	cmd.Env = []string{"PATH=/usr/bin:/bin", protocol.SocketEnv + "=" + e.sock, "PARLEY_AGENT_KEY=" + e.agentK, protocol.DaemonUserEnv + "=" + e2eDaemonUser}
	var out bytes.Buffer
	errb := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = &out, errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var m []string
	deadline := time.Now().Add(15 * time.Second)
	for m == nil {
		m = codeLine.FindStringSubmatch(errb.String())
		if time.Now().After(deadline) {
			t.Fatalf("no match code on stderr: %q", errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	id, code := m[1], m[2]
	r := e.as(e.human, 0, "parley-grant", "pending")
	if !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "calendar.*") || strings.Contains(r.stdout, "match code") {
		t.Errorf("pending = %q", r.stdout)
	}
	e.as(e.human, 0, "parley-grant", "approve", id, "--code", code)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("issue: %v\n%s", err, errb.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("issue did not return")
	}
	tok, err := grant.Decode(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatalf("token %q: %v", out.String(), err)
	}
	if exp, _ := tok.Expiry(); exp > time.Now().Unix()+3600 || exp < time.Now().Unix()+3500 {
		t.Errorf("expiry %d, want an hour from now", exp)
	}
	last := e.lastOfKind("issue")
	// The human is not an agent user: the approval is strong, and names them.
	if last.DecidedBy == nil || last.DecidedBy.Strength != "strong" || !strings.Contains(last.DecidedBy.Approver, e2eHumanUser) {
		t.Errorf("audit = %+v", last.DecidedBy)
	}
}

func TestE2EKeyPermissionsRefused(t *testing.T) {
	e := newE2E(t)
	key := filepath.Join(e.state, keystore.KeyFileName)
	cases := []struct {
		name   string
		break_ func()
		fix    func()
		want   string
	}{
		{"fail/key-readable-by-others", func() { os.Chmod(key, 0o644) }, func() { os.Chmod(key, 0o600) }, "chmod"},
		{"fail/key-owned-by-root", func() { os.Chown(key, 0, 0) }, func() { os.Chown(key, int(e.daemon.uid), int(e.daemon.gid)) }, "chown"},
		{"fail/state-open-to-group", func() { os.Chmod(e.state, 0o750) }, func() { os.Chmod(e.state, 0o700) }, "chmod"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.break_()
			defer tc.fix()
			r := e.try(e.daemon, "parley-keyd", "serve", "--state", e.state)
			if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("serve: exit %d, stderr %q; want a refusal naming %q", r.code, r.stderr, tc.want)
			}
		})
	}
	// Repaired, it starts.
	e.start()
}

func TestE2ENotDumpable(t *testing.T) {
	e := newE2E(t)
	e.start()
	pid := e.proc.Process.Pid
	// Even the daemon's own user cannot read its memory or environment.
	for _, f := range []string{"environ", "mem"} {
		cmd := testpeer.RunAs(e.daemon.uid, e.daemon.gid, nil, "/bin/cat", fmt.Sprintf("/proc/%d/%s", pid, f))
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "Permission denied") {
			t.Errorf("reading /proc/%d/%s as the daemon's user: err %v, %q", pid, f, err, out)
		}
	}
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`Max core file size\s+0\s+0`).Match(limits) {
		t.Errorf("core limit not 0:\n%s", limits)
	}
}

func TestE2EAuditDiskFull(t *testing.T) {
	e := newE2E(t)
	small := e.onSmallFS("512k")
	e.start()
	issue := func() result {
		return e.try(e.agent, "parley-grant", "issue", "--key", e.agentK, "--svc", "cal.example", "--can", "calendar.*", "--exp", "30m")
	}
	if r := issue(); r.code != 0 {
		t.Fatalf("issue before filling: %+v", r)
	}
	// Fill the filesystem to the last byte.
	filler := filepath.Join(small, "filler")
	exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=4k").Run()
	// The log's reserve still takes records: up to 96 KiB written ahead
	// (docs/audit.md), some 150 records of a grant. Once that is used up,
	// every issue must be refused without a token.
	var r result
	for i := 0; i < 400; i++ {
		if r = issue(); r.code != 0 {
			break
		}
	}
	if r.code == 0 || !strings.Contains(r.stderr, "audit log cannot be written") || r.stdout != "" {
		t.Fatalf("issue on a full disk: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// The daemon is still up and answering.
	e.as(e.agent, 0, "parley-grant", "status")
	os.Remove(filler)
	if r := issue(); r.code != 0 {
		t.Fatalf("issue after space returned: %+v", r)
	}
	e.verifyAudit()
}

func TestE2EReloadAndTerm(t *testing.T) {
	e := newE2E(t)
	e.start()
	// explain exits as issue would: 0 where a rule issues, 4 where one refuses.
	explain := func() string {
		r := e.try(e.agent, "parley-grant", "explain", "--key", e.agentK, "--svc", "cal.example", "--can", "calendar.find")
		if want := map[bool]int{true: 4, false: 0}[strings.HasPrefix(r.stdout, "refused")]; r.code != want {
			t.Fatalf("explain: exit %d, want %d\n%s%s", r.code, want, r.stdout, r.stderr)
		}
		return r.stdout
	}
	if out := explain(); !strings.Contains(out, `rule "calendar-auto" would issue at once`) {
		t.Fatalf("explain = %q", out)
	}
	waitReload := func(n int) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			c := 0
			for _, r := range e.auditRecords() {
				if r.Kind == "policy-reload" {
					c++
				}
			}
			if c >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("no policy-reload record")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// An invalid policy changes nothing.
	e.writeOwned(filepath.Join(e.etc, "policy.toml"), "version = 1\n[[rule]]\nbogus = 1\n")
	e.proc.Process.Signal(syscall.SIGHUP)
	waitReload(1)
	if out := explain(); !strings.Contains(out, "calendar-auto") {
		t.Errorf("after a bad reload: %q", out)
	}
	if last := e.lastOfKind("policy-reload"); last.Decision != "refused" {
		t.Errorf("reload record = %+v", last)
	}
	// A valid one is used for the next request.
	e.writeOwned(filepath.Join(e.etc, "policy.toml"), strings.Replace(e2ePolicy,
		"action = \"auto\"\nsvc = [\"cal.example\"]\ncan = [\"calendar.*\"]\nmax_exp = \"1h\"",
		"action = \"deny\"\nsvc = [\"cal.example\"]", 1))
	e.proc.Process.Signal(syscall.SIGHUP)
	waitReload(2)
	if last := e.lastOfKind("policy-reload"); last.Decision != "loaded" {
		t.Fatalf("reload record = %+v", last)
	}
	if out := explain(); !strings.Contains(out, `refused by rule "calendar-auto"`) {
		t.Errorf("after a good reload: %q\n%+v\n%s", out, e.auditRecords(), e.stderr)
	}

	// SIGTERM answers a waiting request before the daemon exits.
	cmd := testpeer.RunAs(e.agent.uid, e.agent.gid, nil, filepath.Join(e.bin, "parley-grant"), "issue", "--key", e.agentK, "--svc", "mail.example", "--can", "mail.read")
	cmd.Env = []string{"PATH=/usr/bin:/bin", protocol.SocketEnv + "=" + e.sock, protocol.DaemonUserEnv + "=" + e2eDaemonUser}
	errb := &syncBuffer{}
	cmd.Stderr = errb
	cmd.Start()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(errb.String(), "match code") {
		if time.Now().After(deadline) {
			t.Fatalf("no waiting request: %q", errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Errorf("daemon exit: %v", err)
	}
	err := cmd.Wait()
	if err == nil || !strings.Contains(errb.String(), "shutting down") {
		t.Errorf("waiting agent: err %v, stderr %q", err, errb.String())
	}
}

func TestE2EStaleSocket(t *testing.T) {
	e := newE2E(t)
	e.start()
	// A second daemon on the same state folder refuses: the audit log is held.
	r := e.try(e.daemon, "parley-keyd", "serve", "--state", e.state)
	if r.code == 0 || !strings.Contains(r.stderr, "another parley-keyd already runs on") {
		t.Fatalf("second daemon, same state: exit %d, %q", r.code, r.stderr)
	}
	// A second daemon with its own state but the same socket refuses too: a
	// live daemon answers there.
	state2 := filepath.Join(e.base, "state2")
	os.Mkdir(state2, 0o700)
	os.Chown(state2, int(e.daemon.uid), int(e.daemon.gid))
	e.as(e.daemon, 0, "parley-keyd", "init", "--state", state2, "--config-dir", state2, "--socket", e.sock, "--agent-user", e2eAgentUser)
	r = e.try(e.daemon, "parley-keyd", "serve", "--state", state2, "--config", filepath.Join(state2, "config.toml"))
	if r.code == 0 || !strings.Contains(r.stderr, "another daemon is already answering") {
		t.Fatalf("second daemon, same socket: exit %d, %q", r.code, r.stderr)
	}
	// A daemon killed outright leaves its socket file behind; the next start
	// finds nothing answering there and replaces it.
	e.proc.Process.Signal(syscall.SIGKILL)
	<-e.exited
	e.proc = nil
	if _, err := os.Lstat(e.sock); err != nil {
		t.Fatalf("expected a stale socket file: %v", err)
	}
	e.start()
	e.as(e.agent, 0, "parley-grant", "status")
	// A file that is not a socket is never removed.
	e.stop(syscall.SIGTERM)
	os.Remove(e.sock)
	os.WriteFile(e.sock, []byte("precious"), 0o644)
	r = e.try(e.daemon, "parley-keyd", "serve", "--state", e.state)
	if r.code == 0 || !strings.Contains(r.stderr, "is not a socket") {
		t.Fatalf("serve over a regular file: exit %d, %q", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(e.sock); string(b) != "precious" {
		t.Error("the regular file was replaced")
	}
}

// TestE2ESocketActivation runs the daemon as the README installs it where
// systemd is not PID 1: systemd-socket-activate binds the socket as root and
// passes it to the daemon, which runs as its own user via setpriv, with a
// notify socket and a watchdog as Type=notify and WatchdogSec= give it.
func TestE2ESocketActivation(t *testing.T) {
	e := newE2E(t)
	act, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		testpeer.Unavailable(t, "needs systemd-socket-activate (Debian package systemd)")
	}
	notifyPath := filepath.Join(e.base, "run", "notify.sock")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	os.Chmod(notifyPath, 0o666) // the daemon's user sends to it
	actSock := filepath.Join(e.base, "run", "activated.sock")
	cmd := exec.Command(act, "-l", actSock, "-E", "NOTIFY_SOCKET="+notifyPath, "-E", "WATCHDOG_USEC=200000", "--",
		"/usr/bin/setpriv", fmt.Sprintf("--reuid=%d", e.daemon.uid), fmt.Sprintf("--regid=%d", e.daemon.gid), "--clear-groups",
		filepath.Join(e.bin, "parley-keyd"), "serve", "--state", e.state, "--config", filepath.Join(e.etc, "config.toml"))
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	errb := &syncBuffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := os.Stat(actSock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no activated socket: %s", errb)
		}
		time.Sleep(10 * time.Millisecond)
	}
	os.Chmod(actSock, 0o666)
	// The first connection starts the daemon (Accept=no).
	r := e.try(e.agent, "parley-grant", "--socket", actSock, "status")
	if r.code != 0 || !strings.Contains(r.stdout, "principal: ed25519:") {
		t.Fatalf("status over the activated socket: %+v\n%s", r, errb)
	}
	next := func(prefix string) string {
		t.Helper()
		buf := make([]byte, 4096)
		notify.SetReadDeadline(time.Now().Add(15 * time.Second))
		for {
			n, err := notify.Read(buf)
			if err != nil {
				t.Fatalf("no %s from the daemon: %v\n%s", prefix, err, errb)
			}
			if msg := string(buf[:n]); strings.HasPrefix(msg, prefix) {
				return msg
			}
		}
	}
	if ready := next("READY=1"); !strings.Contains(ready, "STATUS=serving on "+actSock) {
		t.Errorf("READY message %q", ready)
	}
	next("WATCHDOG=1")
	// The daemon used the socket it was given, not the configured one.
	if !strings.Contains(errb.String(), "listening on "+actSock) {
		t.Errorf("daemon log: %s", errb)
	}
	if _, err := os.Stat(e.sock); err == nil {
		t.Error("the daemon also created the configured socket")
	}
	// systemd-socket-activate and setpriv exec the daemon: same process.
	cmd.Process.Signal(syscall.SIGTERM)
	next("STOPPING=1")
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("daemon exit: %v\n%s", waitErr, errb)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the daemon did not stop")
	}
}

// TestE2EConfigUnreadable: a configuration the daemon's user cannot read is
// told apart from a missing one, and following the hint fixes it.
func TestE2EConfigUnreadable(t *testing.T) {
	e := newE2E(t)
	cfg := filepath.Join(e.etc, "config.toml")
	os.Chown(cfg, 0, 0)
	os.Chmod(cfg, 0o600)
	r := e.try(e.daemon, "parley-keyd", "serve", "--state", e.state)
	u := e2eDaemonUser
	want := fmt.Sprintf("parley-keyd: cannot read the configuration file %s: permission denied\nhint: it must be readable by user %s, the daemon's user: sudo chown root:%s %s && sudo chmod 0640 %s\n", cfg, u, u, cfg, cfg)
	if r.code != exitFail || !strings.HasSuffix(r.stderr, want) {
		t.Fatalf("serve with an unreadable configuration: exit %d\n%s\nwant it to end with\n%s", r.code, r.stderr, want)
	}
	// Run by another user (an agent), the hint gives it nothing.
	r = e.try(e.agent, "parley-keyd", "status", "--state", e.state)
	if !strings.Contains(r.stdout, "hint: run this as root or as the daemon's user (the owner of "+e.state+")") || strings.Contains(r.stdout, "chgrp") || strings.Contains(r.stdout, "chown") {
		t.Errorf("status as the agent:\n%s", r.stdout)
	}
	// Following the hint.
	if out, err := exec.Command("chown", "root:"+e2eDaemonUser, cfg).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	os.Chmod(cfg, 0o640)
	e.start()
}

// TestE2EStatusOfAnInstall runs status as the admin does, as root, against
// a daemon set up as the README says: the daemon's own user owns the state,
// root the configuration.
func TestE2EStatusOfAnInstall(t *testing.T) {
	e := newE2E(t)
	e.start()
	r := e.as(ids{0, 0}, 0, "parley-keyd", "status", "--skip", "units", "--state", e.state)
	for _, want := range []string{
		"ok    config  " + filepath.Join(e.etc, "config.toml") + ": 1 agent user, 0 agent groups, 1 approver user, 0 approver groups\n",
		"ok    state   " + e.state + ": mode 0700, the daemon's user is " + e2eDaemonUser + "\n",
		"ok    key     principal ed25519:",
		// The e2e socket keeps the daemon's group (the users here share
		// none), which status flags.
		"warn  socket  " + e.sock + " belongs to the daemon's own group " + e2eDaemonUser + ": agents added to it to connect could read the configuration\n",
		// root has no role at the daemon: it answers, and that is all.
		"ok    socket  " + e.sock + " (group " + e2eDaemonUser + ", mode 0666): a daemon answers (root may not ask it more)\n",
		"ok    audit   2 records, head ", // the log's first checkpoint and the start
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, r.stdout)
		}
	}
	// As the daemon's own user too.
	e.as(e.daemon, 0, "parley-keyd", "status", "--skip", "units", "--state", e.state)
}

// TestE2EStatusAfterRotation: root, to whom the daemon says nothing, is
// still told that the running daemon signs with a key rotated out, from
// what the daemon reported at its start.
func TestE2EStatusAfterRotation(t *testing.T) {
	e := newE2E(t)
	e.start()
	old := strings.TrimSpace(e.as(ids{0, 0}, 0, "parley-keyd", "pubkey", "--state", e.state).stdout)
	e.as(ids{0, 0}, 0, "parley-keyd", "key", "rotate", "--overlap", "2h", "--state", e.state)
	// As root, the rotation acted as the state folder's owner.
	fi, err := os.Stat(filepath.Join(e.state, keystore.KeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	if uid, _ := ownerOf(fi); uid != e.daemon.uid {
		t.Errorf("the rotated key belongs to uid %d, not to the daemon's user", uid)
	}
	r := e.as(ids{0, 0}, 1, "parley-keyd", "status", "--skip", "units", "--state", e.state)
	if !strings.Contains(r.stdout, "fail  socket  the daemon on "+e.sock+" reported at its start that it signs as "+old) {
		t.Errorf("status after a rotation without a restart:\n%s", r.stdout)
	}
	e.stop(syscall.SIGTERM)
	e.start()
	e.as(ids{0, 0}, 0, "parley-keyd", "status", "--skip", "units", "--state", e.state)
}
