package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
)

// TestMakeInstall installs into a DESTDIR and checks what landed where, that
// systemd-sysusers accepts the sysusers.d file, and that every
// Documentation= of the units names a page that was installed; then
// uninstalls and checks that exactly what install put is gone.
func TestMakeInstall(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		testpeer.Unavailable(t, "needs make")
	}
	testpeer.LockTree(t)
	dest := t.TempDir()
	// Files of other packages in the same folders, which uninstall must
	// leave alone.
	others := []string{"usr/bin/parley-other", "usr/share/man/man8/parley-keyd-other.8", "usr/share/man/man5/other.conf.5",
		"usr/lib/systemd/system/other.service", "usr/share/bash-completion/completions/parley"}
	for _, f := range others {
		os.MkdirAll(filepath.Dir(filepath.Join(dest, f)), 0o755)
		if err := os.WriteFile(filepath.Join(dest, f), []byte("not ours\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(dest, "usr/share/man/man1"), 0o755)
	before := treeFiles(t, dest)
	beforeDirs := treeDirs(t, dest)
	// As sudo make install runs after make build: secure_path has no Go
	// (issue 21, item 5). make build runs first, with Go.
	if out, err := exec.Command("make", "-C", "../..", "build").CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	noGo := append(os.Environ(), "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
	if _, err := exec.LookPath("/usr/bin/go"); err == nil {
		t.Log("/usr/bin/go exists: make install and uninstall are run with it on PATH")
	}
	cmd := exec.Command("make", "-C", "../..", "install", "DESTDIR="+dest, "PREFIX=/usr")
	cmd.Env = noGo
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install without Go: %v\n%s", err, out)
	}
	manifest, err := os.ReadFile(filepath.Join(dest, "usr/share/parley-keyd/installed-files"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(manifest)) {
		if strings.HasSuffix(f, "/") {
			continue
		}
		if _, err := os.Lstat(filepath.Join(dest, f)); err != nil {
			t.Errorf("the manifest names %s, which install did not put in place", f)
		}
	}
	if got, want := len(strings.Fields(string(manifest))), len(treeFiles(t, dest))-len(before); got < want {
		t.Errorf("the manifest names %d paths, fewer than the %d files install put in place", got, want)
	}
	for _, f := range []string{
		"usr/bin/parley-keyd", "usr/bin/parley-grant",
		"usr/lib/systemd/system/parley-keyd.service", "usr/lib/systemd/system/parley-keyd.socket",
		"usr/lib/sysusers.d/parley-keyd.conf", "usr/lib/tmpfiles.d/parley-keyd.conf",
		"usr/lib/systemd/user/parley-grant-approver.service",
		"usr/share/man/man1/parley-grant.1", "usr/share/man/man8/parley-keyd.8",
		"usr/share/man/man5/parley-keyd-config.toml.5", "usr/share/man/man5/parley-keyd-policy.toml.5",
		"usr/share/bash-completion/completions/parley-grant", "usr/share/zsh/site-functions/_parley-keyd",
		"usr/share/fish/vendor_completions.d/parley-grant.fish",
	} {
		if _, err := os.Stat(filepath.Join(dest, f)); err != nil {
			t.Errorf("not installed: %s", f)
		}
	}
	// Every man: page a unit names for documentation is installed
	// (systemctl help opens them).
	docRef := regexp.MustCompile(`^man:([a-z0-9._-]+)\(([1-9])\)$`)
	for _, unit := range []string{"usr/lib/systemd/system/parley-keyd.service", "usr/lib/systemd/system/parley-keyd.socket",
		"usr/lib/systemd/user/parley-grant-approver.service"} {
		data, _ := os.ReadFile(filepath.Join(dest, unit))
		var refs []string
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "Documentation="); ok {
				refs = append(refs, strings.Fields(v)...)
			}
		}
		if len(refs) == 0 {
			t.Errorf("%s has no Documentation=", unit)
		}
		for _, ref := range refs {
			m := docRef.FindStringSubmatch(ref)
			if m == nil {
				t.Errorf("%s: Documentation=%s is not a man: page", unit, ref)
				continue
			}
			if _, err := os.Stat(filepath.Join(dest, "usr/share/man", "man"+m[2], m[1]+"."+m[2])); err != nil {
				t.Errorf("%s: Documentation=%s names a page that is not installed", unit, ref)
			}
		}
	}
	unit, _ := os.ReadFile(filepath.Join(dest, "usr/lib/systemd/system/parley-keyd.service"))
	for _, want := range []string{"User=parley-keyd", "ExecStart=/usr/bin/parley-keyd serve", "NoNewPrivileges=yes",
		"ProtectSystem=strict", "PrivateTmp=yes", "StateDirectory=parley-keyd", "LimitCORE=0",
		"Type=notify", "NotifyAccess=main", "WatchdogSec=", "--config /etc/parley-keyd/config.toml",
		"\nRestartPreventExitStatus=2 4 5\n", "\nStartLimitBurst=", "\nStartLimitIntervalSec="} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("service unit lacks %q", want)
		}
	}
	// Issue 21, item 1: systemd chowns a service's RuntimeDirectory=, the
	// socket in it included, to the service's user and group at every
	// start, and agents of parley-agents could no longer connect. (The
	// container test of dist/ shows it under a real systemd.)
	if regexp.MustCompile(`(?m)^RuntimeDirectory=`).Match(unit) {
		t.Error("the service unit has a RuntimeDirectory=, which would take the socket's group at each start")
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

	// Uninstall: what install put is gone, nothing else, and the output
	// says what it kept.
	cmd = exec.Command("make", "-C", "../..", "uninstall", "DESTDIR="+dest, "PREFIX=/usr")
	cmd.Env = noGo
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make uninstall without Go: %v\n%s", err, out)
	}
	if after := treeFiles(t, dest); !slices.Equal(after, before) {
		t.Errorf("after uninstall the tree holds %q, want what was there before install, %q", after, before)
	}
	// The folders install made are gone too; those that were there stay.
	if after := treeDirs(t, dest); !slices.Equal(after, beforeDirs) {
		t.Errorf("after uninstall the tree has the folders %q, want those before install, %q", after, beforeDirs)
	}
	for _, kept := range []string{"/var/lib/parley-keyd", "/etc/parley-keyd", "the user parley-keyd"} {
		if !strings.Contains(string(out), kept) {
			t.Errorf("make uninstall does not say it kept %s:\n%s", kept, out)
		}
	}
}

