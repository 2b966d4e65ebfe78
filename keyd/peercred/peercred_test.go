package peercred

import (
	"bufio"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"golang.org/x/sys/unix"
)

// The test users of this process (testpeer.Name).
var (
	testAgent = testpeer.Name("agent")
	testOther = testpeer.Name("other")
)

// TestPeerHelperProcess is not a test: it is the program a peer test runs
// as another user. PARLEY_PEER_HELPER says what to do:
//
//	connect:PATH       connect to PATH, say hello, wait for the server to hang up
//	connect-exit:PATH  connect to PATH, say hello, exit at once
func TestPeerHelperProcess(t *testing.T) {
	mode, path, ok := strings.Cut(os.Getenv("PARLEY_PEER_HELPER"), ":")
	if !ok {
		return // an ordinary test run
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		os.Stderr.WriteString("helper: " + err.Error() + "\n")
		os.Exit(2)
	}
	if _, err := c.Write([]byte("hello\n")); err != nil {
		os.Exit(3)
	}
	if mode == "connect" {
		var b [1]byte
		c.Read(b[:]) // until the server closes
	}
	os.Exit(0)
}

// testListen listens on a socket in dir that every user may connect to.
func testListen(t *testing.T, dir string) (*net.UnixListener, string) {
	t.Helper()
	path := filepath.Join(dir, "peer.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	return ln, path
}

// testAccept accepts one connection and reads the client's hello, with
// a deadline so a helper that cannot connect fails the test instead of
// hanging it.
func testAccept(t *testing.T, ln *net.UnixListener) *net.UnixConn {
	t.Helper()
	ln.SetDeadline(time.Now().Add(20 * time.Second))
	c, err := ln.AcceptUnix()
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "hello\n" {
		t.Fatalf("hello from peer: %q, %v", line, err)
	}
	return c
}

func TestGetSelf(t *testing.T) {
	ln, path := testListen(t, t.TempDir())
	client, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	client.Write([]byte("hello\n"))
	c := testAccept(t, ln)

	id, err := Get(c)
	if err != nil {
		t.Fatal(err)
	}
	me, _ := user.Current()
	exe, _ := os.Executable()
	cg, _ := os.ReadFile("/proc/self/cgroup")
	want := Identity{
		UID: uint32(os.Geteuid()), GID: uint32(os.Getegid()), PID: int32(os.Getpid()),
		User: me.Username, Exe: exe, Unit: unitFromCgroup(cg),
	}
	wantGroups := []uint32{uint32(os.Getegid())}
	others, _ := os.Getgroups()
	for _, g := range others {
		if uint32(g) != wantGroups[0] {
			wantGroups = append(wantGroups, uint32(g))
		}
	}
	if diff := cmp.Diff(want, id, cmp.FilterPath(func(p cmp.Path) bool {
		n := p.Last().String()
		return n == ".Groups" || n == ".GroupIDs"
	}, cmp.Ignore())); diff != "" {
		t.Errorf("identity (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantGroups, id.GroupIDs); diff != "" {
		t.Errorf("group ids (-want +got):\n%s", diff)
	}
	if len(id.Groups) != len(id.GroupIDs) {
		t.Errorf("%d group names for %d group ids", len(id.Groups), len(id.GroupIDs))
	}
}

// TestGetOtherUser connects from a process running as a real
// second OS user, with a supplementary group, and checks that the kernel's
// view of it is what Get reports.
func TestGetOtherUser(t *testing.T) {
	testpeer.RequirePeers(t)
	uid, gid := testpeer.EnsureUser(t, testAgent)
	_, otherGID := testpeer.EnsureUser(t, testOther)
	ln, path := testListen(t, testpeer.SharedDir(t))

	cmd := testpeer.Helper(t, uid, gid, []uint32{otherGID}, "TestPeerHelperProcess", "PARLEY_PEER_HELPER=connect:"+path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := testAccept(t, ln)
	id, err := Get(c)
	c.Close()
	if werr := cmd.Wait(); werr != nil {
		t.Errorf("helper: %v: %s", werr, stderr.String())
	}
	if err != nil {
		t.Fatal(err)
	}

	want := Identity{
		UID: uid, GID: gid, PID: int32(cmd.Process.Pid),
		User:     testAgent,
		Groups:   []string{testAgent, testOther},
		GroupIDs: []uint32{gid, otherGID},
		Exe:      testpeer.Binary(t),
		Unit:     id.Unit, // depends on where the tests run
	}
	if diff := cmp.Diff(want, id); diff != "" {
		t.Errorf("identity (-want +got):\n%s", diff)
	}
	if id.InGroup(0) || !id.InGroup(otherGID) {
		t.Errorf("InGroup wrong for %v", id.GroupIDs)
	}
}

// TestGetGonePeer checks that a peer that exited before it was
// identified keeps its kernel credentials and loses its informative fields:
// nothing is read from a PID that may now be another process's.
func TestGetGonePeer(t *testing.T) {
	testpeer.RequirePeers(t)
	uid, gid := testpeer.EnsureUser(t, testAgent)
	ln, path := testListen(t, testpeer.SharedDir(t))

	cmd := testpeer.Helper(t, uid, gid, nil, "TestPeerHelperProcess", "PARLEY_PEER_HELPER=connect-exit:"+path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := testAccept(t, ln)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	id, err := Get(c)
	if err != nil {
		t.Fatal(err)
	}
	want := Identity{
		UID: uid, GID: gid, PID: int32(cmd.Process.Pid),
		User: testAgent, Groups: []string{testAgent}, GroupIDs: []uint32{gid},
	}
	if diff := cmp.Diff(want, id); diff != "" {
		t.Errorf("identity (-want +got):\n%s", diff)
	}
}

func TestPeerUnitFromCgroup(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"ok/system-service", "0::/system.slice/parley-agent.service\n", "parley-agent.service"},
		{"ok/user-service", "0::/user.slice/user-1000.slice/user@1000.service/app.slice/agent.service\n", "agent.service"},
		{"ok/session-scope", "0::/user.slice/user-1000.slice/session-4.scope\n", "session-4.scope"},
		{"ok/v1-name-systemd", "12:pids:/\n1:name=systemd:/system.slice/cron.service\n", "cron.service"},
		{"ok/unified-wins", "1:name=systemd:/system.slice/a.service\n0::/system.slice/b.service\n", "b.service"},
		{"ok/root-cgroup", "0::/\n", ""},
		{"ok/nested-cgroup-below-unit", "0::/system.slice/x.service/worker\n", "x.service"},
		{"ok/escaped-unit-name", `0::/system.slice/system-getty.slice/getty@tty1.service` + "\n", "getty@tty1.service"},
		{"fail/escape-in-delegated-name", "0::/user.slice/user-1000.slice/user@1000.service/\x1b[2J.service\n", "user@1000.service"},
		{"fail/space-in-name", "0::/user.slice/user-1000.slice/user@1000.service/a b.scope\n", "user@1000.service"},
		{"ok/empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := unitFromCgroup([]byte(tt.in)); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestPeerParseStatus(t *testing.T) {
	status := "Name:\tagent\nUid:\t1000\t1001\t1000\t1000\nGid:\t100\t100\t100\t100\nGroups:\t4 24 27 \n"
	groups, ok := parseStatusGroups([]byte(status))
	if !ok || !cmp.Equal(groups, []uint32{4, 24, 27}) {
		t.Errorf("groups %v, %v", groups, ok)
	}
	if euid, ok := statusField([]byte(status), "Uid:", 1); !ok || euid != 1001 {
		t.Errorf("effective uid %d, %v; want 1001", euid, ok)
	}
	if _, ok := parseStatusGroups([]byte("Groups:\tx\n")); ok {
		t.Error("bad Groups line accepted")
	}
	if g, ok := parseStatusGroups([]byte("Groups:\n")); !ok || len(g) != 0 {
		t.Errorf("empty Groups line: %v, %v", g, ok)
	}
}

// TestPeerStillAlive checks the PID-reuse guard: a pidfd of a process that
// has exited says "gone" even when the /proc folder checked now belongs to a
// live process of the same user, as it would after PID reuse.
func TestPeerStillAlive(t *testing.T) {
	start := func(t *testing.T) (*exec.Cmd, int, io.WriteCloser) {
		cmd := exec.Command("cat")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pidfd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
		if err != nil {
			stdin.Close()
			cmd.Wait()
			t.Skipf("no pidfd on this kernel: %v", err)
		}
		t.Cleanup(func() { unix.Close(pidfd) })
		return cmd, pidfd, stdin
	}
	me := uint32(os.Geteuid())

	t.Run("ok/alive", func(t *testing.T) {
		cmd, pidfd, stdin := start(t)
		defer cmd.Wait()
		defer stdin.Close()
		if !stillAlive(pidfd, "/proc/"+strconv.Itoa(cmd.Process.Pid), me) {
			t.Error("live process reported gone")
		}
	})
	t.Run("fail/exited-pid-reused", func(t *testing.T) {
		cmd, pidfd, stdin := start(t)
		stdin.Close()
		cmd.Wait()
		if stillAlive(pidfd, "/proc/self", me) {
			t.Error("exited process reported alive")
		}
	})
	t.Run("ok/no-pidfd-same-uid", func(t *testing.T) {
		if !stillAlive(-1, "/proc/self", me) {
			t.Error("fallback refused a live process of the same uid")
		}
	})
	t.Run("fail/no-pidfd-other-uid", func(t *testing.T) {
		if stillAlive(-1, "/proc/self", me+1) {
			t.Error("fallback accepted a process of another uid")
		}
	})
	t.Run("fail/no-pidfd-gone", func(t *testing.T) {
		if stillAlive(-1, "/proc/0", me) {
			t.Error("fallback accepted a missing process")
		}
	})
}

// FuzzPeerUnitFromCgroup checks that whatever a cgroup path holds, the unit
// is empty or a valid unit name ending in .service or .scope.
func FuzzPeerUnitFromCgroup(f *testing.F) {
	f.Add([]byte("0::/user.slice/user-1000.slice/user@1000.service/app.slice/agent.service\n"))
	f.Add([]byte("1:name=systemd:/system.slice/cron.service\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		u := unitFromCgroup(data)
		if u != "" && (!validUnitName(u) || !(strings.HasSuffix(u, ".service") || strings.HasSuffix(u, ".scope"))) {
			t.Errorf("unit %q", u)
		}
	})
}
