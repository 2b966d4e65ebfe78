package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testhsm"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testtransit"
	"github.com/parley-keyd/parley-keyd/keyd"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// These tests run the real daemon with each signer backend: init makes the
// key, serve issues grants through it over the real socket, and a backend
// that goes down makes requests end in "unavailable" with a retry while
// the daemon stays up. The transit server is internal/testkit/testtransit (not a
// real OpenBao); the token is SoftHSM2's.

const backendPolicy = `version = 1
[[agent]]
name = "tester"
any = true
rate = 100000
pending = 8

[[rule]]
name = "calendar-auto"
agents = ["tester"]
action = "auto"
svc = ["cal.example"]
can = ["calendar.*"]
max_exp = "1h"
`

type backendRun struct {
	t                *testing.T
	dir, state, sock string
	env              []string
	proc             *exec.Cmd
	log              *syncBuffer
}

func newBackendRun(t *testing.T) *backendRun {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	// The configuration lives next to the key here, not in /etc.
	return &backendRun{t: t, dir: dir, state: state, sock: filepath.Join(dir, "s.sock"),
		env: []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "PARLEY_KEYD_CONFIG_DIR=" + state}}
}

// keyd runs parley-keyd with the run's environment and wants exit code 0
// unless fail is set.
func (b *backendRun) keyd(wantOK bool, args ...string) result {
	b.t.Helper()
	cmd := exec.Command(filepath.Join(binaries(b.t), "parley-keyd"), args...)
	cmd.Env = b.env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{out.String(), errb.String(), 0}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		b.t.Fatal(err)
	}
	if wantOK && r.code != 0 {
		b.t.Fatalf("parley-keyd %s: %+v", strings.Join(args, " "), r)
	}
	return r
}

// writeConfig writes config.toml (the current user as agent and approver)
// with keyTable appended, and the policy.
func (b *backendRun) writeConfig(keyTable string) {
	b.t.Helper()
	u, err := user.Current()
	if err != nil {
		b.t.Fatal(err)
	}
	if err := os.MkdirAll(b.state, 0o700); err != nil {
		b.t.Fatal(err)
	}
	cfg := keyd.DefaultConfig(b.sock, u.Username, u.Username) + keyTable
	if err := os.WriteFile(filepath.Join(b.state, "config.toml"), []byte(cfg), 0o640); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.state, "policy.toml"), []byte(backendPolicy), 0o640); err != nil {
		b.t.Fatal(err)
	}
}

func (b *backendRun) serve() {
	b.t.Helper()
	b.proc = exec.Command(filepath.Join(binaries(b.t), "parley-keyd"), "serve", "--state", b.state)
	b.proc.Env = b.env
	b.log = &syncBuffer{}
	b.proc.Stderr = b.log
	if err := b.proc.Start(); err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() {
		b.proc.Process.Signal(syscall.SIGTERM)
		b.proc.Wait()
		if b.t.Failed() {
			b.t.Logf("daemon log:\n%s", b.log)
		}
	})
	waitForSocket(b.t, b.sock, b.log)
}

// alive fails the test when the daemon has exited.
func (b *backendRun) alive() {
	b.t.Helper()
	if err := b.proc.Process.Signal(syscall.Signal(0)); err != nil {
		b.t.Fatalf("the daemon is gone: %v\n%s", err, b.log)
	}
}

func (b *backendRun) client() *client.Client {
	b.t.Helper()
	c, err := client.Dial(b.sock)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { c.Close() })
	return c
}

func (b *backendRun) grant(c *client.Client) (*protocol.GrantResult, error) {
	_, agent, _ := ed25519.GenerateKey(rand.Reader)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cavs := []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find"), grant.Exp(time.Now().Unix() + 600)}
	return c.Grant(ctx, agent, cavs, nil)
}

// mustGrant issues a grant and checks that it verifies under principal.
func (b *backendRun) mustGrant(c *client.Client, principal string) {
	b.t.Helper()
	res, err := b.grant(c)
	if err != nil {
		b.t.Fatalf("grant: %v\n%s", err, b.log)
	}
	tok, err := grant.Decode(res.Token)
	if err != nil {
		b.t.Fatal(err)
	}
	if tok.Issuer() != principal {
		b.t.Fatalf("grant issued by %s, want %s", tok.Issuer(), principal)
	}
	if err := tok.CheckChain(); err != nil {
		b.t.Fatalf("the grant does not verify: %v", err)
	}
}

