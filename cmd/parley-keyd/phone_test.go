package main

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/notify/phone"

	"github.com/parley-keyd/parley-keyd/notify"
)

// TestCLIPhone runs pair, devices and serve as the real binary: the link
// and certificate pair prints are the ones the running daemon's phone page
// serves, a pairing made while it runs works at once, and a revocation takes
// effect at the page's next request. The page listens on loopback here, so
// it can be viewed but pairing and approving are refused.
func TestCLIPhone(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	sock := filepath.Join(state, "agent.sock")
	if r := keydCmd(t, "init", "--state", state, "--config-dir", state, "--socket", sock, "--agent-user", "root", "--approver-user", "root"); r.code != 0 {
		t.Fatalf("init: %+v", r)
	}
	// The phone page is off by default.
	if r := keydCmd(t, "pair", "--state", state, "--config", filepath.Join(state, "config.toml")); r.code != exitFail || !strings.Contains(r.stderr, "the phone page is off") || !strings.Contains(r.stderr, "hint: set listen") {
		t.Errorf("pair with the page off: %+v", r)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfgPath := filepath.Join(state, "config.toml")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, bytes.Replace(cfg, []byte(`listen = ""`), []byte(`listen = "`+addr+`"`), 1), 0o640); err != nil {
		t.Fatal(err)
	}

	r := keydCmd(t, "pair", "--state", state, "--config", filepath.Join(state, "config.toml"), "--name", "pixel", "--ttl", "5m", "--no-wait")
	if r.code != 0 {
		t.Fatalf("pair: %+v", r)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) < 3 {
		t.Fatalf("pair printed %q", r.stdout)
	}
	link, fpLine := lines[len(lines)-2], lines[len(lines)-1]
	m := regexp.MustCompile(`^https://` + regexp.QuoteMeta(addr) + `/pair\?t=([A-Za-z0-9_-]{43})$`).FindStringSubmatch(link)
	if m == nil {
		t.Fatalf("pair printed the link %q", link)
	}
	token := m[1]
	var qr bytes.Buffer
	if err := notify.WriteTerminalQR(&qr, link); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(lines[:len(lines)-2], "\n") + "\n"; got != qr.String() {
		t.Errorf("pair's QR code is not the link's:\n%s", got)
	}
	fp, ok := strings.CutPrefix(fpLine, "certificate SHA-256: ")
	if !ok || len(fp) != 95 {
		t.Fatalf("pair printed %q, want the certificate's fingerprint", fpLine)
	}
	if !strings.Contains(r.stderr, `pair it as "pixel"`) {
		t.Errorf("pair's stderr: %s", r.stderr)
	}
	if again := keydCmd(t, "pair", "--state", state, "--config", filepath.Join(state, "config.toml"), "--name", "pixel"); again.code != exitFail || !strings.Contains(again.stderr, "already uses that name") {
		t.Errorf("second pair named pixel: %+v", again)
	}
	if l := keydCmd(t, "devices", "--state", state); l.code != 0 || l.stdout != "" || !strings.Contains(l.stderr, `a pairing link for "pixel" is waiting`) {
		t.Errorf("devices before pairing: %+v", l)
	}

	// The daemon, with the phone page on.
	var logb syncBuffer
	cmd := exec.Command(filepath.Join(binaries(t), "parley-keyd"), "serve", "--state", state, "--config", filepath.Join(state, "config.toml"))
	cmd.Stdout, cmd.Stderr = &logb, &logb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
		}
	})
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true, // replaced by the pin: the fingerprint pair printed
		VerifyConnection: func(cs tls.ConnectionState) error {
			if got := phone.Fingerprint(cs.PeerCertificates[0].Raw); got != fp {
				return errors.New("the page's certificate is not the one pair printed: " + got)
			}
			return nil
		},
	}}}
	get := func(path, cred string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "https://"+addr+path, nil)
		if cred != "" {
			req.AddCookie(&http.Cookie{Name: phone.DeviceCookie, Value: cred})
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			resp, err := client.Do(req)
			if err == nil {
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b)
			}
			var op *net.OpError
			if !errors.As(err, &op) || time.Now().After(deadline) {
				t.Fatalf("GET %s: %v\ndaemon log:\n%s", path, err, logb.String())
			}
			time.Sleep(20 * time.Millisecond) // the daemon is still starting
		}
	}
	if st, body := get("/pair?t="+token, ""); st != 200 || !strings.Contains(body, "pixel") {
		t.Fatalf("pairing page: %d %s", st, body)
	}
	// From this machine the link can be viewed but not used.
	resp, err := client.PostForm("https://"+addr+"/pair", map[string][]string{"t": {token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("pairing from loopback: %d, want 403", resp.StatusCode)
	}
	// The phone's side of pairing, through the store the daemon reads.
	dev, cred, err := phone.OpenDevices(state).Pair(token, "192.0.2.9", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Not confirmed yet: the phone decides nothing.
	if st, _ := get("/", cred); st != http.StatusForbidden {
		t.Errorf("index for an unconfirmed phone: %d, want 403", st)
	}
	if c := keydCmd(t, "devices", "confirm", "pixel", dev.Code, "--state", state); c.code != 0 || !strings.Contains(c.stderr, "paired pixel") {
		t.Fatalf("devices confirm: %+v", c)
	}
	if st, body := get("/", cred); st != 200 || !strings.Contains(body, "Waiting requests") {
		t.Errorf("index for the paired phone: %d %s", st, body)
	}
	l := keydCmd(t, "devices", "list", "--state", state)
	if l.code != 0 || !regexp.MustCompile(`(?m)^ID +NAME +PAIRED +FROM +STATE\nd_[a-z0-9]+ +pixel +\d{4}-\d\d-\d\d \d\d:\d\d +192\.0\.2\.9 +confirmed`).MatchString(l.stdout) {
		t.Errorf("devices list: %+v", l)
	}
	if rv := keydCmd(t, "devices", "revoke", "pixel", "--state", state); rv.code != 0 || !strings.Contains(rv.stderr, "revoked pixel") {
		t.Errorf("revoke: %+v", rv)
	}
	if st, _ := get("/", cred); st != http.StatusForbidden {
		t.Errorf("index for the revoked phone: %d, want 403", st)
	}
	if rv := keydCmd(t, "devices", "revoke", "pixel", "--state", state); rv.code != exitFail || !strings.Contains(rv.stderr, "hint: list them") {
		t.Errorf("revoking an unknown phone: %+v", rv)
	}
	if !strings.Contains(logb.String(), "phone page on https://"+addr) {
		t.Errorf("the daemon did not log its phone page:\n%s", logb.String())
	}
}

// TestCLIPairWaitsForTheCode runs pair as the admin does: it waits for the
// phone, then asks for the code the phone shows; a wrong code unpairs.
func TestCLIPairWaitsForTheCode(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	keydCmd(t, "init", "--state", state, "--config-dir", state, "--socket", filepath.Join(state, "s.sock"), "--agent-user", "nobody")
	cfgPath := filepath.Join(state, "config.toml")
	cfg, _ := os.ReadFile(cfgPath)
	os.WriteFile(cfgPath, bytes.Replace(cfg, []byte(`listen = ""`), []byte(`listen = "192.0.2.1:7450"`), 1), 0o640)
	for _, tc := range []struct {
		name, typed string
		ok          bool
	}{{"ok/right-code", "", true}, {"fail/wrong-code", "0000", false}} {
		t.Run(tc.name, func(t *testing.T) {
			device := strings.ReplaceAll(tc.name, "/", "-")
			cmd := exec.Command(filepath.Join(binaries(t), "parley-keyd"), "pair", "--state", state, "--config", filepath.Join(state, "config.toml"), "--name", device)
			stdin, _ := cmd.StdinPipe()
			var out, errb syncBuffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(15 * time.Second)
			var token string
			for token == "" {
				if m := regexp.MustCompile(`/pair\?t=([A-Za-z0-9_-]{43})`).FindStringSubmatch(out.String()); m != nil && strings.Contains(errb.String(), "waiting for the phone") {
					token = m[1]
				} else if time.Now().After(deadline) {
					t.Fatalf("pair printed no link: %s %s", out.String(), errb.String())
				} else {
					time.Sleep(10 * time.Millisecond)
				}
			}
			// The phone's side, through the store the daemon writes.
			dev, cred, err := phone.OpenDevices(state).Pair(token, "192.0.2.77", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			for !strings.Contains(errb.String(), "a phone at 192.0.2.77 used the link") {
				if time.Now().After(deadline) {
					t.Fatalf("pair did not ask for the code: %s", errb.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			typed := tc.typed
			if typed == "" {
				typed = dev.Code
			}
			if typed == dev.Code && !tc.ok {
				typed = "0001"
			}
			io.WriteString(stdin, typed+"\n")
			err = cmd.Wait()
			_, ok, _ := phone.OpenDevices(state).Authenticate(cred)
			if tc.ok && (err != nil || !ok) {
				t.Errorf("pair with the right code: %v, authenticates %v\n%s", err, ok, errb.String())
			}
			if !tc.ok && (err == nil || ok || !strings.Contains(errb.String(), "does not match")) {
				t.Errorf("pair with a wrong code: %v, authenticates %v\n%s", err, ok, errb.String())
			}
		})
	}
}
