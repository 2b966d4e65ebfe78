package main

import (
	"bytes"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestIssueCountdownOnTerminal runs issue with its stderr on a real
// terminal: while the request waits, the terminal shows the match code and
// a countdown redrawn in place every second, and when the human approves
// the countdown's line is cleared. (On a pipe the same facts are one line;
// testdata/script/approvals.txtar pins that form.)
func TestIssueCountdownOnTerminal(t *testing.T) {
	d := startDaemon(t, journeyPolicy, nil)
	keyPath, _ := writeAgentKey(t, t.TempDir())
	env := cliEnv(t, d.sock, keyPath)

	master, slave := openPTY(t)
	defer master.Close()
	cmd := exec.Command(cliBinary(t), "issue", "--can", "mail.read", "--exp", "10m")
	cmd.Env = append(env, "TERM=xterm")
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, slave
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var term lockedBuffer
	copied := make(chan struct{})
	go func() { io.Copy(&term, master); close(copied) }()

	codeRE := regexp.MustCompile(`waiting for approval of (r_[a-z0-9]+) on terminal\r?\nparley-grant: match code: \x1b\[1m(\d\d)\x1b\[0m  \(the approver must enter this code\)\r?\n`)
	var m []string
	waitUntil(t, "the match code on the terminal", func() bool {
		m = codeRE.FindStringSubmatch(term.String())
		return m != nil
	})
	// The countdown is redrawn in place: two different values, each at the
	// start of a cleared line.
	tickRE := regexp.MustCompile(`\r\x1b\[K  (\d+:\d\d) left to approve  \(Ctrl-C withdraws the request\)`)
	waitUntil(t, "two different countdown values", func() bool {
		seen := map[string]bool{}
		for _, v := range tickRE.FindAllStringSubmatch(term.String(), -1) {
			seen[v[1]] = true
		}
		return len(seen) >= 2
	})
	if first := tickRE.FindStringSubmatch(term.String()); first[1] != "2:00" && first[1] != "1:59" {
		t.Errorf("the countdown starts at %s, want the approval timeout of 2:00", first[1])
	}
	if strings.Contains(term.String(), "\n  ") {
		t.Error("a countdown value went on a new line instead of being redrawn")
	}

	cli(t, env, 0, "approve", m[1], "--code", m[2])
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("issue: %v\n%s", err, term.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("issue did not return after the approval")
	}
	<-copied
	out := term.String()
	if !regexp.MustCompile(`left to approve  \(Ctrl-C withdraws the request\)\r\x1b\[Kparley-grant: issued grant `).MatchString(out) {
		t.Errorf("the countdown's line was not cleared before the result:\n%q", out)
	}
	if !strings.HasPrefix(stdout.String(), "pg1.") {
		t.Errorf("stdout %q", stdout.String())
	}
}
