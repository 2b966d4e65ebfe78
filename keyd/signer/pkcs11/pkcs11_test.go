//go:build cgo

package pkcs11

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
	"sync"
	"testing"
	"time"

	"github.com/miekg/pkcs11"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testhsm"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
)

// These tests use a real token: SoftHSM2, with a configuration and token
// folder of each test's own. Without SoftHSM2 they skip, and fail under
// PARLEY_REQUIRE_PEERS=1.

type hsm struct {
	t   *testing.T
	tok *testhsm.Token
	dir string
	cfg signer.PKCS11Config
}

func newHSM(t *testing.T) *hsm {
	t.Helper()
	dir := t.TempDir()
	tok, err := testhsm.New(dir, "parley", "4711")
	if err != nil {
		testpeer.Unavailable(t, err.Error())
	}
	// SoftHSM2 reads its configuration when the module is initialized,
	// which Open does; Close finalizes it again.
	t.Setenv("SOFTHSM2_CONF", tok.Conf)
	h := &hsm{t: t, tok: tok, dir: dir}
	c := signer.Config{Backend: signer.PKCS11, PKCS11: signer.PKCS11Config{
		Module: tok.Module, Token: "parley", PINFile: h.write("pin", "4711\n")}}
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	h.cfg = c.PKCS11
	return h
}

func (h *hsm) write(name, content string) string {
	h.t.Helper()
	p := filepath.Join(h.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		h.t.Fatal(err)
	}
	return p
}

func (h *hsm) init() ed25519.PublicKey {
	h.t.Helper()
	pub, created, err := Init(h.cfg)
	if err != nil {
		h.t.Fatalf("Init: %v", err)
	}
	if !created {
		h.t.Fatal("Init did not create the key")
	}
	return pub
}

func (h *hsm) open(pub ed25519.PublicKey) *Signer {
	h.t.Helper()
	s, err := Open(h.cfg, Options{Principal: pub, Logf: h.t.Logf})
	if err != nil {
		h.t.Fatalf("Open: %v", err)
	}
	h.t.Cleanup(func() { s.Close() })
	return s
}

func mustSign(t *testing.T, s crypto.Signer, pub ed25519.PublicKey, msg []byte) {
	t.Helper()
	sig, err := s.Sign(nil, msg, crypto.Hash(0))
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	if !ed25519.Verify(pub, msg, sig) {
		t.Fatal("the signature does not verify")
	}
}

