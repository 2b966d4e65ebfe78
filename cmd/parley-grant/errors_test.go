package main

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/internal/testpeer"
	"github.com/parley-keyd/parley-keyd/keyd"
)

// These tests pin every error a newcomer meets in the first ten minutes:
// each says what happened and names the one command that fixes it, and
// where that command can run here, running it does fix it. They run the
// real binary against a real daemon.

// wantLines checks that stderr holds exactly the message line and the hint
// line given as regular expressions (anchored), with nothing after them.
func wantLines(t *testing.T, stderr string, message, hint string) {
	t.Helper()
	re := regexp.MustCompile(`(?m)^parley-grant: ` + message + `\nhint: ` + hint + `\n\z`)
	if !re.MatchString(stderr) {
		t.Errorf("stderr:\n%s\nwant it to end with\nparley-grant: %s\nhint: %s", stderr, message, hint)
	}
}

func TestErrorDaemonNotRunning(t *testing.T) {
	keyPath, _ := writeAgentKey(t, t.TempDir())
	missing := filepath.Join(t.TempDir(), "agent.sock")

	// A socket file left behind by a daemon that died: connecting is
	// refused, which means the same to the user.
	stale := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()

	const hint = `start it with: sudo systemctl start parley-keyd\.socket \(without systemd: parley-keyd serve\); or point --socket or PARLEY_KEYD_SOCKET at it`
	for _, sc := range []struct{ name, sock string }{{"fail/no-socket", missing}, {"fail/stale-socket", stale}} {
		sock := sc.sock
		for _, args := range [][]string{{"status"}, {"issue", "--can", "calendar.find"}, {"pending"}} {
			t.Run(sc.name+"/"+args[0], func(t *testing.T) {
				r := cli(t, cliEnv(t, sock, keyPath), exitNoDaemon, args...)
				wantLines(t, r.stderr, `parley-keyd is not running \(no daemon at `+regexp.QuoteMeta(sock)+`\)`, hint)
				if r.stdout != "" {
					t.Errorf("stdout %q", r.stdout)
				}
			})
		}
	}
	// Following the hint: once a daemon serves that socket, the same
	// command works.
	startDaemon(t, journeyPolicy, func(c *keyd.Config) { c.Socket = missing })
	cli(t, cliEnv(t, missing, keyPath), 0, "status")
}

func TestErrorNoAgentKey(t *testing.T) {
	d := startDaemon(t, journeyPolicy, nil)
	env := cliEnv(t, d.sock, "")
	home := strings.TrimPrefix(env[1], "HOME=")
	keyPath := filepath.Join(home, ".config", "parley", "agent.key")
	for _, args := range [][]string{
		{"issue", "--svc", "shop.example", "--can", "shop.order"},
		{"explain", "--can", "shop.order"},
		{"consent", "--service", "shop.example", "--consent", "c.json", "--proposal", "p.json"},
		{"proof", "--aud", "shop.example", "--verb", "ASK", "--target", "shop.status"},
	} {
		t.Run(args[0], func(t *testing.T) {
			r := cli(t, env, exitFail, args...)
			wantLines(t, r.stderr, `no agent key at `+regexp.QuoteMeta(keyPath), `create one with: parley-grant keygen`)
		})
	}
	// Following the hint fixes it.
	cli(t, env, 0, "keygen")
	r := cli(t, env, 0, "issue", "--svc", "shop.example", "--can", "shop.order")
	if !strings.HasPrefix(r.stdout, "pg1.") {
		t.Errorf("issue after keygen printed %q", r.stdout)
	}
}