// treeDirs lists the folders under dir, relative to it.
func treeDirs(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// treeFiles lists the files under dir (not folders), relative to it.
func treeFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestVersionFromClone builds the binaries as a new developer would, with
// make build in a fresh clone of this repository, and checks that --version
// names the commit they were built from. (A test binary, or a build in a git
// worktree, which the go tool does not recognize, carries no revision.)
func TestVersionFromClone(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"git", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			testpeer.Unavailable(t, "needs "+tool+" to build from a clone")
		}
	}
	head, err := exec.Command("git", "-C", "../..", "rev-parse", "HEAD").Output()
	if err != nil {
		testpeer.Unavailable(t, "needs a git checkout of the repository: "+err.Error())
	}
	rev := strings.TrimSpace(string(head))
	clone := filepath.Join(t.TempDir(), "parley-keyd")
	if out, err := exec.Command("git", "clone", "--quiet", "../..", clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}
	if out, err := exec.Command("git", "-C", clone, "checkout", "--quiet", rev).CombinedOutput(); err != nil {
		t.Fatalf("git checkout: %v\n%s", err, out)
	}
	// The tree under test, uncommitted changes included: the build then
	// says it was modified, as it should.
	files, err := exec.Command("git", "-C", "../..", "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(files), "\x00"), "\x00") {
		data, err := os.ReadFile(filepath.Join("../..", f))
		if errors.Is(err, os.ErrNotExist) {
			os.Remove(filepath.Join(clone, f))
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if old, err := os.ReadFile(filepath.Join(clone, f)); err == nil && bytes.Equal(old, data) {
			continue
		}
		os.MkdirAll(filepath.Dir(filepath.Join(clone, f)), 0o755)
		if err := os.WriteFile(filepath.Join(clone, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	status, err := exec.Command("git", "-C", clone, "status", "--porcelain").Output()
	if err != nil {
		t.Fatal(err)
	}
	modified := len(status) > 0
	// The developer's GOFLAGS (this machine's may say -buildvcs=false)
	// must not keep make build from stamping.
	build := exec.Command("make", "-C", clone, "build")
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	for _, bin := range []string{"parley-keyd", "parley-grant"} {
		out, err := exec.Command(filepath.Join(clone, "bin", bin), "--version").Output()
		if err != nil {
			t.Fatalf("%s --version: %v", bin, err)
		}
		lines := strings.Split(string(out), "\n")
		if len(lines) < 4 || lines[0] != bin+" 0.1.0" ||
			!strings.HasPrefix(lines[1], "module   github.com/parley-keyd/parley-keyd v") || !strings.Contains(lines[1], rev[:12]) ||
			!strings.HasPrefix(lines[2], "revision "+rev+" (") || strings.HasSuffix(lines[2], ", modified)") != modified ||
			!strings.HasPrefix(lines[3], "go       go1.") {
			t.Errorf("%s --version:\n%s\nwant module and revision %s, modified %v", bin, out, rev, modified)
		}
	}
}
