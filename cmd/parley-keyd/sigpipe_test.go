package main

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
)

// startStderr runs the daemon as its own user with its stderr going to w,
// and waits until it accepts.
func (e *e2e) startStderr(w *os.File) {
	e.t.Helper()
	cmd := testpeer.RunAs(e.daemon.uid, e.daemon.gid, nil, filepath.Join(e.bin, "parley-keyd"), "serve", "--state", e.state)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "PARLEY_KEYD_CONFIG_DIR=" + e.etc}
	cmd.Stderr = w
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.proc = cmd
	e.stderr = &syncBuffer{}
	e.exited = make(chan error, 1)
	go func() { e.exited <- cmd.Wait() }()
	e.t.Cleanup(func() {
		if e.proc == cmd {
			cmd.Process.Kill()
			<-e.exited
		}
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case err := <-e.exited:
			e.proc = nil // reaped: the cleanup must not wait for it again
			e.t.Fatalf("daemon exited: %v", err)
		default:
		}
		if c, err := net.Dial("unix", e.sock); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatal("daemon did not start accepting")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLimitsStderrReaderGone is item 8 of the review: whoever reads the
// daemon's stderr goes away, and then an agent makes the daemon log a line
// by closing its connection mid-frame. The daemon must go on serving, and
// stop cleanly with its stop record.
func TestLimitsStderrReaderGone(t *testing.T) {
	e := newE2E(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	e.startStderr(w)
	w.Close()
	// Read the start-up lines, then go away.
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("daemon stderr: %v", err)
		}
		if strings.Contains(line, "listening on") {
			break
		}
	}
	r.Close()
	// Any agent can make the daemon log: close in the middle of a frame.
	// Each round's log line is written by the time a later round is
	// served, or never.
	for i := 0; i < 3; i++ {
		nc, err := net.Dial("unix", e.sock)
		if err != nil {
			t.Fatalf("round %d after the log reader left: %v", i, err)
		}
		nc.Write([]byte(`{"parley":1,"id":"x","ve`))
		nc.Close()
		if res := e.try(e.agent, "parley-grant", "status"); res.code != 0 {
			t.Fatalf("status in round %d after the log reader left: exit %d, %s", i, res.code, res.stderr)
		}
	}
	select {
	case err := <-e.exited:
		e.proc = nil
		t.Fatalf("the daemon died when its log reader went away: %v", err)
	default:
	}
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Errorf("daemon exit: %v", err)
	}
	// The run's last record is its stop record (the log may seal it with a
	// checkpoint of its own after it).
	var last audit.Record
	for _, r := range e.auditRecords() {
		if r.Kind != audit.KindCheckpoint {
			last = r
		}
	}
	if last.Kind != audit.KindStop {
		t.Errorf("last audit record: %+v, want a stop record", last)
	}
}