func TestErrorRefusedByPolicy(t *testing.T) {
	d := startDaemon(t, journeyPolicy, nil)
	keyPath, _ := writeAgentKey(t, t.TempDir())
	env := cliEnv(t, d.sock, keyPath)
	r := cli(t, env, exitForbidden, "issue", "--can", "bank.transfer")
	wantLines(t, r.stderr,
		`refused by policy: rule "never-bank" refuses requests of agent "shopper" that reach into capabilities "bank\.\*"; ask for less`,
		`see what the policy would allow with: parley-grant explain \(same flags\)`)
	if r.stdout != "" {
		t.Errorf("stdout %q", r.stdout)
	}
	// Following the hint names the rule and what to do.
	r = cli(t, env, 0, "explain", "--can", "bank.transfer")
	if !strings.HasPrefix(r.stdout, `refused by rule "never-bank": `) || !strings.Contains(r.stderr, "hint: ask for less") {
		t.Errorf("explain: stdout %q, stderr %q", r.stdout, r.stderr)
	}
}

func TestErrorApprovalTimedOut(t *testing.T) {
	d := startDaemon(t, journeyPolicy, func(c *keyd.Config) { c.ApprovalTimeout.Duration = 300 * time.Millisecond })
	keyPath, _ := writeAgentKey(t, t.TempDir())
	r := cli(t, cliEnv(t, d.sock, keyPath), exitTimeout, "issue", "--can", "mail.read")
	// First the request and its code, so the human could have acted ...
	if !waitingLine.MatchString(r.stderr) {
		t.Errorf("no match code before the timeout:\n%s", r.stderr)
	}
	// ... then what happened, and how to do better.
	wantLines(t, r.stderr, `approval timed out: nobody approved the request within 300ms`,
		`ask again, and have the human run: parley-grant pending, then parley-grant approve ID`)
	if r.stdout != "" {
		t.Errorf("stdout %q", r.stdout)
	}
}

// TestErrorSocketPermission connects as a real second OS user to a socket
// that user may not open.
func TestErrorSocketPermission(t *testing.T) {
	testpeer.RequirePeers(t)
	agent, human := testpeer.Name("agent"), testpeer.Name("human")
	agentUID, agentGID := testpeer.EnsureUser(t, agent)
	_, humanGID := testpeer.EnsureUser(t, human)
	shared := testpeer.SharedDir(t)
	sock := filepath.Join(shared, "agent.sock")
	startDaemon(t, journeyPolicy, func(c *keyd.Config) { c.Socket = sock })

	// The agent user runs a copy of the binary it can read.
	bin := filepath.Join(shared, "parley-grant")
	copyExecutable(t, cliBinary(t), bin)

	a, h := regexp.QuoteMeta(agent), regexp.QuoteMeta(human)
	cases := []struct {
		name string
		gid  int
		mode os.FileMode
		hint string
	}{
		{"fail/owner-only-root-group", 0, 0o600,
			`the socket's group is root: an admin gives it the group parley-agents \(SocketGroup= in parley-keyd\.socket\) and runs: sudo usermod -aG parley-agents ` + a + `, then you log in again`},
		{"fail/not-in-group", int(humanGID), 0o660,
			`ask an admin to run: sudo usermod -aG ` + h + ` ` + a + `, then log in again \(or run: newgrp ` + h + `\)`},
		{"fail/group-may-not-write", int(humanGID), 0o640,
			`the socket is mode 0640, so only its owner may connect: an admin sets socket_mode = "0660" in parley-keyd's config\.toml, restarts it, and runs: sudo usermod -aG ` + h + ` ` + a + `, then log in again \(or run: newgrp ` + h + `\)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.Chown(sock, 0, tc.gid); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(sock, tc.mode); err != nil {
				t.Fatal(err)
			}
			cmd := testpeer.RunAs(agentUID, agentGID, nil, bin, "status")
			cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", protocol.SocketEnv + "=" + sock}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != exitNoDaemon {
				t.Fatalf("status as another user: %v, want exit %d\n%s", err, exitNoDaemon, stderr.String())
			}
			wantLines(t, stderr.String(), `permission denied on the parley-keyd socket `+regexp.QuoteMeta(sock), tc.hint)
		})
	}
}

func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
