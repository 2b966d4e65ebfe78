package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// keydCmd runs the real parley-keyd binary as the current user.
func keydCmd(t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.Command(filepath.Join(binaries(t), "parley-keyd"), args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{out.String(), errb.String(), code}
}

func TestCLIInitAndPubkey(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	r := keydCmd(t, "init", "--state", state, "--socket", filepath.Join(state, "s.sock"), "--agent-user", "bot", "--approver-user", "alice")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "ed25519:") {
		t.Fatalf("init: %+v", r)
	}
	for name, mode := range map[string]os.FileMode{"": 0o700, "principal.key": 0o600, "config.toml": 0o640, "policy.toml": 0o640} {
		fi, err := os.Stat(filepath.Join(state, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), mode)
		}
	}
	if p := keydCmd(t, "pubkey", "--state", state); p.code != 0 || p.stdout != r.stdout {
		t.Errorf("pubkey = %+v, init printed %q", p, r.stdout)
	}
	// A second init never overwrites the key.
	again := keydCmd(t, "init", "--state", state)
	if again.code == 0 || !strings.Contains(again.stderr, "hint: the principal key exists already") {
		t.Errorf("second init: %+v", again)
	}
	if p := keydCmd(t, "pubkey", "--state", state); p.stdout != r.stdout {
		t.Error("the key changed")
	}
	// The configuration written is valid and names the users.
	cfg, _ := os.ReadFile(filepath.Join(state, "config.toml"))
	if !strings.Contains(string(cfg), `agent_users = ["bot"]`) || !strings.Contains(string(cfg), `approver_users = ["alice"]`) {
		t.Errorf("config:\n%s", cfg)
	}
	// So is the default policy.
	if c := keydCmd(t, "policy", "check", filepath.Join(state, "policy.toml")); c.code != 0 {
		t.Errorf("policy check of the default: %+v", c)
	}
}

func TestCLIPolicyCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	os.WriteFile(good, []byte(`version = 1
[[agent]]
name = "bot"
user = ["bot"]
[[rule]]
name = "everything"
agents = ["bot"]
action = "auto"
`), 0o644)
	r := keydCmd(t, "policy", "check", good)
	if r.code != 0 || !strings.Contains(r.stdout, "everything") {
		t.Fatalf("check: %+v", r)
	}
	// auto with no expiry cap on every capability is risky: say so.
	if !strings.Contains(r.stderr, "parley-keyd: warning:") {
		t.Errorf("no warning for a risky rule: %q", r.stderr)
	}
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("version = 1\n\n[[rule]]\nname = \"x\"\nfrobnicate = true\n"), 0o644)
	r = keydCmd(t, "policy", "check", bad)
	if r.code != exitPolicy || !strings.Contains(r.stderr, "line 5") || !strings.Contains(r.stderr, "frobnicate") {
		t.Errorf("bad policy: %+v", r)
	}
}

