// Package testsigner is the one test body every key backend passes, as
// x/crypto/ssh/agent runs one client test against OpenSSH and its keyring:
// the file key, transit (against internal/testkit/testtransit) and PKCS#11 (against
// SoftHSM2) each give Run a Kit, and Run holds each to the guarantees of
// keyd/signer: only signatures that verify under principal.pub, an
// *signer.UnavailableError by the deadline when the service is gone, hung
// or lying, never a hang. It is for tests only.
//
// What only one backend has (transit's failover and AppRole, the token's
// sessions and its key that cannot leave it) stays in that backend's tests.
package testsigner

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha512"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/signer"
)

// Lies a key service can tell, as Kit.Lie names them.
const (
	// WrongSignature: the reply's signature is not the principal key's.
	WrongSignature = "wrong signature"
	// WrongKey: the reply is signed by another key or key version.
	WrongKey = "wrong key"
	// OversizedReply: the reply never ends.
	OversizedReply = "oversized reply"
)

// Kit is one backend, fresh for each case: Run calls the function that
// makes it once per case, so a case may break what it was given.
type Kit struct {
	// Backend is the backend's name, as Describe reports it.
	Backend string
	// Public is principal.pub.
	Public ed25519.PublicKey
	// Open opens the backend as the daemon does, with the right
	// passphrase, PIN or token. It may be called again (a restart).
	Open func(t *testing.T) signer.Backend
	// WrongSecret opens it with a wrong passphrase, PIN or token, and
	// returns what Open returned: an error, or a backend that must then
	// refuse to sign.
	WrongSecret func(t *testing.T) (signer.Backend, error)
	// Deadline is the backend's deadline for one signature.
	Deadline time.Duration
	// GoAway makes the key service go away under a running backend; nil
	// when there is no service (the file key).
	GoAway func(t *testing.T)
	// Hang makes every call to the service hang until release is called;
	// nil when there is no service.
	Hang func(t *testing.T) (release func())
	// Lie makes the service answer falsely in the named way until undo is
	// called. A lie a backend's service cannot be made to tell is left out.
	Lie map[string]func(t *testing.T) (undo func())
	// Says is what the error's text mentions, per case: WrongSecret for
	// the wrong secret, Gone and Hung, and each lie by its name. A case
	// left out is checked for its type only.
	Says map[string]string
}

// Cases of Kit.Says besides the lies.
const (
	WrongSecret = "wrong secret"
	Gone        = "gone"
	Hung        = "hung"
)

