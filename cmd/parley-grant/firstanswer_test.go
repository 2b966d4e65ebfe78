package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// silentSocket listens on a new socket and never accepts, as systemd holds
// parley-keyd.socket while the service it starts fails and restarts: a
// client connects (the kernel queues it) and sends, and nothing answers.
func silentSocket(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return path
}

// runFor runs parley-grant with env and args, killing it after limit, and
// returns what it wrote, its exit code and how long it ran.
func runFor(t *testing.T, limit time.Duration, env []string, args ...string) (stdout, stderr string, code int, took time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, cliBinary(t), args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	took = time.Since(start)
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("parley-grant %s still ran after %s\nstderr: %s", strings.Join(args, " "), limit, errb.String())
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errb.String(), code, took
}

// TestSilentDaemonDeadline is a daemon that cannot start behind an
// activation socket: every command that talks to it gives up after the
// deadline for the first answer, with exit code 8 and an error that says
// the daemon is not starting and where to look, instead of waiting for as
// long as systemd goes on restarting it.
func TestSilentDaemonDeadline(t *testing.T) {
	t.Parallel()
	sock := silentSocket(t)
	keyPath, _ := writeAgentKey(t, t.TempDir())
	env := cliEnv(t, sock, keyPath)
	for _, tc := range []struct {
		name     string
		deadline time.Duration
		args     []string
	}{
		{"issue", time.Second, []string{"issue", "--can", "shop.order", "--exp", "1h", "--start-timeout", "1s"}},
		{"status", time.Second, []string{"status", "--start-timeout", "1s"}},
		{"pending", 2 * time.Second, []string{"--start-timeout", "2s", "pending"}},
		{"issue-json", time.Second, []string{"issue", "--json", "--can", "shop.order", "--start-timeout", "1s"}},
		{"default", 15 * time.Second, []string{"explain", "--can", "shop.order"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code, took := runFor(t, tc.deadline+20*time.Second, env, tc.args...)
			if code != exitNoDaemon {
				t.Errorf("exit %d, want %d; stderr %q", code, exitNoDaemon, stderr)
			}
			if took < tc.deadline || took > tc.deadline+10*time.Second {
				t.Errorf("gave up after %s, want %s", took, tc.deadline)
			}
			msg := stderr
			if tc.name == "issue-json" {
				var e struct {
					Error struct{ Code, Message, Hint string }
				}
				if err := json.Unmarshal([]byte(stdout), &e); err != nil {
					t.Fatalf("stdout %q: %v", stdout, err)
				}
				if e.Error.Code != "no_daemon" {
					t.Errorf("code %q", e.Error.Code)
				}
				msg = e.Error.Message + "\nhint: " + e.Error.Hint
			}
			for _, want := range []string{sock, "did not answer within " + tc.deadline.String(), "not starting", "journalctl -u parley-keyd", "parley-keyd status"} {
				if !strings.Contains(msg, want) {
					t.Errorf("the error does not say %q:\n%s", want, msg)
				}
			}
		})
	}
}

// slowStart proxies a new socket to the daemon's, but sends what a client
// writes on only after delay, as a daemon that takes that long to start
// behind its activation socket.
func slowStart(t *testing.T, daemonSock string, delay time.Duration) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "slow.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				<-time.After(delay)
				up, err := net.Dial("unix", daemonSock)
				if err != nil {
					t.Errorf("proxy: %v", err)
					return
				}
				defer up.Close()
				go func() { io.Copy(up, c); up.Close() }()
				io.Copy(c, up)
			}()
		}
	}()
	return path
}

// TestExpiryFromSend: an expiry given as a duration counts from when the
// request goes to the daemon, not from when the command started, so a
// daemon slow to start costs the grant none of its lifetime.
func TestExpiryFromSend(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, journeyPolicy, nil)
	const delay = 3 * time.Second
	sock := slowStart(t, d.sock, delay)
	keyPath, _ := writeAgentKey(t, t.TempDir())
	start := time.Now().Unix()
	stdout, stderr, code, _ := runFor(t, 30*time.Second, cliEnv(t, sock, keyPath),
		"issue", "--json", "--svc", "shop.example", "--can", "shop.order", "--exp", "1h")
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, stdout, stderr)
	}
	var res struct{ Expires int64 }
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatal(err)
	}
	if min := start + 3600 + int64(delay/time.Second) - 1; res.Expires < min {
		t.Errorf("the grant expires at %d, %d s after the command started; want 1h after the request was sent (at least %d)", res.Expires, res.Expires-start, min)
	}
}

// TestMCPSilentDaemon: the MCP tools meet the same deadline, as a tool
// error "unavailable" that says where to look.
func TestMCPSilentDaemon(t *testing.T) {
	sock := silentSocket(t)
	t.Setenv(protocol.SocketEnv, sock)
	old := startTimeout.Duration
	startTimeout.Duration = time.Second
	t.Cleanup(func() { startTimeout.Duration = old })
	keyPath, _ := writeAgentKey(t, t.TempDir())
	s := connectMCP(t, keyPath)
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"parley_status", map[string]any{}},
		{"parley_request_grant", map[string]any{"can": []string{"shop.order"}, "exp": "1h"}},
		{"parley_explain", map[string]any{"can": []string{"shop.order"}}},
	} {
		start := time.Now()
		text := toolErr(t, s.call(t, tc.tool, tc.args, nil), "unavailable")
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("%s gave up after %s", tc.tool, took)
		}
		if !strings.Contains(text, "did not answer within 1s") || !strings.Contains(text, "journalctl -u parley-keyd") {
			t.Errorf("%s: %q", tc.tool, text)
		}
	}
}
