package keyd

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
)

// outageSigner stands for a key service the test switches off: while down,
// Sign and Check answer as a backend whose service does not answer. The
// real backends are tested end to end in cmd/parley-keyd (signer_test.go).
type outageSigner struct {
	priv ed25519.PrivateKey
	down atomic.Bool
	lie  atomic.Bool // sign with another key
}

func (o *outageSigner) Public() crypto.PublicKey { return o.priv.Public() }

func (o *outageSigner) Sign(r io.Reader, msg []byte, opts crypto.SignerOpts) ([]byte, error) {
	if o.down.Load() {
		return nil, signer.Unavailable("transit", 7*time.Second, errors.New("https://bao-1.internal:8200: connection refused"))
	}
	if o.lie.Load() {
		_, other, _ := ed25519.GenerateKey(nil)
		return ed25519.Sign(other, msg), nil
	}
	return ed25519.Sign(o.priv, msg), nil
}

func (o *outageSigner) Describe() signer.Description {
	return signer.Description{Backend: "transit", Key: "transit/parley-principal at https://bao-1.internal:8200", Version: "3"}
}

func (o *outageSigner) Check(context.Context) error {
	if o.down.Load() {
		return signer.Unavailable("transit", 7*time.Second, errors.New("connection refused"))
	}
	return nil
}

func withOutageSigner(o *outageSigner) harnessOpt {
	return func(_ *Config, opts *Options) {
		o.priv = opts.Signer.(ed25519.PrivateKey)
		opts.Signer = o
	}
}

func wantRetry(t *testing.T, err error, code protocol.Code) *protocol.Error {
	t.Helper()
	var e *protocol.Error
	if !errors.As(err, &e) || e.Code != code || e.Retry < 1 {
		t.Fatalf("got %v, want code %s with a retry", err, code)
	}
	return e
}

