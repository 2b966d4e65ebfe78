package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testtransit"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
)

// These tests run the real daemon against a key service that is down,
// hangs or is hostile (issue 20 item 4), and a start that fails after the
// log was opened (issue 21 item 7).

// transitRun is a backendRun whose principal key was made in srv by init.
func transitRun(t *testing.T) (*backendRun, *testtransit.Server, string) {
	t.Helper()
	b := newBackendRun(t)
	srv := testtransit.New()
	t.Cleanup(srv.Close)
	srv.AddToken("s.admin", testtransit.Token{})
	srv.AddToken("s.daemon", testtransit.Token{})
	os.WriteFile(filepath.Join(b.dir, "admin-token"), []byte("s.admin\n"), 0o600)
	tokenFile := filepath.Join(b.dir, "bao-token")
	os.WriteFile(tokenFile, []byte("s.daemon\n"), 0o600)
	b.writeConfig("\n[key]\nbackend = \"transit\"\n[key.transit]\naddresses = [\"" + srv.URL + "\"]\ntoken_file = \"" + tokenFile + "\"\ntimeout = \"1s\"\n")
	r := b.keyd(true, "init", "--backend", "transit", "--state", b.state, "--token-file", filepath.Join(b.dir, "admin-token"))
	return b, srv, strings.TrimSpace(r.stdout)
}

// auditRecords reads the log's records.
func auditRecords(t *testing.T, state string) []audit.Record {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(state, "audit.log"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var recs []audit.Record
	for _, line := range strings.Split(string(data), "\n") {
		var r audit.Record
		if line != "" && json.Unmarshal([]byte(line), &r) == nil {
			recs = append(recs, r)
		}
	}
	return recs
}

func kindsOf(recs []audit.Record) string {
	var k []string
	for _, r := range recs {
		if r.Checkpoint != nil {
			k = append(k, r.Kind+"/"+r.Checkpoint.Reason)
			continue
		}
		k = append(k, r.Kind)
	}
	return strings.Join(k, " ")
}

// stop sends SIGTERM and waits for the daemon to exit.
func (b *backendRun) stop() {
	b.t.Helper()
	b.proc.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- b.proc.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		b.proc.Process.Kill()
		b.t.Fatalf("the daemon did not stop within 30 s of SIGTERM:\n%s", b.log)
	}
}

// TestKeyServiceDownAtStart: the daemon starts while its key service is
// down or hangs, answers HELLO, refuses GRANT as unavailable with a retry,
// writes its open checkpoint once the service answers, and records a stop
// checkpoint it could not sign. Before: serve exited ("audit log: sign
// checkpoint: transit key service unavailable"), and after SIGTERM with the
// service down the stop checkpoint was silently missing.
func TestKeyServiceDownAtStart(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault testtransit.Fault
	}{
		{"down", testtransit.Fault{Status: 503}},
		{"hanging", testtransit.Fault{Delay: time.Minute}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, srv, principal := transitRun(t)
			// One clean run first, so that the log exists and ends with
			// a stop checkpoint.
			b.serve()
			b.mustGrant(b.client(), principal)
			b.stop()
			before := auditRecords(t, b.state)

			srv.SetFault(&tc.fault)
			b.serve()
			c := b.client()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			m, err := c.Hello(ctx)
			if err != nil {
				t.Fatalf("HELLO with the key service %s: %v\n%s", tc.name, err, b.log)
			}
			if m.Principal != principal {
				t.Fatalf("HELLO names principal %s, want %s", m.Principal, principal)
			}
			b.wantUnavailable(c)
			b.alive()
			if got := auditRecords(t, b.state); len(got) != len(before) {
				t.Fatalf("records were added before the open checkpoint could be signed: %s", kindsOf(got[len(before):]))
			}

			// The service comes back: the open checkpoint and the start
			// record appear, and grants are issued.
			srv.SetFault(nil)
			deadline := time.Now().Add(20 * time.Second)
			var added []audit.Record
			for {
				added = auditRecords(t, b.state)[len(before):]
				if len(added) >= 2 || time.Now().After(deadline) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if k := kindsOf(added); !strings.HasPrefix(k, "checkpoint/open start") {
				t.Fatalf("records once the service answers: %q, want the open checkpoint and the start record\n%s", k, b.log)
			}
			b.mustGrant(c, principal)

			// Down again, then SIGTERM: the log's last record says that
			// the stop checkpoint could not be signed.
			srv.SetFault(&testtransit.Fault{Status: 503})
			b.stop()
			recs := auditRecords(t, b.state)
			last := recs[len(recs)-1]
			if last.Kind != audit.KindUnsigned || !strings.Contains(last.Message, "stop checkpoint could not be signed") || !strings.Contains(last.Message, "503") {
				t.Fatalf("last record %+v; the run: %s", last, kindsOf(recs[len(before):]))
			}
			if recs[len(recs)-2].Kind != audit.KindStop {
				t.Fatalf("the stop record is not before it: %s", kindsOf(recs[len(before):]))
			}

			// The next start records the gap; the log verifies.
			srv.SetFault(nil)
			b.serve()
			b.mustGrant(b.client(), principal)
			b.stop()
			if !strings.Contains(kindsOf(auditRecords(t, b.state)), "unsigned checkpoint/open recovered start") {
				t.Fatalf("after the unsigned stop: %s", kindsOf(auditRecords(t, b.state)))
			}
			b.keyd(true, "audit", "verify", "--state", b.state)
		})
	}
}

