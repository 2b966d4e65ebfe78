package keyd

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// TestRememberedOtherUserCannotRide is issue 24's attack with real OS
// users: a second user that the same policy agent matches (any = true)
// asks for exactly what the first user had remembered. The daemon asks a
// human for it, as if nothing were remembered; the second user does not
// see the first's approval and cannot forget it. The first user's own
// request is issued under it, which shows the test can tell.
func TestRememberedOtherUserCannotRide(t *testing.T) {
	testpeer.RequirePeers(t)
	name := testpeer.Name("rmb")
	uid, gid := testpeer.EnsureUser(t, name)
	h := rememberHarness(t, func(c *Config, o *Options) { c.Access.AgentUsers = append(c.Access.AgentUsers, name) })
	sock := filepath.Join(testpeer.SharedDir(t), "agent.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	go h.srv.Serve(ln)
	t.Cleanup(func() { ln.Close() })

	key := newAgentKey(t)
	a := remember(t, h, key, "2h", mailScope()...)
	if res, asked, err := grantOrAsk(t, h, newAgentKey(t), mailScope()...); err != nil || asked || res.Remembered != a.Remembered {
		t.Fatalf("the first user's own request: asked %v, %v, %+v", asked, err, res)
	}
	peer := func(mode string) string {
		t.Helper()
		cmd := testpeer.Helper(t, uid, gid, nil, "TestRememberedPeerHelper", "PARLEY_REMEMBER_PEER="+mode+"|"+sock)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("peer %s: %v\n%s", mode, err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return lines[len(lines)-1]
	}
	if got := peer("grant"); got != "asked" {
		t.Errorf("the second user's identical request: %q, want asked", got)
	}
	if got := peer("list"); got != "0" {
		t.Errorf("the second user lists %s remembered approvals, want 0", got)
	}
	if got := peer("forget:" + a.Remembered); got != "error not_found" {
		t.Errorf("the second user's FORGET of the first's approval: %q", got)
	}
	if l := listRemembered(t, h); len(l) != 1 || l[0].ID != a.Remembered || l[0].Issued != 1 {
		t.Errorf("after the second user's tries: %+v", l)
	}
}

// TestRememberedPeerHelper runs as the second user of
// TestRememberedOtherUserCannotRide.
func TestRememberedPeerHelper(t *testing.T) {
	env := os.Getenv("PARLEY_REMEMBER_PEER")
	if env == "" {
		t.Skip("helper process only")
	}
	mode, sock, _ := strings.Cut(env, "|")
	c, err := client.Dial(sock)
	if err != nil {
		fmt.Println("error dial", err)
		os.Exit(0)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	say := func(err error) {
		var e *protocol.Error
		if errors.As(err, &e) {
			fmt.Println("error", e.Code)
		} else {
			fmt.Println("error", err)
		}
	}
	switch {
	case mode == "grant":
		asked := false
		res, err := c.Grant(ctx, newAgentKey(t), mailScope(), func(protocol.Event) { asked = true; cancel() })
		switch {
		case asked:
			fmt.Println("asked")
		case err != nil:
			say(err)
		default:
			fmt.Println("issued", res.Decision, res.Remembered)
		}
	case mode == "list":
		l, err := c.Remembered(ctx)
		if err != nil {
			say(err)
		} else {
			fmt.Println(len(l))
		}
	case strings.HasPrefix(mode, "forget:"):
		if err := c.Forget(ctx, strings.TrimPrefix(mode, "forget:"), "not mine"); err != nil {
			say(err)
		} else {
			fmt.Println("forgotten")
		}
	}
	os.Exit(0)
}

// stopHarness stops h's daemon and waits for it.
func stopHarness(t *testing.T, h *harness) {
	t.Helper()
	h.stop()
	select {
	case err := <-h.served:
		h.served <- err
	case <-time.After(15 * time.Second):
		t.Fatal("the daemon did not stop")
	}
}

// startOn starts a daemon with the remember policy on the state folder dir.
func startOn(t *testing.T, dir string, key ed25519.PrivateKey) *harness {
	t.Helper()
	h := rememberHarness(t, func(c *Config, o *Options) { o.State, o.Signer = dir, key })
	h.dir, h.key = dir, key
	return h
}

// TestRememberedForgetCrash kills the daemon (SIGKILL) at each step of a
// FORGET and starts it again on the same state folder: killed before the
// forget record is durable, FORGET never answered and the approval is
// still there; killed at any later step, it is ended for good.
func TestRememberedForgetCrash(t *testing.T) {
	for _, tc := range []struct {
		step  string
		alive bool
	}{{"before-record", true}, {"after-record", false}, {"after-store", false}, {"", false}} {
		t.Run("step="+tc.step, func(t *testing.T) {
			h := rememberHarness(t)
			key := newAgentKey(t)
			a := remember(t, h, key, "2h", mailScope()...)
			dir, principal := h.dir, h.key
			stopHarness(t, h)
			keyFile := filepath.Join(t.TempDir(), "key")
			if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(principal.Seed())), 0o600); err != nil {
				t.Fatal(err)
			}
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(self, "-test.run=^TestRememberedCrashHelper$", "-test.count=1")
			cmd.Env = append(os.Environ(), "PARLEY_REMEMBER_CRASH="+strings.Join([]string{tc.step, dir, keyFile, a.Remembered}, "|"))
			out, err := cmd.CombinedOutput()
			killed := false
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
					killed = true
				}
			}
			if tc.step != "" && !killed {
				t.Fatalf("the daemon was not killed at %s: %v\n%s", tc.step, err, out)
			}
			if tc.step == "" && (err != nil || !strings.Contains(string(out), "FORGET returned")) {
				t.Fatalf("FORGET without a crash: %v\n%s", err, out)
			}
			h2 := startOn(t, dir, principal)
			l := listRemembered(t, h2)
			if tc.alive != (len(l) == 1) {
				t.Fatalf("after a crash at %q: remembered %+v, want alive %v", tc.step, l, tc.alive)
			}
			res, asked, err := grantOrAsk(t, h2, key, mailScope()...)
			if issued := err == nil && !asked; issued != tc.alive {
				t.Errorf("after a crash at %q: issued at once %v (%+v)", tc.step, issued, res)
			}
		})
	}
}

// TestRememberedCrashHelper is the daemon TestRememberedForgetCrash kills.
func TestRememberedCrashHelper(t *testing.T) {
	env := os.Getenv("PARLEY_REMEMBER_CRASH")
	if env == "" {
		t.Skip("helper process only")
	}
	parts := strings.Split(env, "|")
	stepName, dir, keyFile, id := parts[0], parts[1], parts[2], parts[3]
	b, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	seed, err := hex.DecodeString(string(b))
	if err != nil {
		t.Fatal(err)
	}
	key := ed25519.NewKeyFromSeed(seed)
	forgetStep = func(s string) {
		if s == stepName {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	h := startOn(t, dir, key)
	if err := h.client().Forget(ctxT(t), id, "crash test"); err != nil {
		t.Fatal(err)
	}
	fmt.Println("FORGET returned")
}
