package transit

import (
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testsigner"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testtransit"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
)

// TestConformance holds the transit backend, against testtransit, to the
// table every backend passes (internal/testkit/testsigner). Its wrong secret is a
// token the service does not accept; it goes away by closing, hangs by
// holding sign replies back, and lies by signing with another key, with
// another key version, or with a reply that never ends. What only transit
// has (failover, AppRole, key versions, redirects) stays in this package's
// other tests.
func TestConformance(t *testing.T) {
	testsigner.Run(t, func(t *testing.T) *testsigner.Kit {
		f := newFixture(t, false)
		f.cfg.Timeout.Duration = time.Second
		open := func(cfg signer.TransitConfig) (signer.Backend, error) {
			s, err := Open(cfg, Options{Principal: f.pub, Logf: t.Logf})
			if s == nil {
				return nil, err
			}
			return s, err
		}
		lie := func(fault testtransit.Fault) func(*testing.T) func() {
			return func(*testing.T) func() {
				f.srv.SetFault(&fault)
				return func() { f.srv.SetFault(nil) }
			}
		}
		return &testsigner.Kit{
			Backend:  signer.Transit,
			Public:   f.pub,
			Deadline: f.cfg.Timeout.Duration,
			Open: func(t *testing.T) signer.Backend {
				s, err := open(f.config())
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				return s
			},
			WrongSecret: func(t *testing.T) (signer.Backend, error) {
				cfg := f.config()
				cfg.TokenFile = f.write("wrong-token", "s.not-the-daemons\n")
				return open(cfg)
			},
			GoAway: func(*testing.T) { f.srv.Close() },
			Hang: func(*testing.T) func() {
				f.srv.SetFault(&testtransit.Fault{Path: "/sign/", Delay: time.Minute})
				return func() { f.srv.SetFault(nil) }
			},
			Lie: map[string]func(*testing.T) func(){
				testsigner.WrongSignature: lie(testtransit.Fault{Path: "/sign/", BadSignature: true}),
				testsigner.WrongKey: func(t *testing.T) func() {
					f.srv.Rotate(keyName)
					return lie(testtransit.Fault{Path: "/sign/", Version: 2})(t)
				},
				testsigner.OversizedReply: lie(testtransit.Fault{Path: "/sign/", Endless: true}),
			},
			Says: map[string]string{
				testsigner.WrongSecret:    "HTTP 403",
				testsigner.Gone:           "connection refused",
				testsigner.Hung:           "deadline exceeded",
				testsigner.WrongSignature: "does not verify under principal.pub",
				testsigner.WrongKey:       "signed with key version 2, not the pinned version 1",
				testsigner.OversizedReply: "longer than",
			},
		}
	})
}