// TestFailedStartWritesNoOpenCheckpoint: a serve that cannot take its
// socket leaves the log as it was (issue 21 item 7: the failed start still
// wrote an open checkpoint).
func TestFailedStartWritesNoOpenCheckpoint(t *testing.T) {
	b := newBackendRun(t)
	u, _ := user.Current()
	b.keyd(true, "init", "--state", b.state, "--socket", b.sock, "--agent-user", u.Username, "--approver-user", u.Username)
	os.WriteFile(filepath.Join(b.state, "policy.toml"), []byte(backendPolicy), 0o640)
	b.serve()
	b.stop()
	before, err := os.ReadFile(filepath.Join(b.state, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	// Something that is not a socket at the socket's path: serve refuses
	// to replace it.
	os.Remove(b.sock)
	if err := os.WriteFile(b.sock, []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		r := b.keyd(false, "serve", "--state", b.state)
		if r.code == 0 || !strings.Contains(r.stderr, "is not a socket") {
			t.Fatalf("serve with the socket's path taken: %+v", r)
		}
	}
	after, _ := os.ReadFile(filepath.Join(b.state, "audit.log"))
	if string(after) != string(before) {
		t.Fatalf("a start that failed wrote to the log:\n%s", after[len(before):])
	}
	// And the next real start finds a log that stopped cleanly.
	os.Remove(b.sock)
	b.serve()
	b.stop()
	if k := kindsOf(auditRecords(t, b.state)); strings.Contains(k, "recovered") {
		t.Fatalf("records %s", k)
	}
}

// vmHWM reads a process's peak resident size in KiB.
func vmHWM(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no VmHWM in /proc/PID/status")
	return 0
}

// TestHostileKeyServiceKeepsTheDaemonSmall: a key service that streams an
// endless signature or error took the daemon from 18 MiB to 1.4–2.3 GiB
// within one deadline. The daemon's peak resident size stays small, and
// every such grant is refused as unavailable.
func TestHostileKeyServiceKeepsTheDaemonSmall(t *testing.T) {
	b, srv, principal := transitRun(t)
	b.serve()
	c := b.client()
	b.mustGrant(c, principal)
	base := vmHWM(t, b.proc.Process.Pid)
	for _, f := range []testtransit.Fault{
		{Path: "/sign/", Endless: true},
		{Path: "/sign/", Endless: true, Status: 500},
		{Path: "/sign/", Endless: true, Status: 403},
	} {
		srv.SetFault(&f)
		for range 3 {
			b.wantUnavailable(c)
		}
	}
	srv.SetFault(nil)
	b.mustGrant(c, principal)
	peak := vmHWM(t, b.proc.Process.Pid)
	t.Logf("daemon VmHWM %d KiB after a grant, %d KiB after 9 endless replies (%d MiB streamed at it)", base, peak, srv.Streamed.Load()>>20)
	if peak > base+32<<10 {
		t.Fatalf("the daemon's peak resident size grew from %d KiB to %d KiB", base, peak)
	}
}

// TestGrantStatusShowsKeyServiceCause: parley-grant status said "it does
// not answer" for every key service error, a 403 (the service answers and
// refuses the daemon's token) too, and the cause was cut before the status.
func TestGrantStatusShowsKeyServiceCause(t *testing.T) {
	b, srv, principal := transitRun(t)
	b.serve()
	b.mustGrant(b.client(), principal)
	for _, tc := range []struct {
		fault testtransit.Fault
		want  []string
	}{
		{testtransit.Fault{Status: 403}, []string{"it answers but refuses", "HTTP 403", "so grants are refused as unavailable"}},
		{testtransit.Fault{Status: 503}, []string{"it does not answer", "HTTP 503"}},
		{testtransit.Fault{Delay: time.Minute}, []string{"it does not answer", "deadline"}},
		{testtransit.Fault{Redirect: "http://192.0.2.1:8200"}, []string{"it does not answer", "redirect (307)", "not followed"}},
	} {
		srv.SetFault(&tc.fault)
		s := b.status()
		line := ""
		for _, l := range strings.Split(s, "\n") {
			if strings.HasPrefix(l, "principal key:") {
				line = l
			}
		}
		for _, w := range tc.want {
			if !strings.Contains(line, w) {
				t.Errorf("fault %+v: status says %q, want %q in it", tc.fault, line, w)
			}
		}
	}
	srv.SetFault(nil)
}
