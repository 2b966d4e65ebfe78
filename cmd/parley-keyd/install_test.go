package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testpeer"
)

// TestMakeInstall installs into a DESTDIR and checks what landed where, and
// that systemd-sysusers accepts the sysusers.d file.
func TestMakeInstall(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		testpeer.Unavailable(t, "needs make")
	}
	dest := t.TempDir()
	cmd := exec.Command("make", "-C", "../..", "install", "DESTDIR="+dest, "PREFIX=/usr")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	for _, f := range []string{
		"usr/bin/parley-keyd", "usr/bin/parley-grant",
		"usr/lib/systemd/system/parley-keyd.service", "usr/lib/systemd/system/parley-keyd.socket",
		"usr/lib/sysusers.d/parley-keyd.conf", "usr/lib/tmpfiles.d/parley-keyd.conf",
		"usr/lib/systemd/user/parley-grant-approver.service",
		"usr/share/man/man1/parley-grant.1", "usr/share/man/man8/parley-keyd.8",
		"usr/share/bash-completion/completions/parley-grant", "usr/share/zsh/site-functions/_parley-keyd",
		"usr/share/fish/vendor_completions.d/parley-grant.fish",
	} {
		if _, err := os.Stat(filepath.Join(dest, f)); err != nil {
			t.Errorf("not installed: %s", f)
		}
	}
	unit, _ := os.ReadFile(filepath.Join(dest, "usr/lib/systemd/system/parley-keyd.service"))
	for _, want := range []string{"User=parley-keyd", "ExecStart=/usr/bin/parley-keyd serve", "NoNewPrivileges=yes",
		"ProtectSystem=strict", "PrivateTmp=yes", "StateDirectory=parley-keyd", "RuntimeDirectory=parley-keyd", "LimitCORE=0",
		"Type=notify", "NotifyAccess=main", "WatchdogSec=", "--config /etc/parley-keyd/config.toml"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("service unit lacks %q", want)
		}
	}
	if strings.Contains(string(unit), "@BINDIR@") {
		t.Error("service unit still holds @BINDIR@")
	}
	sock, _ := os.ReadFile(filepath.Join(dest, "usr/lib/systemd/system/parley-keyd.socket"))
	if !strings.Contains(string(sock), "SocketMode=0660") || !strings.Contains(string(sock), "ListenStream=/run/parley-keyd/agent.sock") {
		t.Errorf("socket unit:\n%s", sock)
	}
	if su, err := exec.LookPath("systemd-sysusers"); err == nil {
		out, err := exec.Command(su, "--root="+dest, "--dry-run", filepath.Join(dest, "usr/lib/sysusers.d/parley-keyd.conf")).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Creating user 'parley-keyd'") {
			t.Errorf("systemd-sysusers: %v\n%s", err, out)
		}
	}
}
