package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testtransit"
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
	// The socket accepts before the daemon has written its start record:
	// wait for it, so that SIGTERM comes to a running daemon.
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(kindsOf(auditRecords(t, b.state)), "start") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
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

// keyLines returns status's lines about the key, hints included.
func keyLines(out string) []string {
	var lines []string
	in := false
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 2 && (f[0] == "ok" || f[0] == "warn" || f[0] == "fail"):
			in = f[1] == "key"
		case len(f) >= 1 && f[0] == "hint:":
		default:
			in = false
		}
		if in {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestStatusAndInitKnowTheKeyService: in a transit set-up, status said "no
// principal key" and suggested an init that made a file key and replaced
// principal.pub, after which serve refused. Now status names the key in
// the key service, and a file init refuses to replace the principal.
func TestStatusAndInitKnowTheKeyService(t *testing.T) {
	b, _, principal := transitRun(t)
	cfgPath := filepath.Join(b.state, "config.toml")
	r := b.keyd(false, "status", "--state", b.state, "--config", cfgPath, "--skip", "socket,audit,units,lock")
	lines := keyLines(r.stdout)
	joined := strings.Join(lines, "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[0], "ok") || !strings.Contains(joined, principal) || !strings.Contains(joined, "transit") {
		t.Fatalf("status's key check in a transit set-up:\n%s", r.stdout)
	}
	if strings.Contains(r.stdout, "init --state") || strings.Contains(r.stdout, "init\n") {
		t.Fatalf("status suggests an init that would make a file key:\n%s", r.stdout)
	}
	// A principal.key left on the disk is worth a warning.
	pubBefore, _ := os.ReadFile(filepath.Join(b.state, "principal.pub"))

	for _, args := range [][]string{
		{"init", "--state", b.state},
		{"init", "--state", b.state, "--config-dir", b.state},
	} {
		r = b.keyd(false, args...)
		if r.code == 0 || !strings.Contains(r.stderr, "--backend transit") {
			t.Fatalf("%s in a transit set-up: %+v", strings.Join(args, " "), r)
		}
		if _, err := os.Stat(filepath.Join(b.state, "principal.key")); err == nil {
			t.Fatalf("%s made a file key in a transit set-up", strings.Join(args, " "))
		}
		if pub, _ := os.ReadFile(filepath.Join(b.state, "principal.pub")); string(pub) != string(pubBefore) {
			t.Fatalf("%s replaced principal.pub", strings.Join(args, " "))
		}
	}
	// Without the configuration that says so, principal.pub alone still
	// names a principal whose key is elsewhere: init does not replace it.
	os.Rename(cfgPath, cfgPath+".away")
	r = b.keyd(false, "init", "--state", b.state)
	if r.code == 0 || !strings.Contains(r.stderr, "principal.pub") {
		t.Fatalf("init with principal.pub and no principal.key: %+v", r)
	}
	if pub, _ := os.ReadFile(filepath.Join(b.state, "principal.pub")); string(pub) != string(pubBefore) {
		t.Fatal("init replaced principal.pub")
	}
	if _, err := os.Stat(cfgPath); err == nil {
		t.Fatal("the refused init wrote a configuration")
	}
	os.Rename(cfgPath+".away", cfgPath)
	// The key service's own init still works: it uses the existing key.
	r = b.keyd(true, "init", "--backend", "transit", "--state", b.state, "--token-file", filepath.Join(b.dir, "admin-token"))
	if strings.TrimSpace(r.stdout) != principal {
		t.Fatalf("init --backend transit again: %+v", r)
	}
}

// TestInitTransitAsRootForTheDaemonUser: run as root, init --backend
// transit ignored --user and left root-owned folders the daemon could not
// read, and with --import it demanded a chown root that breaks the daemon.
// Now the state folder and principal.pub are the daemon user's, the
// configuration root's with the daemon's group, and the daemon serves.
func TestInitTransitAsRootForTheDaemonUser(t *testing.T) {
	testpeer.RequirePeers(t)
	for _, importKey := range []bool{false, true} {
		name := "create"
		if importKey {
			name = "import"
		}
		t.Run(name, func(t *testing.T) {
			bin := binaries(t)
			daemon := osUser(t, e2eDaemonUser)
			osUser(t, e2eAgentUser)
			osUser(t, e2eHumanUser)
			base := testpeer.SharedDir(t)
			etc, state, run := filepath.Join(base, "etc"), filepath.Join(base, "state"), filepath.Join(base, "run")
			os.Mkdir(run, 0o755)
			os.Chown(run, int(daemon.uid), int(daemon.gid))
			sock := filepath.Join(run, "agent.sock")
			srv := testtransit.New()
			defer srv.Close()
			srv.AddToken("s.admin", testtransit.Token{})
			srv.AddToken("s.daemon", testtransit.Token{})
			admin := filepath.Join(base, "admin-token")
			os.WriteFile(admin, []byte("s.admin\n"), 0o600)
			daemonTok := filepath.Join(base, "bao-token")
			os.WriteFile(daemonTok, []byte("s.daemon\n"), 0o600)
			os.Chown(daemonTok, int(daemon.uid), int(daemon.gid))
			root := ids{0, 0}
			runKeyd := func(who ids, args ...string) result {
				cmd := testpeer.RunAs(who.uid, who.gid, nil, filepath.Join(bin, "parley-keyd"), args...)
				cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
				var out, errb strings.Builder
				cmd.Stdout, cmd.Stderr = &out, &errb
				err := cmd.Run()
				code := 0
				if ee, ok := err.(*exec.ExitError); ok {
					code = ee.ExitCode()
				} else if err != nil {
					t.Fatal(err)
				}
				return result{out.String(), errb.String(), code}
			}
			var principal string
			if importKey {
				r := runKeyd(root, "init", "--user", e2eDaemonUser, "--state", state, "--config-dir", etc, "--socket", sock,
					"--socket-group", "", "--agent-user", e2eAgentUser, "--approver-user", e2eHumanUser)
				if r.code != 0 {
					t.Fatalf("file init: %+v", r)
				}
				principal = strings.TrimSpace(r.stdout)
				os.Remove(filepath.Join(etc, "config.toml"))
			} else {
				// First run: no configuration yet, so init writes one
				// with a [key.transit] table to fill in.
				r := runKeyd(root, "init", "--backend", "transit", "--user", e2eDaemonUser, "--state", state, "--config-dir", etc,
					"--socket", sock, "--agent-user", e2eAgentUser, "--approver-user", e2eHumanUser)
				if r.code == 0 || !strings.Contains(r.stderr, "[key.transit]") {
					t.Fatalf("init without a configuration: %+v", r)
				}
			}
			cfg := "socket = \"" + sock + "\"\nsocket_mode = \"0666\"\n\n[access]\nagent_users = [\"" + e2eAgentUser + "\"]\napprover_users = [\"" + e2eHumanUser + "\"]\n" +
				"\n[key]\nbackend = \"transit\"\n[key.transit]\naddresses = [\"" + srv.URL + "\"]\ntoken_file = \"" + daemonTok + "\"\ntimeout = \"1s\"\n"
			if !importKey {
				old, err := os.ReadFile(filepath.Join(etc, "config.toml"))
				if err != nil {
					t.Fatal(err)
				}
				text := string(old)
				text = strings.Replace(text, `addresses = ["https://bao.example:8200"]`, `addresses = ["`+srv.URL+`"]`, 1)
				text = strings.Replace(text, `token_file = "bao-token"`, `token_file = "`+daemonTok+`"`, 1)
				cfg = text
			}
			cfgPath := filepath.Join(etc, "config.toml")
			os.WriteFile(cfgPath, []byte(cfg), 0o640)
			os.Chown(cfgPath, 0, int(daemon.gid))
			args := []string{"init", "--backend", "transit", "--user", e2eDaemonUser, "--state", state, "--config-dir", etc, "--token-file", admin}
			if importKey {
				args = append(args, "--import")
			}
			r := runKeyd(root, args...)
			if r.code != 0 {
				t.Fatalf("init --backend transit as root: %+v", r)
			}
			if importKey && strings.TrimSpace(r.stdout) != principal {
				t.Fatalf("--import changed the principal from %s to %s", principal, r.stdout)
			}
			for _, c := range []struct {
				path     string
				uid, gid uint32
				mode     os.FileMode
			}{
				{state, daemon.uid, daemon.gid, 0o700},
				{filepath.Join(state, "principal.pub"), daemon.uid, daemon.gid, 0},
				{etc, 0, daemon.gid, 0o750},
				{filepath.Join(etc, "policy.toml"), 0, daemon.gid, 0o640},
			} {
				fi, err := os.Stat(c.path)
				if err != nil {
					t.Fatal(err)
				}
				st := fi.Sys().(*syscall.Stat_t)
				if st.Uid != c.uid || st.Gid != c.gid || (c.mode != 0 && fi.Mode().Perm() != c.mode) {
					t.Errorf("%s is %d:%d mode %04o, want %d:%d mode %04o", c.path, st.Uid, st.Gid, fi.Mode().Perm(), c.uid, c.gid, c.mode)
				}
			}
			if importKey {
				os.Rename(filepath.Join(state, "principal.key"), filepath.Join(base, "offline.key"))
			}
			// The daemon, as its own user, serves with what init made.
			cmd := testpeer.RunAs(daemon.uid, daemon.gid, nil, filepath.Join(bin, "parley-keyd"), "serve", "--state", state)
			cmd.Env = []string{"PATH=/usr/bin:/bin", "PARLEY_KEYD_CONFIG_DIR=" + etc}
			log := &syncBuffer{}
			cmd.Stderr = log
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() {
				cmd.Process.Signal(syscall.SIGTERM)
				cmd.Wait()
			}()
			waitForSocket(t, sock, log)
			deadline := time.Now().Add(15 * time.Second)
			for !strings.Contains(kindsOf(auditRecords(t, state)), "start") && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if !strings.Contains(kindsOf(auditRecords(t, state)), "start") {
				t.Fatalf("the daemon wrote no start record:\n%s", log)
			}
		})
	}
}