// wantUnavailable asks for a grant and wants "unavailable" with a retry.
func (b *backendRun) wantUnavailable(c *client.Client) {
	b.t.Helper()
	_, err := b.grant(c)
	var e *protocol.Error
	if !errors.As(err, &e) || e.Code != protocol.CodeUnavailable || e.Retry < 1 {
		b.t.Fatalf("grant with the backend down: %v, want unavailable with a retry", err)
	}
}

// status runs the real parley-grant status as the approver.
func (b *backendRun) status() string {
	b.t.Helper()
	cmd := exec.Command(filepath.Join(binaries(b.t), "parley-grant"), "status")
	cmd.Env = append(b.env, protocol.SocketEnv+"="+b.sock)
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.t.Fatalf("parley-grant status: %v: %s", err, out)
	}
	return string(out)
}

func (b *backendRun) startRecord() string {
	b.t.Helper()
	data, err := os.ReadFile(filepath.Join(b.state, "audit.log"))
	if err != nil {
		b.t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		var r audit.Record
		if json.Unmarshal([]byte(line), &r) == nil && r.Kind == audit.KindStart {
			return r.Message
		}
	}
	b.t.Fatal("no start record")
	return ""
}

// daemonBackend is what the shared body (servesThrough) needs of one
// backend under the real daemon.
type daemonBackend struct {
	principal string
	// status is how parley-grant status names the key while it answers;
	// record holds what the audit log's start record says of the signer.
	status string
	record []string
	// goAway makes the key service go away under the running daemon, and
	// comeBack brings it back; both nil for the file key, comeBack nil
	// when it cannot come back (a token whose files are gone).
	goAway, comeBack func()
	// downStatus is what status says once the service has gone.
	downStatus []string
}

// servesThrough is the body every backend passes under the real daemon:
// grants verify under the principal, status and the start record name the
// backend, and a key service that goes away makes each request end in
// unavailable with a retry while the daemon stays up and status says so.
func (b *backendRun) servesThrough(c *client.Client, k daemonBackend) {
	b.t.Helper()
	for i := 0; i < 20; i++ {
		b.mustGrant(c, k.principal)
	}
	if s := b.status(); !strings.Contains(s, "principal key: "+k.status) || !strings.Contains(s, "it answers") {
		b.t.Fatalf("status, want %q and \"it answers\":\n%s", k.status, s)
	}
	rec := b.startRecord()
	for _, want := range k.record {
		if !strings.Contains(rec, want) {
			b.t.Fatalf("start record %q does not say %q", rec, want)
		}
	}
	if k.goAway == nil {
		return
	}
	k.goAway()
	for i := 0; i < 6; i++ {
		b.wantUnavailable(c)
	}
	b.alive()
	s := b.status()
	for _, want := range append([]string{"it does not answer"}, k.downStatus...) {
		if !strings.Contains(s, want) {
			b.t.Fatalf("status with the key service gone does not say %q:\n%s", want, s)
		}
	}
	if k.comeBack != nil {
		k.comeBack()
		b.mustGrant(c, k.principal)
	}
}

