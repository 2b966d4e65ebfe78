// Package procgroup runs the programs parley-keyd starts (a witness
// command, systemctl) so that each ends by its deadline, whole: the program
// and every process it started, however it behaves (DESIGN.md property 13).
//
// A child runs in a process group of its own. When its context ends, the
// whole group is killed with SIGKILL (a child may ignore SIGTERM); when the
// child itself exits, whatever it left running in its group is killed too,
// before the child is reaped, so the group's id cannot meanwhile name
// another group. Its pipes are waited for at most a bounded time after
// either (exec.Cmd.WaitDelay): a process that left the group (setsid) and
// holds the child's output cannot hold up the caller.
//
// The attack it stops: a witness_command whose child kept its stdout open
// (ssh in a wrapper script does this) made exec.Cmd.Wait wait for that pipe
// for ever, and with it the daemon's stop.
package procgroup

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// WaitDelay bounds the wait for a child's pipes once it exited or its
// context ended.
const WaitDelay = time.Second

// Command is exec.CommandContext for a child that must end whole when ctx
// ends: it will run in a process group of its own, killed whole with
// SIGKILL when ctx ends, and its pipes are waited for at most WaitDelay.
// Run it with Run or Output, which also end what it leaves behind.
func Command(ctx context.Context, name string, arg ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, arg...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	cmd.WaitDelay = WaitDelay
	return cmd
}

// Run starts cmd, made by Command, and waits for it. Once the child exits,
// every process left in its group is killed before the child is reaped.
// The error is cmd.Wait's: an *exec.ExitError, ctx's error after a kill
// at the deadline, or exec.ErrWaitDelay when the child exited 0 but a
// process outside its group still held its output.
func Run(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil || !cmd.SysProcAttr.Setpgid || cmd.Cancel == nil {
		return errors.New("procgroup: the command was not made by procgroup.Command")
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	pid := cmd.Process.Pid
	// Wait for the child to exit without reaping it: while it is a
	// zombie, its pid, which is its group's id, cannot be reused, so the
	// kill below reaches only what it left behind. The context's end is
	// handled meanwhile by cmd.Cancel, which exec calls from its own
	// goroutine.
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			break
		}
	}
	killGroup(pid)
	return cmd.Wait()
}

// Output is Run with the child's standard output returned, at most max
// bytes of it (the rest is read and dropped).
func Output(cmd *exec.Cmd, max int) ([]byte, error) {
	out := &Limited{Max: max}
	cmd.Stdout = out
	err := Run(cmd)
	return out.Bytes(), err
}

// killGroup sends SIGKILL to the process group pgid. A group already gone
// is not an error.
func killGroup(pgid int) error {
	if pgid <= 1 {
		return errors.New("procgroup: no process group to kill")
	}
	if err := unix.Kill(-pgid, unix.SIGKILL); err != nil && err != unix.ESRCH {
		return err
	}
	return nil
}

// Limited is an io.Writer that keeps the first Max bytes written to it and
// drops the rest, so that a child's output is bounded in memory.
type Limited struct {
	Max int
	b   bytes.Buffer
}

func (l *Limited) Write(p []byte) (int, error) {
	if room := l.Max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// Bytes returns what was kept.
func (l *Limited) Bytes() []byte { return l.b.Bytes() }

// String returns what was kept as a string.
func (l *Limited) String() string { return l.b.String() }
