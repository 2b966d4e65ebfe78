package procgroup

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
)

// TestRunEndsWhole: children that would hold up their caller (issue 20
// item 6) end by their deadline, and nothing of their process group
// outlives Run.
func TestRunEndsWhole(t *testing.T) {
	const deadline = 2 * time.Second
	tests := []struct {
		name  string
		sh    string
		stdin []byte
		// quick: the child exits by itself, so Run returns well before
		// the deadline.
		quick bool
		ok    bool
	}{
		{name: "ok/grandchild-holds-stdout", sh: `sleep 1000 & echo ok`, quick: true, ok: true},
		{name: "ok/grandchild-holds-stderr", sh: `sleep 1000 >/dev/null & echo ok`, quick: true, ok: true},
		{name: "fail/hangs-with-grandchild", sh: `sleep 1000 & sleep 1000`},
		{name: "fail/ignores-sigterm", sh: `trap '' TERM HUP INT; sleep 1000 & while :; do sleep 1; done`},
		// 1 MiB fills the pipe: the writer blocks until the child dies.
		{name: "fail/never-reads-stdin", sh: `exec sleep 1000`, stdin: bytes.Repeat([]byte("x"), 1<<20)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			cmd := Command(ctx, "/bin/sh", "-c", tt.sh)
			if tt.stdin != nil {
				cmd.Stdin = bytes.NewReader(tt.stdin)
			}
			var out Limited
			out.Max = 4096
			cmd.Stdout, cmd.Stderr = &out, &out
			start := time.Now()
			err := Run(cmd)
			took := time.Since(start)
			pgid := cmd.Process.Pid
			t.Logf("took %v, err %v, output %q", took.Round(time.Millisecond), err, out.String())
			if limit := deadline + WaitDelay + 500*time.Millisecond; took > limit {
				t.Errorf("Run took %v, more than %v", took, limit)
			}
			if tt.quick && took > WaitDelay {
				t.Errorf("Run took %v for a child that exits at once", took)
			}
			if (err == nil) != tt.ok {
				t.Errorf("err = %v, want ok=%v", err, tt.ok)
			}
			if left := testpeer.WaitGroupGone(pgid, time.Second); len(left) > 0 {
				for _, pid := range left {
					syscall.Kill(pid, syscall.SIGKILL)
				}
				t.Errorf("processes %v of group %d outlived Run", left, pgid)
			}
		})
	}
}

// TestRunLeftGroup: a process that left the child's group (setsid) and
// holds its output cannot be killed with the group, but it holds up Run
// for at most WaitDelay.
func TestRunLeftGroup(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid")
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := Command(ctx, "/bin/sh", "-c", `setsid sh -c 'echo $$ > "$1"; exec sleep 1000' x "$1" & while ! test -s "$1"; do sleep 0.01; done; echo ok`, "x", pidFile)
	var out Limited
	out.Max = 4096
	cmd.Stdout = &out
	start := time.Now()
	err := Run(cmd)
	took := time.Since(start)
	b, _ := os.ReadFile(pidFile)
	if pid, _ := strconv.Atoi(strings.TrimSpace(string(b))); pid > 1 {
		defer syscall.Kill(pid, syscall.SIGKILL)
	}
	if !errors.Is(err, exec.ErrWaitDelay) {
		t.Errorf("err = %v, want exec.ErrWaitDelay", err)
	}
	if took > WaitDelay+2*time.Second {
		t.Errorf("Run took %v", took)
	}
	if !strings.Contains(out.String(), "ok") {
		t.Errorf("output %q", out.String())
	}
}

// TestRunRefusesPlainCommand: Run needs what Command sets up.
func TestRunRefusesPlainCommand(t *testing.T) {
	if err := Run(exec.Command("/bin/true")); err == nil {
		t.Error("Run ran a command not made by Command")
	}
}

func TestLimited(t *testing.T) {
	l := Limited{Max: 5}
	for _, s := range []string{"abc", "def", "ghi"} {
		if n, err := l.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if l.String() != "abcde" {
		t.Errorf("kept %q", l.String())
	}
}