func TestCLIServeRefusesInvalidPolicy(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	keydCmd(t, "init", "--state", state, "--socket", filepath.Join(state, "s.sock"), "--agent-user", "bot")
	os.WriteFile(filepath.Join(state, "policy.toml"), []byte("version = 2\n"), 0o640)
	r := keydCmd(t, "serve", "--state", state)
	if r.code != exitPolicy || !strings.Contains(r.stderr, "line 1") || !strings.Contains(r.stderr, "hint: check it with: parley-keyd policy check") {
		t.Errorf("serve with an invalid policy: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(state, "s.sock")); err == nil {
		t.Error("the daemon opened its socket with an invalid policy")
	}
}

func TestCLIAuditVerifyAndShow(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "audit.log")
	// The first line is the log's first checkpoint, then three records, then
	// the stop checkpoint. testdata/audit has the rest.
	writeTestLog(t, log, 3)
	r := keydCmd(t, "audit", "verify", log)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "ok: 5 records") {
		t.Fatalf("verify: %+v", r)
	}
	if s := keydCmd(t, "audit", "show", log); s.code != 0 || strings.Count(s.stdout, "\n") != 5 || !strings.Contains(s.stdout, "issue") {
		t.Errorf("show: %+v", s)
	}
	data, _ := os.ReadFile(log)
	lines := strings.SplitAfter(string(data), "\n")
	cases := []struct {
		name, content string
		line          string
	}{
		{"fail/removed-middle", lines[0] + lines[1] + lines[3] + lines[4], "line 3"},
		{"fail/edited", lines[0] + lines[1] + strings.Replace(lines[2], "bot", "bob", 1) + lines[3] + lines[4], "line 4"},
		{"fail/reordered", lines[0] + lines[2] + lines[1] + lines[3] + lines[4], "line 2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := t.TempDir()
			p := filepath.Join(d, "audit.log")
			os.WriteFile(p, []byte(tc.content), 0o600)
			pub, _ := os.ReadFile(filepath.Join(dir, "principal.pub"))
			os.WriteFile(filepath.Join(d, "principal.pub"), pub, 0o644)
			r := keydCmd(t, "audit", "verify", p)
			if r.code != exitAudit || !strings.Contains(r.stderr, tc.line) {
				t.Errorf("verify: %+v, want exit %d naming %s", r, exitAudit, tc.line)
			}
		})
	}
}

// TestCLIDemo runs the README's quickstart command, twice: the second run
// reuses the state folder.
func TestCLIDemo(t *testing.T) {
	state := filepath.Join(t.TempDir(), "demo-state")
	for run := 0; run < 2; run++ {
		r := keydCmd(t, "demo", "--state", state)
		if r.code != 0 {
			t.Fatalf("demo run %d: %+v", run, r)
		}
		for _, want := range []string{
			`issued by rule "demo-calendar"`,
			"match code", "entering the code", "approved by",
			"sub-agent ASK    mail.read: authorized",
			"sub-agent COMMIT mail.read: refused: forbidden",
			"audit log verifies",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("demo run %d lacks %q:\n%s", run, want, r.stdout)
			}
		}
	}
}

func TestCLIEncryptedKey(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	pass := filepath.Join(dir, "pass")
	os.WriteFile(pass, []byte("correct horse battery staple\n"), 0o600)
	wrong := filepath.Join(dir, "wrong")
	os.WriteFile(wrong, []byte("Tr0ub4dor&3\n"), 0o600)
	sock := filepath.Join(dir, "s.sock")
	if r := keydCmd(t, "init", "--state", state, "--socket", sock, "--agent-user", "bot", "--passphrase-file", pass); r.code != 0 {
		t.Fatalf("init: %+v", r)
	}
	key, _ := os.ReadFile(filepath.Join(state, "principal.key"))
	if bytes.Contains(key, []byte("PARLEY-PRINCIPAL-KEY")) {
		t.Fatal("the key is stored in the clear")
	}
	// pubkey needs no passphrase.
	if r := keydCmd(t, "pubkey", "--state", state); r.code != 0 || !strings.HasPrefix(r.stdout, "ed25519:") {
		t.Errorf("pubkey: %+v", r)
	}
	if r := keydCmd(t, "serve", "--state", state, "--passphrase-file", wrong); r.code == 0 || !strings.Contains(r.stderr, "passphrase") {
		t.Errorf("serve with a wrong passphrase: %+v", r)
	}
	if r := keydCmd(t, "serve", "--state", state); r.code == 0 || !strings.Contains(r.stderr, "--passphrase-file") {
		t.Errorf("serve without a passphrase and no terminal: %+v", r)
	}
	cmd := exec.Command(filepath.Join(binaries(t), "parley-keyd"), "serve", "--state", state, "--passphrase-file", pass)
	var errb syncBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	waitForSocket(t, sock, &errb)
}

func waitForSocket(t *testing.T, sock string, log *syncBuffer) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not accept on %s:\n%s", sock, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