// TestKeyServiceDown: a key service that is down makes a grant that policy
// allows at once end in "unavailable" with the backend's retry hint, tells
// the agent nothing about the service's addresses, writes the detail to
// the audit log, and leaves the daemon serving.
func TestKeyServiceDown(t *testing.T) {
	o := &outageSigner{}
	h := newHarness(t, withOutageSigner(o))
	c := h.client()
	cal := []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find"), grant.Exp(time.Now().Unix() + 600)}
	if _, err := c.Grant(ctxT(t), newAgentKey(t), cal, nil); err != nil {
		t.Fatalf("grant with the service up: %v", err)
	}
	o.down.Store(true)
	_, err := c.Grant(ctxT(t), newAgentKey(t), cal, nil)
	e := wantRetry(t, err, protocol.CodeUnavailable)
	if e.Retry != 7 || strings.Contains(e.Message, "bao-1") {
		t.Fatalf("refusal = %+v", e)
	}
	recs := auditRecords(t, h)
	last := recs[len(recs)-1]
	if last.Kind != audit.KindError || !strings.Contains(last.Message, "connection refused") {
		t.Fatalf("audit = %+v", last)
	}
	// The same connection and the daemon still answer.
	if _, err := c.Hello(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	o.down.Store(false)
	if _, err := c.Grant(ctxT(t), newAgentKey(t), cal, nil); err != nil {
		t.Fatalf("grant after the service came back: %v", err)
	}
}

// TestKeyServiceLies: a signer that returns a signature by another key
// never makes a grant leave the daemon.
func TestKeyServiceLies(t *testing.T) {
	o := &outageSigner{}
	h := newHarness(t, withOutageSigner(o))
	o.lie.Store(true)
	cal := []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find"), grant.Exp(time.Now().Unix() + 600)}
	res, err := h.client().Grant(ctxT(t), newAgentKey(t), cal, nil)
	if err == nil {
		t.Fatalf("a grant with a bad signature left the daemon: %+v", res)
	}
}

// TestKeyServiceDownAtApproval: a grant that waits for a human is signed
// when the human approves; a key service that is down at that moment is
// reported to the agent and to the approver both.
func TestKeyServiceDownAtApproval(t *testing.T) {
	for _, kind := range []string{"grant", "consent"} {
		t.Run("fail/"+kind, func(t *testing.T) {
			o := &outageSigner{}
			h := newHarness(t, withOutageSigner(o))
			var a *asked
			if kind == "grant" {
				a = askGrant(t, h.client(), newAgentKey(t), grant.Can("mail.read"))
			} else {
				a = askConsentForTest(t, h)
			}
			o.down.Store(true)
			err := h.client().Approve(ctxT(t), a.ev.Request, a.ev.Code, "terminal")
			e := wantRetry(t, err, protocol.CodeUnavailable)
			if !strings.Contains(e.Message, "was approved, but no grant was issued") {
				t.Fatalf("approver was told %q", e.Message)
			}
			_, err = a.wait(t)
			wantRetry(t, err, protocol.CodeUnavailable)
		})
	}
	t.Run("ok/approver-hears-nothing-wrong", func(t *testing.T) {
		h := newHarness(t, withOutageSigner(&outageSigner{}))
		a := askGrant(t, h.client(), newAgentKey(t), grant.Can("mail.read"))
		if err := h.client().Approve(ctxT(t), a.ev.Request, a.ev.Code, "terminal"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.wait(t); err != nil {
			t.Fatal(err)
		}
	})
}

// TestManifestKeyStatus: an approver's HELLO names the backend and says
// whether it answers; an agent's does not.
func TestManifestKeyStatus(t *testing.T) {
	o := &outageSigner{}
	h := newHarness(t, withOutageSigner(o))
	m, err := h.client().Hello(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if m.Key == nil || m.Key.Backend != "transit" || m.Key.Version != "3" || !m.Key.Answers || m.Key.Problem != "" {
		t.Fatalf("key status = %+v", m.Key)
	}
	o.down.Store(true)
	m, _ = h.client().Hello(ctxT(t))
	if m.Key == nil || m.Key.Answers || !strings.Contains(m.Key.Problem, "connection refused") {
		t.Fatalf("key status while down = %+v", m.Key)
	}

	agentOnly := newHarness(t, withOutageSigner(&outageSigner{}), func(cfg *Config, _ *Options) {
		cfg.Access.ApproverUsers, cfg.Access.DualRoleUsers = nil, nil
	})
	m, err = agentOnly.client().Hello(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if m.Key != nil {
		t.Fatalf("an agent was told about the key service: %+v", m.Key)
	}
}

func TestConfigKeyTable(t *testing.T) {
	for _, tc := range []struct{ name, toml, want string }{
		{"ok/absent-means-file", ``, ""},
		{"ok/file", "[key]\nbackend = \"file\"\n", ""},
		{"ok/transit", "[key]\nbackend = \"transit\"\n[key.transit]\naddresses = [\"https://bao:8200\"]\ntoken_file = \"bao-token\"\n", ""},
		{"ok/pkcs11", "[key]\nbackend = \"pkcs11\"\n[key.pkcs11]\nmodule = \"/usr/lib/softhsm/libsofthsm2.so\"\ntoken = \"parley\"\npin_file = \"pin\"\n", ""},
		{"fail/unknown-backend", "[key]\nbackend = \"vault\"\n", "is not one of"},
		{"fail/unknown-key", "[key]\nbackend = \"file\"\npath = \"x\"\n", `unknown key "key.path"`},
		{"fail/unknown-transit-key", "[key]\nbackend = \"transit\"\n[key.transit]\naddresses = [\"https://bao:8200\"]\ntoken_file = \"t\"\nexportable = true\n", `unknown key "key.transit.exportable"`},
		{"fail/transit-no-address", "[key]\nbackend = \"transit\"\n[key.transit]\ntoken_file = \"t\"\n", "addresses is empty"},
		{"fail/transit-two-auths", "[key]\nbackend = \"transit\"\n[key.transit]\naddresses = [\"https://bao:8200\"]\ntoken_file = \"t\"\nrole_id_file = \"r\"\nsecret_id_file = \"s\"\n", "not both"},
		{"fail/transit-path-in-name", "[key]\nbackend = \"transit\"\n[key.transit]\naddresses = [\"https://bao:8200\"]\ntoken_file = \"t\"\nname = \"../sys/raw\"\n", "not a usable"},
		{"fail/pkcs11-relative-module", "[key]\nbackend = \"pkcs11\"\n[key.pkcs11]\nmodule = \"libsofthsm2.so\"\ntoken = \"t\"\npin_file = \"p\"\n", "absolute path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseConfig([]byte(DefaultConfig("/tmp/s", "a", "b")+tc.toml), "config.toml")
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if tc.toml == "" && cfg.Key.Backend != signer.File {
					t.Fatalf("backend %q, want file", cfg.Key.Backend)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// askConsentForTest starts a consent request that waits for a human.
func askConsentForTest(t *testing.T, h *harness) *asked {
	t.Helper()
	exp := time.Now().Unix() + 600
	prop, hash := proposalFor(t, "p_1", 4500, exp)
	a := &asked{res: make(chan error, 1), tok: make(chan *protocol.GrantResult, 1)}
	evs := make(chan protocol.Event, 4)
	c := h.client()
	agent := newAgentKey(t)
	go func() {
		r, err := c.Consent(ctxT(t), agent, "shop.example", consentFor(h.srv.Principal(), "p_1", hash, exp), prop, func(e protocol.Event) { evs <- e })
		a.tok <- r
		a.res <- err
	}()
	select {
	case a.ev = <-evs:
	case err := <-a.res:
		t.Fatalf("consent ended before waiting for approval: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no EVENT with a match code")
	}
	return a
}
