//go:build cgo

package pkcs11

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/miekg/pkcs11"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testsigner"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
)

// TestConformance holds the PKCS#11 backend, against SoftHSM2, to the table
// every backend passes (internal/testkit/testsigner). Its wrong secret is a wrong
// PIN; the token goes away when its files are removed, hangs when every
// session is held in a call that does not return, and lies when its
// sessions sign with another key of the token. SoftHSM2 cannot be made to
// return an oversized signature. What only a token has (the key cannot
// leave it, the bound on sessions) stays in pkcs11_test.go. Without
// SoftHSM2 it skips, and fails under PARLEY_REQUIRE_PEERS=1.
func TestConformance(t *testing.T) {
	testsigner.Run(t, func(t *testing.T) *testsigner.Kit {
		h := newHSM(t)
		h.cfg.Sessions = 2
		h.cfg.Timeout.Duration = time.Second
		pub := h.init()
		var last *Signer // the backend Open returned last
		return &testsigner.Kit{
			Backend:  signer.PKCS11,
			Public:   pub,
			Deadline: h.cfg.Timeout.Duration,
			Open: func(t *testing.T) signer.Backend {
				s, err := Open(h.cfg, Options{Principal: pub, Logf: t.Logf})
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				last = s
				return s
			},
			WrongSecret: func(t *testing.T) (signer.Backend, error) {
				cfg := h.cfg
				cfg.PINFile = h.write("wrong-pin", "0000\n")
				s, err := Open(cfg, Options{Principal: pub, Logf: t.Logf})
				if s == nil {
					return nil, err
				}
				return s, err
			},
			GoAway: func(t *testing.T) {
				if err := h.tok.Remove(); err != nil {
					t.Fatal(err)
				}
			},
			Hang: func(t *testing.T) func() {
				release := make(chan struct{})
				var started sync.WaitGroup
				for i := 0; i < h.cfg.Sessions; i++ {
					started.Add(1)
					go last.call(context.Background(), func(*session) error {
						started.Done()
						<-release
						return nil
					})
				}
				started.Wait()
				return func() { close(release) }
			},
			Lie: map[string]func(*testing.T) func(){
				testsigner.WrongKey: func(t *testing.T) func() { return signWithAnotherKey(t, last) },
			},
			Says: map[string]string{
				testsigner.WrongSecret: "wrong PIN",
				testsigner.Gone:        "pkcs11",
				testsigner.Hung:        "every session is busy",
				testsigner.WrongKey:    "does not verify under principal.pub",
			},
		}
	})
}

// signWithAnotherKey makes every session of s sign with a second key pair
// of the token, as a token holding another key under the label would, and
// returns the function that puts the principal key back.
func signWithAnotherKey(t *testing.T, s *Signer) func() {
	t.Helper()
	var other pkcs11.ObjectHandle
	err := s.call(context.Background(), func(ss *session) error {
		_, priv, err := s.ctx.GenerateKeyPair(ss.h, []*pkcs11.Mechanism{pkcs11.NewMechanism(ckmECEdwardsKeyPairGen, nil)},
			[]*pkcs11.Attribute{pkcs11.NewAttribute(pkcs11.CKA_TOKEN, true), pkcs11.NewAttribute(pkcs11.CKA_EC_PARAMS, ed25519Params),
				pkcs11.NewAttribute(pkcs11.CKA_LABEL, "impostor"), pkcs11.NewAttribute(pkcs11.CKA_VERIFY, true)},
			[]*pkcs11.Attribute{pkcs11.NewAttribute(pkcs11.CKA_TOKEN, true), pkcs11.NewAttribute(pkcs11.CKA_PRIVATE, true),
				pkcs11.NewAttribute(pkcs11.CKA_SENSITIVE, true), pkcs11.NewAttribute(pkcs11.CKA_LABEL, "impostor"),
				pkcs11.NewAttribute(pkcs11.CKA_SIGN, true)})
		other = priv
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every session of the pool, opened now if it was not yet.
	var held []*session
	was := map[*session]pkcs11.ObjectHandle{}
	for i := 0; i < s.cfg.Sessions; i++ {
		ss := <-s.pool
		if ss == nil {
			if ss, err = s.openSession(false); err != nil {
				t.Fatal(err)
			}
		}
		was[ss] = ss.key
		ss.key = other
		held = append(held, ss)
	}
	for _, ss := range held {
		s.pool <- ss
	}
	return func() {
		for i := 0; i < s.cfg.Sessions; i++ {
			ss := <-s.pool
			if k, ok := was[ss]; ok {
				ss.key = k
			}
			s.pool <- ss
		}
	}
}
