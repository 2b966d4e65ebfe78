package testpeer

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"runtime"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	Cleanup()
	os.Exit(code)
}

// fatalTB records a Fatalf instead of failing the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// ensure runs EnsureUser and returns its Fatalf message, if any.
func ensure(t *testing.T, name string) string {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		EnsureUser(f, name)
	}()
	<-done
	return f.msg
}

// TestEnsureUserNames: a test can create only its own process's users, so
// never a production user such as parley-keyd, nor another test process's.
func TestEnsureUserNames(t *testing.T) {
	for _, name := range []string{"parley-keyd", "root", "parley-test-agent", "pkt-1-agent",
		Name(""), Name("Agent"), Name("a-b"), Name(strings.Repeat("x", 30))} {
		t.Run(name, func(t *testing.T) {
			if msg := ensure(t, name); !strings.Contains(msg, "name test users with testpeer.Name") {
				t.Errorf("EnsureUser(%q): %q, want a refusal", name, msg)
			}
		})
	}
	if !strings.HasPrefix(Name("agent"), "pkt-") || !strings.HasSuffix(Name("agent"), "-agent") {
		t.Errorf("Name(agent) = %q", Name("agent"))
	}
}

// TestUsersRemoved creates a user, and finds it and its group gone after
// Cleanup; and a user left by a test process that no longer runs is removed
// by the next process that creates users.
func TestUsersRemoved(t *testing.T) {
	RequirePeers(t)
	name := Name("probe")
	uid, _ := EnsureUser(t, name)
	u, err := user.LookupId(fmt.Sprint(uid))
	if err != nil || u.Username != name || u.HomeDir != "/nonexistent" {
		t.Fatalf("user %d: %+v, %v", uid, u, err)
	}

	// A dead process's user: a PID that ran and ended.
	ended := exec.Command("true")
	if err := ended.Run(); err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("%s%d-stale", userPrefix, ended.Process.Pid)
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", stale).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v: %s", stale, err, out)
	}
	Cleanup()
	users.Lock()
	users.swept = false
	users.Unlock()
	EnsureUser(t, Name("sweeper"))
	for _, n := range []string{name, stale} {
		if _, err := user.Lookup(n); err == nil {
			t.Errorf("user %s is still there", n)
		}
		if _, err := user.LookupGroup(n); err == nil {
			t.Errorf("group %s is still there", n)
		}
	}
}