func wantUnavailable(t *testing.T, err error, want string) {
	t.Helper()
	var u *signer.UnavailableError
	if !errors.As(err, &u) || u.RetrySeconds() < 1 {
		t.Fatalf("got %v (%T), want a *signer.UnavailableError with a retry hint", err, err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not mention %q", err, want)
	}
}

func TestGenerateAndSign(t *testing.T) {
	h := newHSM(t)
	pub := h.init()
	s := h.open(pub)
	mustSign(t, s, pub, []byte("a grant's payload"))
	if d := s.Describe(); d.Backend != "pkcs11" || !strings.Contains(d.Key, `token "parley"`) || !strings.HasPrefix(d.Version, "id ") {
		t.Fatalf("Describe = %+v", d)
	}
	if err := s.Check(context.Background()); err != nil {
		t.Fatalf("Check: %v", err)
	}
	// A second init finds the key and leaves it alone.
	again, created, err := Init(h.cfg)
	if err != nil || created || !again.Equal(pub) {
		t.Fatalf("second Init = %x, %v, %v", again, created, err)
	}
}

// TestKeyCannotLeaveTheToken attacks the key as someone holding the PIN
// would: read its value, wrap it out. The token must refuse both.
func TestKeyCannotLeaveTheToken(t *testing.T) {
	h := newHSM(t)
	pub := h.init()
	s := h.open(pub)
	err := s.call(context.Background(), func(ss *session) error {
		attrs, err := s.ctx.GetAttributeValue(ss.h, ss.key, []*pkcs11.Attribute{
			pkcs11.NewAttribute(pkcs11.CKA_VALUE, nil),
			pkcs11.NewAttribute(pkcs11.CKA_EXTRACTABLE, nil),
			pkcs11.NewAttribute(pkcs11.CKA_SENSITIVE, nil),
		})
		if err == nil {
			return fmt.Errorf("the token gave out the private key's value (%d bytes)", len(attrs[0].Value))
		}
		if !errors.Is(err, pkcs11.Error(pkcs11.CKR_ATTRIBUTE_SENSITIVE)) {
			return fmt.Errorf("reading CKA_VALUE: %v, want CKR_ATTRIBUTE_SENSITIVE", err)
		}
		// Wrapping it with a key of our own is refused as well.
		wk, err := s.ctx.GenerateKey(ss.h, []*pkcs11.Mechanism{pkcs11.NewMechanism(pkcs11.CKM_AES_KEY_GEN, nil)}, []*pkcs11.Attribute{
			pkcs11.NewAttribute(pkcs11.CKA_VALUE_LEN, 32), pkcs11.NewAttribute(pkcs11.CKA_WRAP, true), pkcs11.NewAttribute(pkcs11.CKA_TOKEN, false)})
		if err != nil {
			return fmt.Errorf("making a wrapping key: %v", err)
		}
		if _, err := s.ctx.WrapKey(ss.h, []*pkcs11.Mechanism{pkcs11.NewMechanism(pkcs11.CKM_AES_KEY_WRAP_PAD, nil)}, wk, ss.key); err == nil {
			return errors.New("the token wrapped the private key out")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRefusals(t *testing.T) {
	h := newHSM(t)
	pub := h.init()

	t.Run("fail/missing-token", func(t *testing.T) {
		cfg := h.cfg
		cfg.Token = "no-such-token"
		_, err := Open(cfg, Options{Principal: pub})
		if err == nil || !strings.Contains(err.Error(), `no token labelled "no-such-token"`) || !strings.Contains(err.Error(), `"parley"`) {
			t.Fatalf("Open with a missing token: %v", err)
		}
	})
	t.Run("fail/missing-key", func(t *testing.T) {
		cfg := h.cfg
		cfg.Key = "no-such-key"
		if _, err := Open(cfg, Options{Principal: pub}); err == nil || !strings.Contains(err.Error(), "no Ed25519 private key") {
			t.Fatalf("Open with a missing key: %v", err)
		}
	})
	t.Run("fail/another-principal", func(t *testing.T) {
		other, _, _ := ed25519.GenerateKey(rand.Reader)
		if _, err := Open(h.cfg, Options{Principal: other}); err == nil || !strings.Contains(err.Error(), "not principal.pub") {
			t.Fatalf("Open with another principal.pub: %v", err)
		}
	})
	t.Run("fail/missing-module", func(t *testing.T) {
		cfg := h.cfg
		cfg.Module = filepath.Join(h.dir, "no-such-module.so")
		if _, err := Open(cfg, Options{Principal: pub}); err == nil || !strings.Contains(err.Error(), "cannot load the module") {
			t.Fatalf("Open with a missing module: %v", err)
		}
	})
	t.Run("fail/extractable-key", func(t *testing.T) {
		// A key someone made extractable, under the label the daemon uses.
		s := h.open(pub)
		err := s.call(context.Background(), func(ss *session) error {
			_, _, err := s.ctx.GenerateKeyPair(ss.h, []*pkcs11.Mechanism{pkcs11.NewMechanism(ckmECEdwardsKeyPairGen, nil)},
				[]*pkcs11.Attribute{pkcs11.NewAttribute(pkcs11.CKA_TOKEN, true), pkcs11.NewAttribute(pkcs11.CKA_EC_PARAMS, ed25519Params),
					pkcs11.NewAttribute(pkcs11.CKA_LABEL, "loose"), pkcs11.NewAttribute(pkcs11.CKA_VERIFY, true)},
				[]*pkcs11.Attribute{pkcs11.NewAttribute(pkcs11.CKA_TOKEN, true), pkcs11.NewAttribute(pkcs11.CKA_PRIVATE, true),
					pkcs11.NewAttribute(pkcs11.CKA_SENSITIVE, false), pkcs11.NewAttribute(pkcs11.CKA_EXTRACTABLE, true),
					pkcs11.NewAttribute(pkcs11.CKA_LABEL, "loose"), pkcs11.NewAttribute(pkcs11.CKA_SIGN, true)})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		cfg := h.cfg
		cfg.Key = "loose"
		if _, _, err := Init(cfg); err == nil || !strings.Contains(err.Error(), "extractable") {
			t.Fatalf("Init adopted an extractable key: %v", err)
		}
	})
}

// TestDeadline holds every session in a call that does not return, as a
// hung module would: Sign must answer unavailable by its deadline, and no
// more calls than sessions may be started.
func TestDeadline(t *testing.T) {
	h := newHSM(t)
	h.cfg.Sessions = 2
	h.cfg.Timeout.Duration = 200 * time.Millisecond
	pub := h.init()
	s := h.open(pub)
	release := make(chan struct{})
	var started sync.WaitGroup
	for i := 0; i < h.cfg.Sessions; i++ {
		started.Add(1)
		go s.call(context.Background(), func(*session) error {
			started.Done()
			<-release
			return nil
		})
	}
	started.Wait()
	t0 := time.Now()
	_, err := s.Sign(nil, []byte("m"), crypto.Hash(0))
	wantUnavailable(t, err, "every session is busy")
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("Sign took %v with a 200ms deadline", d)
	}
	wantUnavailable(t, s.Check(context.Background()), "busy")
	// Close does not wait for a hung call beyond the deadline.
	hung := h.open(pub)
	go hung.call(context.Background(), func(*session) error { <-release; return nil })
	t1 := time.Now()
	for len(hung.pool) == h.cfg.Sessions {
		time.Sleep(time.Millisecond) // until the call holds its session
	}
	hung.Close()
	if d := time.Since(t1); d > 5*time.Second {
		t.Fatalf("Close took %v with a call hung", d)
	}
	close(release)
	// The sessions come back; signing resumes.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := s.Sign(nil, []byte("m"), crypto.Hash(0)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("signing did not resume after the calls returned")
		}
	}
	// Once every call has returned, the module is finalized.
	s.Close()
	for {
		modules.Lock()
		n := len(modules.m)
		modules.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the module stayed loaded after every signer closed")
		}
		time.Sleep(time.Millisecond) // the hung call's session returns in the background
	}
}

func TestCredentialAndConfig(t *testing.T) {
	h := newHSM(t)
	loose := h.write("loose-pin", "4711")
	os.Chmod(loose, 0o644)
	cfg := h.cfg
	cfg.PINFile = loose
	if _, _, err := Init(cfg); err == nil || !strings.Contains(err.Error(), "others may read it") {
		t.Fatalf("Init with a world-readable PIN: %v", err)
	}
	bad := signer.Config{Backend: "pkcs11", PKCS11: signer.PKCS11Config{Module: "libsofthsm2.so", Token: "t", PINFile: "p"}}
	if err := bad.Check(); err == nil || !strings.Contains(err.Error(), "absolute path") {
		t.Fatalf("a relative module path: %v", err)
	}
}
