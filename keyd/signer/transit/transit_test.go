package transit

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/duration"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testtransit"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
)

// These tests run the backend against testtransit, a server that answers
// the transit engine's sign and keys endpoints as its API documentation
// describes them, with real Ed25519 keys, and that fails on demand. The
// opt-in tests in real_test.go run against a real OpenBao or Vault.

const keyName = "parley-principal"

type fixture struct {
	t   *testing.T
	srv *testtransit.Server
	dir string
	pub ed25519.PublicKey
	cfg signer.TransitConfig
}

func newFixture(t *testing.T, tls bool) *fixture {
	t.Helper()
	f := &fixture{t: t, dir: t.TempDir()}
	if tls {
		f.srv = testtransit.NewTLS()
	} else {
		f.srv = testtransit.New()
	}
	t.Cleanup(f.srv.Close)
	f.pub = f.srv.CreateKey(keyName)
	f.srv.AddToken("s.daemon", testtransit.Token{})
	f.cfg = signer.TransitConfig{Addresses: []string{f.srv.URL}, TokenFile: f.write("token", "s.daemon\n"),
		Timeout: duration.Value{Duration: 2 * time.Second}}
	if tls {
		ca, err := f.srv.CAFile(f.dir)
		if err != nil {
			t.Fatal(err)
		}
		f.cfg.CAFile = ca
	}
	return f
}

func (f *fixture) write(name, content string) string {
	f.t.Helper()
	p := filepath.Join(f.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fixture) config() signer.TransitConfig {
	f.t.Helper()
	c := signer.Config{Backend: signer.Transit, Transit: f.cfg}
	if err := c.Check(); err != nil {
		f.t.Fatal(err)
	}
	return c.Transit
}

func (f *fixture) open() *Signer {
	f.t.Helper()
	s, err := Open(f.config(), Options{Principal: f.pub, Logf: f.t.Logf})
	if err != nil {
		f.t.Fatalf("Open: %v", err)
	}
	f.t.Cleanup(func() { s.Close() })
	return s
}

func mustSign(t *testing.T, s crypto.Signer, pub ed25519.PublicKey) {
	t.Helper()
	msg := make([]byte, 100)
	rand.Read(msg)
	sig, err := s.Sign(nil, msg, crypto.Hash(0))
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	if !ed25519.Verify(pub, msg, sig) {
		t.Fatal("the signature does not verify")
	}
}

// wantUnavailable checks that err is the typed refusal the daemon answers
// with "unavailable", that it carries a retry hint, and that its detail
// mentions want.
func wantUnavailable(t *testing.T, err error, want string) {
	t.Helper()
	var u *signer.UnavailableError
	if !errors.As(err, &u) {
		t.Fatalf("got %v (%T), want a *signer.UnavailableError", err, err)
	}
	if u.RetrySeconds() < 1 {
		t.Fatalf("retry hint %v", u.Retry)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not mention %q", err, want)
	}
}

func signErr(s crypto.Signer) error {
	_, err := s.Sign(nil, []byte("message"), crypto.Hash(0))
	return err
}

func TestSignHTTPAndTLS(t *testing.T) {
	for _, tls := range []bool{false, true} {
		t.Run(fmt.Sprintf("ok/tls=%v", tls), func(t *testing.T) {
			f := newFixture(t, tls)
			s := f.open()
			mustSign(t, s, f.pub)
			if d := s.Describe(); d.Backend != "transit" || d.Version != "1" || !strings.Contains(d.Key, "transit/"+keyName) {
				t.Fatalf("Describe = %+v", d)
			}
			if err := s.Check(context.Background()); err != nil {
				t.Fatalf("Check: %v", err)
			}
		})
	}
	t.Run("fail/tls-unknown-ca", func(t *testing.T) {
		f := newFixture(t, true)
		f.cfg.CAFile = ""
		s, err := Open(f.config(), Options{Principal: f.pub})
		wantUnavailable(t, err, "certificate")
		defer s.Close()
		wantUnavailable(t, signErr(s), "certificate")
	})
}

func TestRefusesAnotherKeyAtStart(t *testing.T) {
	f := newFixture(t, false)
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	_, err := Open(f.config(), Options{Principal: other})
	if err == nil || !strings.Contains(err.Error(), "is not principal.pub") {
		t.Fatalf("Open with another principal.pub: %v", err)
	}
	var u *signer.UnavailableError
	if errors.As(err, &u) {
		t.Fatal("a key mismatch must stop the start, not be reported as an outage")
	}

	f.cfg.Name = "no-such-key"
	if _, err := Open(f.config(), Options{Principal: f.pub}); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Open with a missing key: %v", err)
	}
}

