// Package testpeer gives tests real second OS users: it creates system users
// whose names no real user has, runs a copy of the test binary as one of
// them, gives it a folder it can reach, and removes the users when the test
// binary ends. It is for tests only.
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
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
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

// Test users are named "pkt-PID-ROLE": PID is the test process that
// creates them, ROLE what the test uses them as ("agent", "human", "keyd").
// No production user of this project has such a name (the daemon's is
// parley-keyd, agents' are whatever the admin names), so a test never
// creates, reuses or changes a real one, and every test process has users
// of its own: concurrent test binaries (go test ./... runs packages in
// parallel) never share, and never remove, each other's.
//
// The process removes its users and their groups in Cleanup, which every
// package's TestMain calls after m.Run, whether tests failed or not. A
// process that dies before (a panic, a test timeout, a kill) leaves its
// users behind; the next test process to create users removes those whose
// PID no longer runs.
const userPrefix = "pkt-"

// Name returns the name of this test process's user for role, a word of
// lower-case letters: "pkt-PID-ROLE". Pass it to EnsureUser, and use it
// where the test needs the name (a policy, a configuration).
func Name(role string) string {
	return fmt.Sprintf("%s%d-%s", userPrefix, os.Getpid(), role)
}

var users struct {
	sync.Mutex
	swept bool
	mine  []string // created or adopted by this process, removed by Cleanup
}

// EnsureUser returns the uid and primary gid of the system user name,
// creating it and a group of the same name (no home, no login shell) when it
// does not exist. name must come from Name: EnsureUser refuses any other, so
// that no test can create or take over a user a real installation has. Call
// RequirePeers first. Cleanup removes the user.
func EnsureUser(t testing.TB, name string) (uid, gid uint32) {
	t.Helper()
	role, ok := strings.CutPrefix(name, fmt.Sprintf("%s%d-", userPrefix, os.Getpid()))
	if !ok || role == "" || len(name) > 32 || strings.Trim(role, "abcdefghijklmnopqrstuvwxyz") != "" {
		t.Fatalf("test user %q: name test users with testpeer.Name(role), role in lower-case letters", name)
	}
	users.Lock()
	defer users.Unlock()
	if !users.swept {
		users.swept = true
		sweepStale()
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if u, err := user.Lookup(name); err == nil {
			// Created now, or left by a dead process that had this
			// process's PID: the PID is this process's now, so the user
			// is too.
			if !slices.Contains(users.mine, name) {
				users.mine = append(users.mine, name)
			}
			return parseID(t, u.Uid), parseID(t, u.Gid)
		}
		out, err := exec.Command("useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--user-group",
			"--shell", "/usr/sbin/nologin", "--comment", "parley-keyd test user", name).CombinedOutput()
		if err == nil {
			continue
		}
		// Another test process may hold the lock on /etc/passwd: try
		// again until the deadline.
		if time.Now().After(deadline) {
			t.Fatalf("useradd %s: %v: %s", name, err, strings.TrimSpace(string(out)))
		}
		time.Sleep(50 * time.Millisecond) // waiting on another process's lock; no condition to wait on
	}
}

// sweepStale removes the test users of test processes that no longer run.
func sweepStale() {
	data, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(data), "\n") {
		name, _, _ := strings.Cut(line, ":")
		rest, ok := strings.CutPrefix(name, userPrefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			removeUser(name)
		}
	}
}

// removeUser deletes a test user and its group, retrying while another
// process holds the lock on /etc/passwd. It reports on stderr what it could
// not remove.
func removeUser(name string) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command("userdel", name).CombinedOutput()
		if err == nil || !userExists(name) {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(os.Stderr, "testpeer: userdel %s: %v: %s\n", name, err, strings.TrimSpace(string(out)))
			return
		}
		time.Sleep(50 * time.Millisecond) // waiting on another process's lock; no condition to wait on
	}
	// userdel removes the user's own group unless the system says not
	// to; make sure.
	if _, err := user.LookupGroup(name); err == nil {
		if out, err := exec.Command("groupdel", name).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "testpeer: groupdel %s: %v: %s\n", name, err, strings.TrimSpace(string(out)))
		}
	}
}

func userExists(name string) bool {
	_, err := user.Lookup(name)
	return err == nil
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

// Cleanup removes what this process made for other users: the test users
// that EnsureUser created, with their groups, and the copy made by Binary.
// Call it from the package's TestMain after m.Run; a package with tests
// that use this package must have such a TestMain.
func Cleanup() {
	users.Lock()
	mine := users.mine
	users.mine = nil
	users.Unlock()
	for _, name := range mine {
		removeUser(name)
	}
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

// LockTree takes a lock that every test running make in this repository's
// tree takes first: make build, install and deb write bin/ and build/, and
// test binaries of several packages run at once. It is held until unlock
// is called or the test ends.
func LockTree(t testing.TB) (unlock func()) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "parley-keyd-tree.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatal(err)
	}
	var once sync.Once
	unlock = func() { once.Do(func() { f.Close() }) }
	t.Cleanup(unlock)
	return unlock
}

// GroupMembers returns the pids of the live processes in process group
// pgid, as /proc shows them (zombies, which have ended, are left out). A
// process sent SIGKILL is still listed until it has died.
func GroupMembers(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp …; comm may hold spaces and ")".
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) >= 3 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" && f[0] != "X" {
			out = append(out, pid)
		}
	}
	return out
}

// WaitGroupGone waits up to d for process group pgid to have no live member
// (SIGKILL takes effect a moment after kill returns) and returns the
// members still alive then.
func WaitGroupGone(pgid int, d time.Duration) []int {
	end := time.Now().Add(d)
	for {
		left := GroupMembers(pgid)
		if len(left) == 0 || time.Now().After(end) {
			return left
		}
		time.Sleep(10 * time.Millisecond)
	}
}
