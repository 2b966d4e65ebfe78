package keyd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"golang.org/x/sys/unix"
)

// hardenTestCanary holds, in a helper process, a secret whose address the
// readers are told; reading it back from /proc/PID/mem proves memory access.
var hardenTestCanary []byte

// TestHardenHelperProcess is not a test: it is the program the hardening
// tests run as other users. PARLEY_HARDEN_HELPER says what to do:
//
//	target:harden  call Harden, then act as target:plain
//	target:plain   print "self pid=P addr=A len=N dumpable=D", start a reader of
//	               this very process as a child (same uid, so Yama's
//	               ptrace_scope=1 allows it), print its result line, then
//	               wait for stdin to close
//	read:P:A:N     try /proc/P/environ (must hold PARLEY_HARDEN_CANARY) and
//	               N bytes of /proc/P/mem at address A (must equal the canary),
//	               print "reader environ=R mem=R", R being ok, denied or error:…
func TestHardenHelperProcess(t *testing.T) {
	mode := os.Getenv("PARLEY_HARDEN_HELPER")
	switch {
	case mode == "":
		return // an ordinary test run
	case strings.HasPrefix(mode, "target:"):
		hardenTestTarget(mode == "target:harden")
	case strings.HasPrefix(mode, "read:"):
		var pid int
		var addr uintptr
		var n int
		if _, err := fmt.Sscanf(mode, "read:%d:%x:%d", &pid, &addr, &n); err != nil {
			fmt.Println("reader bad mode", err)
			os.Exit(2)
		}
		fmt.Println(hardenTestRead(pid, addr, n))
	}
	os.Exit(0)
}

func hardenTestTarget(harden bool) {
	if harden {
		if _, err := Harden(); err != nil {
			fmt.Println("harden failed:", err)
			os.Exit(2)
		}
	}
	hardenTestCanary = []byte(os.Getenv("PARLEY_HARDEN_CANARY"))
	addr := uintptr(unsafe.Pointer(&hardenTestCanary[0]))
	dumpable, _ := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
	fmt.Printf("self pid=%d addr=%x len=%d dumpable=%d\n", os.Getpid(), addr, len(hardenTestCanary), dumpable)

	exe, _ := os.Executable()
	reader := exec.Command(exe, "-test.run=^TestHardenHelperProcess$", "-test.count=1")
	reader.Env = []string{fmt.Sprintf("PARLEY_HARDEN_HELPER=read:%d:%x:%d", os.Getpid(), addr, len(hardenTestCanary))}
	reader.Stderr = os.Stderr
	out, err := reader.Output()
	if err != nil {
		fmt.Println("reader failed:", err)
		os.Exit(2)
	}
	os.Stdout.Write(out)
	io.Copy(io.Discard, os.Stdin) // until the test closes stdin
	runtime.KeepAlive(hardenTestCanary)
}

func hardenTestRead(pid int, addr uintptr, n int) string {
	result := func(err error) string {
		switch {
		case err == nil:
			return "ok"
		case errors.Is(err, os.ErrPermission), errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
			return "denied"
		default:
			return "error:" + strings.ReplaceAll(err.Error(), " ", "_")
		}
	}
	dir := "/proc/" + strconv.Itoa(pid)

	var envErr error
	if env, err := os.ReadFile(dir + "/environ"); err != nil {
		envErr = err
	} else if !strings.Contains(string(env), "PARLEY_HARDEN_CANARY=parley-canary-") {
		envErr = fmt.Errorf("canary not in environ (%d bytes)", len(env))
	}

	var memErr error
	if f, err := os.Open(dir + "/mem"); err != nil {
		memErr = err
	} else {
		buf := make([]byte, n)
		if _, err := f.ReadAt(buf, int64(addr)); err != nil {
			memErr = err
		} else if !strings.HasPrefix(string(buf), "parley-canary-") {
			memErr = fmt.Errorf("read %q, not the canary", buf)
		}
		f.Close()
	}
	return "reader environ=" + result(envErr) + " mem=" + result(memErr)
}

type hardenTestTargetProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	pid    int
	addr   uintptr
	n      int
	dump   int
	reader string // what the same-uid reader found
}