func TestRotatedKeyStaysPinned(t *testing.T) {
	f := newFixture(t, false)
	s := f.open()
	if v := f.srv.Rotate(keyName); v != 2 {
		t.Fatalf("rotated to %d", v)
	}
	// The pinned version keeps signing after a rotation.
	mustSign(t, s, f.pub)
	if err := s.Check(context.Background()); err != nil {
		t.Fatalf("Check after rotation: %v", err)
	}
	// A new start that pins the latest version finds another key, and says
	// which version is the principal.
	_, err := Open(f.config(), Options{Principal: f.pub})
	if err == nil || !strings.Contains(err.Error(), "version 1 is: set key.transit.version = 1") {
		t.Fatalf("Open after rotation: %v", err)
	}
	f.cfg.Version = 1
	mustSign(t, f.open(), f.pub)

	// The service stops signing with version 1.
	f.srv.SetMinEncryptionVersion(keyName, 2)
	wantUnavailable(t, signErr(s), "minimum encryption key version")
	if err := s.Check(context.Background()); err == nil {
		t.Fatal("Check passed although version 1 may no longer sign")
	}
}

// TestFailures is the service's HTTP failures; a hung service and a lying
// one are in the table every backend passes (conformance_test.go).
func TestFailures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault testtransit.Fault
		want  string
	}{
		{"fail/403", testtransit.Fault{Path: "/sign/", Status: 403}, "HTTP 403"},
		{"fail/500", testtransit.Fault{Path: "/sign/", Status: 500}, "HTTP 500"},
		{"fail/503-sealed", testtransit.Fault{Path: "/sign/", Status: 503}, "HTTP 503"},
		{"fail/closed-connection", testtransit.Fault{Path: "/sign/", Close: true}, "EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, false)
			f.cfg.Timeout.Duration = 300 * time.Millisecond
			s := f.open()
			f.srv.Rotate(keyName)
			f.srv.SetFault(&tc.fault)
			start := time.Now()
			err := signErr(s)
			took := time.Since(start)
			wantUnavailable(t, err, tc.want)
			// Never a hang: the call ends by its deadline (generous margin
			// for a loaded machine; the point is minutes versus seconds).
			if took > 5*time.Second {
				t.Fatalf("Sign took %v with a %v deadline", took, f.cfg.Timeout.Duration)
			}
			// The service recovers; so does the signer, with no restart.
			f.srv.SetFault(nil)
			mustSign(t, s, f.pub)
		})
	}
}

func TestFailoverToAnotherAddress(t *testing.T) {
	f := newFixture(t, false)
	second := testtransit.New()
	defer second.Close()
	// The same key in a second node, as in a replicated cluster.
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	f.srv.ImportKey(keyName, priv)
	second.ImportKey(keyName, priv)
	f.pub = priv.Public().(ed25519.PublicKey)
	second.AddToken("s.daemon", testtransit.Token{})
	f.cfg.Addresses = []string{f.srv.URL, second.URL}
	f.cfg.Timeout.Duration = time.Second
	s := f.open()

	for _, fault := range []testtransit.Fault{{Status: 503}, {Close: true}, {Delay: time.Minute}} {
		f.srv.SetFault(&fault)
		before := second.Signs.Load()
		mustSign(t, s, f.pub)
		if second.Signs.Load() == before {
			t.Fatalf("fault %+v: the second node did not sign", fault)
		}
	}
	// The node that answered is asked first from now on.
	f.srv.SetFault(nil)
	first := f.srv.Signs.Load()
	mustSign(t, s, f.pub)
	if f.srv.Signs.Load() != first {
		t.Fatal("the signer went back to the first node although the second answers")
	}
	// A 403 is the cluster's answer, not one node's: no failover.
	second.SetFault(&testtransit.Fault{Status: 403})
	before := f.srv.Signs.Load()
	wantUnavailable(t, signErr(s), "403")
	if f.srv.Signs.Load() != before {
		t.Fatal("a 403 was retried at another node")
	}
}

func TestDownAtStartThenUp(t *testing.T) {
	f := newFixture(t, false)
	f.srv.SetFault(&testtransit.Fault{Status: 503})
	s, err := Open(f.config(), Options{Principal: f.pub, Logf: t.Logf})
	wantUnavailable(t, err, "503")
	if s == nil {
		t.Fatal("Open returned no signer for a service that is down")
	}
	defer s.Close()
	wantUnavailable(t, signErr(s), "503")
	if d := s.Describe(); d.Version != "not yet known" {
		t.Fatalf("Describe before the service answered: %+v", d)
	}
	f.srv.SetFault(nil)
	mustSign(t, s, f.pub)
	if s.Version() != 1 {
		t.Fatalf("pinned version %d", s.Version())
	}
}

func TestExportableKeyRefused(t *testing.T) {
	f := newFixture(t, false)
	s := f.open()
	f.srv.SetExportable(keyName, true)
	if err := s.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "exportable") {
		t.Fatalf("Check of an exportable key: %v", err)
	}
	if _, err := Open(f.config(), Options{Principal: f.pub}); err == nil || !strings.Contains(err.Error(), "exportable") {
		t.Fatalf("Open of an exportable key: %v", err)
	}
}