// Run runs every case against the backend newKit makes.
func Run(t *testing.T, newKit func(t *testing.T) *Kit) {
	t.Run("sign-and-verify", func(t *testing.T) {
		k := newKit(t)
		s := open(t, k)
		for _, n := range []int{0, 1, 100, 64 << 10} {
			mustSign(t, s, k.Public, randomMessage(n))
		}
	})
	t.Run("public-key", func(t *testing.T) {
		k := newKit(t)
		s := open(t, k)
		pub, ok := s.Public().(ed25519.PublicKey)
		if !ok || !pub.Equal(k.Public) {
			t.Fatalf("Public() = %v (%T), want principal.pub", s.Public(), s.Public())
		}
		if d := s.Describe(); d.Backend != k.Backend || d.Key == "" {
			t.Fatalf("Describe() = %+v, want backend %q and a key name", d, k.Backend)
		}
		if err := s.Check(context.Background()); err != nil {
			t.Fatalf("Check of a backend that answers: %v", err)
		}
	})
	t.Run("pure-ed25519-only", func(t *testing.T) {
		k := newKit(t)
		s := open(t, k)
		msg := randomMessage(64)
		h := sha512.Sum512(msg)
		for _, opts := range []crypto.SignerOpts{crypto.SHA512, &ed25519.Options{Hash: crypto.SHA512}, &ed25519.Options{Context: "x"}} {
			if sig, err := s.Sign(nil, h[:], opts); err == nil {
				t.Fatalf("signed with %#v: %x", opts, sig)
			}
		}
	})
	t.Run("wrong-secret", func(t *testing.T) {
		k := newKit(t)
		s, err := k.WrongSecret(t)
		if err == nil && s == nil {
			t.Fatal("opening with a wrong secret returned neither an error nor a backend")
		}
		if s != nil {
			// A remote backend starts anyway and refuses until the
			// service accepts it: the daemon's start does not wait.
			defer s.Close()
			err = wantUnavailable(t, s, k.Public)
		}
		says(t, k, WrongSecret, err)
		// Tried once, not until the service locks the account: the
		// right secret still opens it.
		mustSign(t, open(t, k), k.Public, []byte("after a wrong secret"))
	})
	t.Run("gone-mid-sign", func(t *testing.T) {
		k := newKit(t)
		if k.GoAway == nil {
			t.Logf("%s: no key service to go away", k.Backend)
			return
		}
		s := open(t, k)
		mustSign(t, s, k.Public, []byte("before"))
		// Signers busy while the service goes: each ends, with a good
		// signature or an unavailable refusal, never a hang.
		var wg sync.WaitGroup
		stop := make(chan struct{})
		errs := make(chan error, 8)
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					msg := randomMessage(32)
					sig, err := s.Sign(nil, msg, crypto.Hash(0))
					if err == nil && !ed25519.Verify(k.Public, msg, sig) {
						errs <- errors.New("a signature made while the service went does not verify")
						return
					}
					if err != nil {
						if !unavailable(err) {
							errs <- fmt.Errorf("sign while the service went: %v (%T), want *signer.UnavailableError", err, err)
						}
						return
					}
				}
			}()
		}
		k.GoAway(t)
		waitBounded(t, "the signers busy when the service went", 3*k.Deadline+10*time.Second, func() { wg.Wait() })
		close(stop)
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		// Every call, not only the first: nothing is left half open.
		for i := 0; i < 8; i++ {
			start := time.Now()
			says(t, k, Gone, wantUnavailable(t, s, k.Public))
			if took := time.Since(start); took > k.Deadline+5*time.Second {
				t.Fatalf("Sign took %v with the service gone and a %v deadline", took, k.Deadline)
			}
		}
		if err := s.Check(context.Background()); err == nil {
			t.Fatal("Check passed with the service gone")
		}
	})
	t.Run("hung-service-deadline", func(t *testing.T) {
		k := newKit(t)
		if k.Hang == nil {
			t.Logf("%s: no key service to hang", k.Backend)
			return
		}
		s := open(t, k)
		mustSign(t, s, k.Public, []byte("before"))
		release := k.Hang(t)
		start := time.Now()
		says(t, k, Hung, wantUnavailable(t, s, k.Public))
		// Minutes against seconds: generous for a loaded machine.
		if took := time.Since(start); took > k.Deadline+5*time.Second {
			t.Fatalf("Sign took %v with a hung service and a %v deadline", took, k.Deadline)
		}
		release()
		// The service answers again; so does the backend, unrestarted.
		eventually(t, "signing again once the service answers", 10*time.Second, func() error {
			msg := randomMessage(32)
			sig, err := s.Sign(nil, msg, crypto.Hash(0))
			if err == nil && !ed25519.Verify(k.Public, msg, sig) {
				t.Fatal("a signature after the hang does not verify")
			}
			return err
		})
	})
	for _, lie := range []string{WrongSignature, WrongKey, OversizedReply} {
		t.Run("lying-service/"+lie, func(t *testing.T) {
			k := newKit(t)
			tell := k.Lie[lie]
			if tell == nil {
				t.Logf("%s: its service cannot be made to tell this lie", k.Backend)
				return
			}
			s := open(t, k)
			undo := tell(t)
			start := time.Now()
			says(t, k, lie, wantUnavailable(t, s, k.Public))
			if took := time.Since(start); took > k.Deadline+5*time.Second {
				t.Fatalf("Sign took %v against a %s with a %v deadline", took, lie, k.Deadline)
			}
			undo()
			mustSign(t, s, k.Public, []byte("after the lie"))
		})
	}
	t.Run("restart", func(t *testing.T) {
		k := newKit(t)
		s := open(t, k)
		mustSign(t, s, k.Public, []byte("first run"))
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if sig, err := s.Sign(nil, []byte("m"), crypto.Hash(0)); err == nil {
			t.Fatalf("signed after Close: %x", sig)
		}
		again := open(t, k)
		mustSign(t, again, k.Public, []byte("second run"))
	})
	t.Run("concurrent-signs", func(t *testing.T) {
		k := newKit(t)
		s := open(t, k)
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 20; j++ {
					msg := randomMessage(48)
					sig, err := s.Sign(nil, msg, crypto.Hash(0))
					if err == nil && !ed25519.Verify(k.Public, msg, sig) {
						err = errors.New("a concurrent signature does not verify")
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		waitBounded(t, "16 concurrent signers", 60*time.Second, func() { wg.Wait() })
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	})
}

func open(t *testing.T, k *Kit) signer.Backend {
	t.Helper()
	s := k.Open(t)
	t.Cleanup(func() { s.Close() })
	return s
}

func randomMessage(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func mustSign(t *testing.T, s crypto.Signer, pub ed25519.PublicKey, msg []byte) {
	t.Helper()
	sig, err := s.Sign(nil, msg, crypto.Hash(0))
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	if !ed25519.Verify(pub, msg, sig) {
		t.Fatal("the signature does not verify under principal.pub")
	}
}

func unavailable(err error) bool {
	var u *signer.UnavailableError
	return errors.As(err, &u) && u.RetrySeconds() >= 1
}

// wantUnavailable signs once and wants the typed refusal the daemon answers
// with "unavailable", with a retry hint: never a signature. It returns the
// refusal.
func wantUnavailable(t *testing.T, s crypto.Signer, pub ed25519.PublicKey) error {
	t.Helper()
	msg := randomMessage(32)
	sig, err := s.Sign(nil, msg, crypto.Hash(0))
	switch {
	case err == nil && ed25519.Verify(pub, msg, sig):
		t.Fatal("signed although the service cannot")
	case err == nil:
		t.Fatalf("returned a signature that does not verify under principal.pub: %x", sig)
	case !unavailable(err):
		t.Fatalf("got %v (%T), want a *signer.UnavailableError with a retry hint", err, err)
	}
	return err
}

// says checks that err mentions what k says it does for the case.
func says(t *testing.T, k *Kit, what string, err error) {
	t.Helper()
	want, ok := k.Says[what]
	if !ok {
		return
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: error %v does not mention %q", what, err, want)
	}
}

// waitBounded runs wait and fails the test when it has not returned by d.
func waitBounded(t *testing.T, what string, d time.Duration, wait func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not end within %v", what, d)
	}
}

// eventually calls f until it returns nil, failing the test after d.
func eventually(t *testing.T, what string, d time.Duration, f func() error) {
	t.Helper()
	end := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: still %v after %v", what, err, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
