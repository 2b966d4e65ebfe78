package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestE2EWatchdogAbort is issue 21's item 4: systemd's watchdog sends
// SIGABRT to a daemon that stopped pinging, and the Go runtime answered with
// every goroutine's stack on stderr, a few hundred lines in the journal at
// each wedge. The daemon must stop at once with one line, which names the
// file that holds the stacks, and that file must hold them, for the daemon's
// user alone.
func TestE2EWatchdogAbort(t *testing.T) {
	e := newE2E(t)
	e.start()
	// The wedge as the watchdog finds it: stopped, then SIGABRT and SIGCONT.
	e.proc.Process.Signal(syscall.SIGSTOP)
	e.proc.Process.Signal(syscall.SIGABRT)
	e.proc.Process.Signal(syscall.SIGCONT)
	select {
	case <-e.exited:
		e.proc = nil
	case <-time.After(15 * time.Second):
		t.Fatal("the daemon did not exit on SIGABRT")
	}
	var after []string
	for _, l := range strings.Split(strings.TrimSpace(e.stderr.String()), "\n") {
		if strings.Contains(l, "SIGABRT") || len(after) > 0 {
			after = append(after, l)
		}
	}
	dump := filepath.Join(e.state, watchdogDumpName)
	if len(after) != 1 || !strings.Contains(after[0], dump) {
		t.Fatalf("after SIGABRT the daemon wrote %d lines, want one that names %s:\n%s", len(after), dump, strings.Join(after[:min(len(after), 20)], "\n"))
	}
	fi, err := os.Stat(dump)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != e.daemon.uid {
		t.Errorf("%s is mode %04o, uid %d; want 0600, the daemon's", dump, fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Uid)
	}
	b, _ := os.ReadFile(dump)
	if !strings.Contains(string(b), "goroutine ") || !strings.Contains(string(b), "main.serve") {
		t.Errorf("%s holds no goroutine stacks:\n%.400s", dump, b)
	}
}

// encryptedRSSBound is what a daemon with an encrypted key may hold resident
// once it serves (KiB): far below the 256 MiB of age's scrypt work, above the
// 15 MiB a daemon uses at rest.
const encryptedRSSBound = 64 << 10

// TestE2EEncryptedKeyMemory is issue 21's item 3: unwrapping a key
// encrypted with age's default scrypt work factor allocates 256 MiB, which
// stayed resident until Go's forced collection two minutes later. Soon after
// the daemon serves, its resident memory must be back near its size at rest.
func TestE2EEncryptedKeyMemory(t *testing.T) {
	e := newE2E(t)
	pass := filepath.Join(e.base, "passphrase")
	// As an admin keeps it: root's, readable by the daemon's group.
	if err := os.WriteFile(pass, []byte("a passphrase for the test\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	os.Chown(pass, 0, int(e.daemon.gid))
	e.state = filepath.Join(e.base, "state-encrypted")
	if err := os.Mkdir(e.state, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chown(e.state, int(e.daemon.uid), int(e.daemon.gid))
	e.as(ids{0, 0}, 0, "parley-keyd", "init", "--state", e.state, "--config-dir", e.etc, "--passphrase-file", pass,
		"--agent-user", e2eAgentUser, "--approver-user", e2eHumanUser)
	if b, _ := os.ReadFile(filepath.Join(e.state, "principal.key")); !strings.HasPrefix(string(b), "-----BEGIN AGE ENCRYPTED FILE-----") {
		t.Fatalf("init did not encrypt the key:\n%.80s", b)
	}
	e.start("--passphrase-file", pass)
	pid := e.proc.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	for {
		rss := procStatus(t, pid, "VmRSS")
		if rss < encryptedRSSBound {
			t.Logf("VmRSS %d KiB, peak VmHWM %d KiB", rss, procStatus(t, pid, "VmHWM"))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the daemon serves it holds %d KiB resident (peak %d KiB), want under %d KiB",
				rss, procStatus(t, pid, "VmHWM"), encryptedRSSBound)
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.as(e.agent, 0, "parley-grant", "status")
}