func TestBackendFile(t *testing.T) {
	b := newBackendRun(t)
	u, _ := user.Current()
	b.keyd(true, "init", "--state", b.state, "--socket", b.sock, "--agent-user", u.Username, "--approver-user", u.Username)
	os.WriteFile(filepath.Join(b.state, "policy.toml"), []byte(backendPolicy), 0o640)
	b.serve()
	c := b.client()
	m, err := c.Hello(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b.servesThrough(c, daemonBackend{principal: m.Principal,
		status: "file: " + filepath.Join(b.state, "principal.key") + "; it answers", record: []string{"signer file "}})
}

func TestBackendTransit(t *testing.T) {
	for _, tls := range []bool{false, true} {
		name := "http"
		if tls {
			name = "tls"
		}
		t.Run(name, func(t *testing.T) {
			b := newBackendRun(t)
			srv := testtransit.New()
			if tls {
				srv = testtransit.NewTLS()
			}
			defer srv.Close()
			srv.AddToken("s.admin", testtransit.Token{})
			srv.AddToken("s.daemon", testtransit.Token{})
			os.WriteFile(filepath.Join(b.dir, "admin-token"), []byte("s.admin\n"), 0o600)
			os.WriteFile(filepath.Join(b.dir, "bao-token"), []byte("s.daemon\n"), 0o400)
			ca, err := srv.CAFile(b.dir)
			if err != nil {
				t.Fatal(err)
			}
			// The token as systemd passes a credential.
			b.env = append(b.env, "CREDENTIALS_DIRECTORY="+b.dir)
			b.writeConfig("\n[key]\nbackend = \"transit\"\n[key.transit]\naddresses = [\"" + srv.URL + "\"]\nca_file = \"" + ca + "\"\ntoken_file = \"bao-token\"\ntimeout = \"1s\"\n")
			r := b.keyd(true, "init", "--backend", "transit", "--state", b.state, "--token-file", filepath.Join(b.dir, "admin-token"))
			if !strings.Contains(r.stderr, "created transit key transit/parley-principal, version 1") {
				t.Fatalf("init: %+v", r)
			}
			principal := strings.TrimSpace(r.stdout)
			if pub := srv.PublicKey("parley-principal", 1); principal != grant.FormatPublicKey(pub) {
				t.Fatalf("init printed %s; the service holds %x", principal, pub)
			}
			if _, err := os.Stat(filepath.Join(b.state, "principal.key")); err == nil {
				t.Fatal("init wrote a file key although the key is in the key service")
			}
			b.serve()
			c := b.client()
			b.servesThrough(c, daemonBackend{principal: principal,
				status: "transit: transit/parley-principal at " + srv.URL + ", version 1; it answers",
				record: []string{"signer transit transit/parley-principal", "version 1"},
				goAway: func() { srv.SetFault(&testtransit.Fault{Status: 503}) }, comeBack: func() { srv.SetFault(nil) },
				downStatus: []string{"refused as unavailable"}})

			for _, fault := range []testtransit.Fault{{Status: 503}, {Status: 403}, {Close: true}, {Delay: time.Minute}} {
				srv.SetFault(&fault)
				b.wantUnavailable(c)
				b.alive()
				srv.SetFault(nil)
				b.mustGrant(c, principal)
			}
		})
	}
}

// TestBackendTransitImport moves a file key into the transit engine: the
// principal stays the same, so services need no change.
func TestBackendTransitImport(t *testing.T) {
	b := newBackendRun(t)
	u, _ := user.Current()
	first := b.keyd(true, "init", "--state", b.state, "--socket", b.sock, "--agent-user", u.Username, "--approver-user", u.Username)
	principal := strings.TrimSpace(first.stdout)
	srv := testtransit.New()
	defer srv.Close()
	srv.AddToken("s.admin", testtransit.Token{})
	srv.AddToken("s.daemon", testtransit.Token{})
	os.WriteFile(filepath.Join(b.dir, "admin-token"), []byte("s.admin"), 0o600)
	tokenFile := filepath.Join(b.dir, "bao-token")
	os.WriteFile(tokenFile, []byte("s.daemon"), 0o600)
	os.Remove(filepath.Join(b.state, "config.toml"))
	b.writeConfig("\n[key]\nbackend = \"transit\"\n[key.transit]\naddresses = [\"" + srv.URL + "\"]\ntoken_file = \"" + tokenFile + "\"\n")

	// Without --import, a new key in the service would not be principal.pub.
	r := b.keyd(false, "init", "--backend", "transit", "--state", b.state, "--token-file", filepath.Join(b.dir, "admin-token"))
	if r.code == 0 || !strings.Contains(r.stderr, "holds another principal key") {
		t.Fatalf("init without --import: %+v", r)
	}
	srv.DeleteKey("parley-principal")
	r = b.keyd(true, "init", "--backend", "transit", "--import", "--state", b.state, "--token-file", filepath.Join(b.dir, "admin-token"))
	if strings.TrimSpace(r.stdout) != principal || !strings.Contains(r.stderr, "imported the file key") || !strings.Contains(r.stderr, "shred") {
		t.Fatalf("init --import: %+v", r)
	}
	if pub := srv.PublicKey("parley-principal", 1); grant.FormatPublicKey(pub) != principal {
		t.Fatal("the service's key is not the file key")
	}
	// The file key is moved away, as the hint says; the daemon signs
	// through the service with the same principal.
	os.Rename(filepath.Join(b.state, "principal.key"), filepath.Join(b.dir, "offline.key"))
	b.serve()
	b.mustGrant(b.client(), principal)
}

func TestBackendPKCS11(t *testing.T) {
	b := newBackendRun(t)
	tok, err := testhsm.New(b.dir, "parley", "4711")
	if err != nil {
		testpeer.Unavailable(t, err.Error())
	}
	b.env = append(b.env, "SOFTHSM2_CONF="+tok.Conf)
	pin := filepath.Join(b.dir, "pin")
	os.WriteFile(pin, []byte("4711\n"), 0o600)
	b.writeConfig("\n[key]\nbackend = \"pkcs11\"\n[key.pkcs11]\nmodule = \"" + tok.Module + "\"\ntoken = \"parley\"\npin_file = \"" + pin + "\"\n")
	r := b.keyd(true, "init", "--backend", "pkcs11", "--state", b.state)
	if !strings.Contains(r.stderr, "generated the key in the token (not extractable)") {
		t.Fatalf("init: %+v", r)
	}
	principal := strings.TrimSpace(r.stdout)
	again := b.keyd(true, "init", "--backend", "pkcs11", "--state", b.state)
	if strings.TrimSpace(again.stdout) != principal || !strings.Contains(again.stderr, "using the existing key") {
		t.Fatalf("second init: %+v", again)
	}
	// parley-keyd status knows the token's key, and a file init refuses.
	st := b.keyd(false, "status", "--state", b.state, "--config", filepath.Join(b.state, "config.toml"), "--skip", "socket,audit,units,lock")
	if kl := strings.Join(keyLines(st.stdout), "\n"); !strings.HasPrefix(kl, "ok") || !strings.Contains(kl, principal) || !strings.Contains(kl, `PKCS#11 token "parley"`) {
		t.Fatalf("status's key check:\n%s", st.stdout)
	}
	if r := b.keyd(false, "init", "--state", b.state); r.code == 0 || !strings.Contains(r.stderr, "--backend pkcs11") {
		t.Fatalf("file init in a pkcs11 set-up: %+v", r)
	}
	b.serve()
	b.servesThrough(b.client(), daemonBackend{principal: principal,
		status: `pkcs11: token "parley", key "parley-principal"`, record: []string{"signer pkcs11 token"},
		// The token's files go away under the running daemon.
		goAway: func() {
			if err := tok.Remove(); err != nil {
				t.Fatal(err)
			}
		}})
}

func TestBackendWrongPINRefusesToStart(t *testing.T) {
	b := newBackendRun(t)
	tok, err := testhsm.New(b.dir, "parley", "4711")
	if err != nil {
		testpeer.Unavailable(t, err.Error())
	}
	b.env = append(b.env, "SOFTHSM2_CONF="+tok.Conf)
	pin := filepath.Join(b.dir, "pin")
	os.WriteFile(pin, []byte("4711"), 0o600)
	b.writeConfig("\n[key]\nbackend = \"pkcs11\"\n[key.pkcs11]\nmodule = \"" + tok.Module + "\"\ntoken = \"parley\"\npin_file = \"" + pin + "\"\n")
	b.keyd(true, "init", "--backend", "pkcs11", "--state", b.state)
	os.WriteFile(pin, []byte("1111"), 0o600)
	r := b.keyd(false, "serve", "--state", b.state)
	if r.code == 0 || !strings.Contains(r.stderr, "wrong PIN") {
		t.Fatalf("serve with a wrong PIN: %+v", r)
	}
}
