// Package testpeer gives tests real second OS users: it creates system users,
// runs a copy of the test binary as one of them, and gives it a folder it can
// reach. It is for tests only.
//
// Creating users needs root. A test that needs them calls RequirePeers (or
// RequireRoot), which skips the test when it cannot have them, except when
// the environment variable PARLEY_REQUIRE_PEERS is "1": CI sets it, and there
// a missing peer fails the test instead of skipping it silently.
//
// The child runs the test binary itself. The usual pattern:
//
//	func TestPeerHelper(t *testing.T) {
//		mode := os.Getenv("PARLEY_PEER_HELPER")
//		if mode == "" {
//			t.Skip("helper process only")
//		}
//		... act as the other user, then os.Exit ...
//	}
//
//	cmd := testpeer.Helper(t, uid, gid, "TestPeerHelper", "PARLEY_PEER_HELPER=connect:"+sock)
package testpeer

import (
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvRequire is the environment variable under which a missing peer (not
// root, no useradd, no mount) is a test failure rather than a skip.
const EnvRequire = "PARLEY_REQUIRE_PEERS"

// Required reports whether missing peers must fail tests (EnvRequire=1).
func Required() bool { return os.Getenv(EnvRequire) == "1" }

// Unavailable skips the test with the reason, or fails it when peers are
// required.
func Unavailable(t testing.TB, reason string) {
	t.Helper()
	if Required() {
		t.Fatalf("%s (and %s=1 makes a missing peer a failure)", reason, EnvRequire)
	}
	t.Skip(reason)
}

// RequireRoot returns only when the test runs as root; otherwise it skips
// or fails the test (see Unavailable).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, "needs root to act as other OS users")
	}
}

// RequirePeers returns only when the test can create and run as other OS
// users: it is root and useradd exists.
func RequirePeers(t testing.TB) {
	t.Helper()
	RequireRoot(t)
	if _, err := exec.LookPath("useradd"); err != nil {
		Unavailable(t, "needs useradd to create test users")
	}
}

// EnsureUser returns the uid and primary gid of the system user name,
// creating it (no home, no login shell) when it does not exist. Call
// RequirePeers first. Users are left in place for later runs.
func EnsureUser(t testing.TB, name string) (uid, gid uint32) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if u, err := user.Lookup(name); err == nil {
			return parseID(t, u.Uid), parseID(t, u.Gid)
		}
		out, err := exec.Command("useradd", "--system", "--no-create-home", "--user-group",
			"--shell", "/usr/sbin/nologin", name).CombinedOutput()
		if err == nil {
			continue
		}
		// Another test package may be creating the same user, or holding
		// the lock on /etc/passwd: look again until the deadline.
		if time.Now().After(deadline) {
			t.Fatalf("useradd %s: %v: %s", name, err, strings.TrimSpace(string(out)))
		}
		time.Sleep(50 * time.Millisecond) // waiting on another process's lock; no condition to wait on
	}
}

func parseID(t testing.TB, s string) uint32 {
	t.Helper()
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		t.Fatalf("bad id %q: %v", s, err)
	}
	return uint32(n)
}

// SharedDir returns a new folder that every user can enter and read (0755,
// and its parents are world-searchable), removed when the test ends. Put a
// socket there and chmod it for another user to connect.
func SharedDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "parley-testpeer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// Binary returns the path of a copy of the running test binary that every
// user can execute. The go tool builds test binaries in folders only their
// owner can enter, so another user cannot run the original. The copy is made
// once per process and lives until the process ends.
func Binary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		var self string
		self, binErr = os.Executable()
		if binErr != nil {
			return
		}
		var dir string
		dir, binErr = os.MkdirTemp("", "parley-testpeer-bin-")
		if binErr != nil {
			return
		}
		if binErr = os.Chmod(dir, 0o755); binErr != nil {
			return
		}
		binPath = filepath.Join(dir, filepath.Base(self))
		binErr = copyFile(self, binPath, 0o755)
	})
	if binErr != nil {
		t.Fatalf("copy test binary: %v", binErr)
	}
	return binPath
}

// Cleanup removes the copy made by Binary. Call it from TestMain after
// m.Run if the package has one; otherwise the copy stays in the temporary
// folder.
func Cleanup() {
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Chmod(mode); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// RunAs returns a command that runs name with args as uid and gid, with no
// supplementary groups unless groups are given. The working folder is "/",
// which every user can reach. The caller starts it.
func RunAs(uid, gid uint32, groups []uint32, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: append([]uint32{}, groups...)},
	}
	return cmd
}

// Helper returns a command that runs the test function test of the current
// test binary (a world-executable copy, see Binary) as uid and gid, with env
// added to a minimal environment. The caller starts it.
func Helper(t testing.TB, uid, gid uint32, groups []uint32, test string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := RunAs(uid, gid, groups, Binary(t), "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/"}, env...)
	return cmd
}