// hardenTestStart starts a target helper as uid/gid and waits for its two
// report lines.
func hardenTestStart(t *testing.T, uid, gid uint32, harden bool) *hardenTestTargetProc {
	t.Helper()
	mode := "target:plain"
	if harden {
		mode = "target:harden"
	}
	canary := fmt.Sprintf("parley-canary-%d", time.Now().UnixNano())
	cmd := testpeer.Helper(t, uid, gid, nil, "TestHardenHelperProcess",
		"PARLEY_HARDEN_HELPER="+mode, "PARLEY_HARDEN_CANARY="+canary)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &hardenTestTargetProc{cmd: cmd, stdin: stdin}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	lines := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		var got []string
		for len(got) < 2 && sc.Scan() {
			got = append(got, sc.Text())
		}
		lines <- got
		io.Copy(io.Discard, stdout)
	}()
	var got []string
	select {
	case got = <-lines:
	case <-time.After(30 * time.Second):
		t.Fatal("target helper did not report")
	}
	if len(got) != 2 {
		t.Fatalf("target helper said %q", got)
	}
	if _, err := fmt.Sscanf(got[0], "self pid=%d addr=%x len=%d dumpable=%d", &p.pid, &p.addr, &p.n, &p.dump); err != nil {
		t.Fatalf("target helper said %q: %v", got[0], err)
	}
	if p.pid != cmd.Process.Pid {
		t.Fatalf("target reports pid %d, started %d", p.pid, cmd.Process.Pid)
	}
	p.reader = got[1]
	return p
}

// TestHarden runs a target process as a non-root user U, with and without
// Harden, and has a second process running as U, and one running as another
// user V, try to read the target's environment and memory. Hardened, both
// must fail; without Harden, U's reader must succeed, which shows the test
// can tell the difference.
func TestHarden(t *testing.T) {
	testpeer.RequirePeers(t)
	uid, gid := testpeer.EnsureUser(t, testpeer.Name("agent"))
	otherUID, otherGID := testpeer.EnsureUser(t, testpeer.Name("other"))

	tests := []struct {
		name         string
		harden       bool
		sameUser     string // what the reader running as the target's user finds
		otherUser    string // what the reader running as another user finds
		dumpable     int
		procOwner    uint32 // owner of /proc/PID/environ
		coreLimitMax string
	}{
		{"ok/hardened", true, "reader environ=denied mem=denied", "reader environ=denied mem=denied", 0, 0, "0"},
		{"ok/control-not-hardened", false, "reader environ=ok mem=ok", "reader environ=denied mem=denied", 1, uid, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := hardenTestStart(t, uid, gid, tt.harden)
			if p.reader != tt.sameUser {
				t.Errorf("same-user reader: %q, want %q", p.reader, tt.sameUser)
			}
			if p.dump != tt.dumpable {
				t.Errorf("PR_GET_DUMPABLE in target: %d, want %d", p.dump, tt.dumpable)
			}

			dir := "/proc/" + strconv.Itoa(p.pid)
			var st syscall.Stat_t
			if err := syscall.Stat(dir+"/environ", &st); err != nil {
				t.Fatal(err)
			}
			if st.Uid != tt.procOwner {
				t.Errorf("%s/environ owned by uid %d, want %d", dir, st.Uid, tt.procOwner)
			}
			limits, err := os.ReadFile(dir + "/limits")
			if err != nil {
				t.Fatal(err)
			}
			core := hardenTestLimit(string(limits), "Max core file size")
			if tt.coreLimitMax != "" && (len(core) != 2 || core[0] != "0" || core[1] != tt.coreLimitMax) {
				t.Errorf("core file limit %v, want 0 %s", core, tt.coreLimitMax)
			}
			if !tt.harden && len(core) == 2 && core[0] == "0" && core[1] == "0" {
				t.Logf("note: core limit already 0 0 without Harden")
			}

			other := testpeer.Helper(t, otherUID, otherGID, nil, "TestHardenHelperProcess",
				fmt.Sprintf("PARLEY_HARDEN_HELPER=read:%d:%x:%d", p.pid, p.addr, p.n))
			out, err := other.Output()
			if err != nil {
				t.Fatalf("other-user reader: %v", err)
			}
			if got := strings.TrimSpace(string(out)); got != tt.otherUser {
				t.Errorf("other-user reader: %q, want %q", got, tt.otherUser)
			}
		})
	}
}

// hardenTestLimit returns the soft and hard values of a /proc/PID/limits row.
func hardenTestLimit(limits, row string) []string {
	for _, line := range strings.Split(limits, "\n") {
		if rest, ok := strings.CutPrefix(line, row); ok {
			f := strings.Fields(rest)
			if len(f) >= 2 {
				return f[:2]
			}
		}
	}
	return nil
}

func TestHardenReportString(t *testing.T) {
	tests := []struct {
		name string
		r    HardenReport
		want string
	}{
		{"ok/both", HardenReport{NotDumpable: true, NoCoreFile: true}, "not dumpable, no core file"},
		{"ok/one", HardenReport{NoCoreFile: true}, "no core file"},
		{"ok/none", HardenReport{}, "no hardening"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.String(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