func TestAppRoleRenewsAndLogsInAgain(t *testing.T) {
	f := newFixture(t, false)
	f.srv.SetAppRole("role-1", "secret-1", testtransit.Token{TTL: 3 * time.Second, Renewable: true, MaxTTL: 5 * time.Second})
	f.cfg.TokenFile = ""
	f.cfg.RoleIDFile = f.write("role-id", "role-1\n")
	f.cfg.SecretIDFile = f.write("secret-id", "secret-1\n")
	s := f.open()
	// Sign without pause while the token is renewed and then, at its
	// maximum lifetime, replaced by a new login: not one call may fail.
	deadline := time.Now().Add(20 * time.Second)
	for f.srv.Renewals.Load() < 1 || f.srv.Logins.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s: %d renewals, %d logins", f.srv.Renewals.Load(), f.srv.Logins.Load())
		}
		mustSign(t, s, f.pub)
		time.Sleep(20 * time.Millisecond) // pace the calls; the condition is the counters above
	}
	mustSign(t, s, f.pub)
}

func TestTokenRevokedThenReplaced(t *testing.T) {
	f := newFixture(t, false)
	s := f.open()
	f.srv.RevokeToken("s.daemon")
	wantUnavailable(t, signErr(s), "403")
	// An external agent writes a new token into the file: the 403 made the
	// signer read it again.
	f.srv.AddToken("s.new", testtransit.Token{})
	f.write("token", "s.new\n")
	deadline := time.Now().Add(15 * time.Second)
	for signErr(s) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the signer never picked up the new token")
		}
		time.Sleep(50 * time.Millisecond) // the keeper re-reads the file on its own schedule
	}
}

func TestCredentialFromSystemd(t *testing.T) {
	f := newFixture(t, false)
	creds := t.TempDir()
	if err := os.WriteFile(filepath.Join(creds, "bao-token"), []byte("s.daemon"), 0o400); err != nil {
		t.Fatal(err)
	}
	t.Setenv(signer.CredentialsEnv, creds)
	f.cfg.TokenFile = "bao-token"
	mustSign(t, f.open(), f.pub)

	// A token every user can read is refused.
	loose := f.write("loose", "s.daemon")
	os.Chmod(loose, 0o644)
	f.cfg.TokenFile = loose
	if _, err := Open(f.config(), Options{Principal: f.pub}); err == nil || !strings.Contains(err.Error(), "others may read it") {
		t.Fatalf("Open with a world-readable token: %v", err)
	}
}

func TestInitCreateImportExisting(t *testing.T) {
	f := newFixture(t, false)
	f.srv.AddToken("s.admin", testtransit.Token{})

	t.Run("ok/create", func(t *testing.T) {
		cfg := f.config()
		cfg.Name = "created"
		res, err := Init(context.Background(), cfg, "s.admin", nil)
		if err != nil {
			t.Fatal(err)
		}
		if res.Action != "created" || res.Version != 1 || !res.Public.Equal(f.srv.PublicKey("created", 1)) {
			t.Fatalf("Init = %+v", res)
		}
		again, err := Init(context.Background(), cfg, "s.admin", nil)
		if err != nil || again.Action != "existing" || !again.Public.Equal(res.Public) {
			t.Fatalf("second Init = %+v, %v", again, err)
		}
	})
	t.Run("ok/import-keeps-the-principal", func(t *testing.T) {
		cfg := f.config()
		cfg.Name = "imported"
		seed := make([]byte, 32)
		rand.Read(seed)
		want := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
		res, err := Init(context.Background(), cfg, "s.admin", seed)
		if err != nil {
			t.Fatal(err)
		}
		if res.Action != "imported" || !res.Public.Equal(want) {
			t.Fatalf("Init = %+v, want public key %x", res, want)
		}
		// The server unwrapped the BYOK ciphertext into the same key:
		// signing through it gives signatures under the file key's
		// public key.
		cfg.TokenFile = f.cfg.TokenFile
		s, err := Open(cfg, Options{Principal: want})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		mustSign(t, s, want)

		other := make([]byte, 32)
		rand.Read(other)
		if _, err := Init(context.Background(), cfg, "s.admin", other); err == nil || !strings.Contains(err.Error(), "another key") {
			t.Fatalf("importing over another key: %v", err)
		}
	})
	t.Run("fail/daemon-token-may-not-create", func(t *testing.T) {
		cfg := f.config()
		cfg.Name = "never"
		if _, err := Init(context.Background(), cfg, "s.unknown", nil); err == nil {
			t.Fatal("Init with an unknown token succeeded")
		}
	})
}

func TestWrapForImportRefusesSmallWrappingKey(t *testing.T) {
	if _, err := wrapForImport("not pem", make([]byte, 32)); err == nil {
		t.Fatal("accepted a wrapping key that is not PEM")
	}
}
