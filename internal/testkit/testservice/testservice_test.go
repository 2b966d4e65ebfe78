package testservice

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
)

type world struct {
	t         *testing.T
	principal ed25519.PrivateKey
	svc       *Service
	srv       *httptest.Server
}

func newWorld(t *testing.T, id string) *world {
	t.Helper()
	w := &world{t: t, principal: newKey(t)}
	w.svc = New(Config{ID: id, Principals: []string{pub(w.principal)}})
	w.srv = httptest.NewServer(w.svc)
	t.Cleanup(w.srv.Close)
	return w
}

func newKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func pub(k ed25519.PrivateKey) string { return grant.FormatPublicKey(k.Public().(ed25519.PublicKey)) }

func (w *world) agent(key ed25519.PrivateKey) *Agent {
	return &Agent{URL: w.srv.URL, Service: w.svc.cfg.ID, Key: key}
}

// issue signs a root grant from the world's principal to holder.
func (w *world) issue(holder ed25519.PrivateKey, cavs ...grant.Caveat) string {
	w.t.Helper()
	nonce, _ := grant.NewNonce(rand.Reader)
	tok, err := grant.Issue(w.principal, holder.Public().(ed25519.PublicKey), cavs, time.Now().Unix(), nonce)
	if err != nil {
		w.t.Fatal(err)
	}
	return tok.Encode()
}

// must returns a check that a reply is of kind: must(t, "RECEIPT")(a.Commit(…)).
func must(t *testing.T, kind string) func(*Reply, error) *Reply {
	return func(r *Reply, err error) *Reply {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if r.Kind != kind {
			t.Fatalf("got %s, want %s: %s", r.Kind, kind, r.Raw)
		}
		return r
	}
}

// refused returns a check that a reply is an ERROR with code.
func refused(t *testing.T, code string) func(*Reply, error) *Reply {
	return func(r *Reply, err error) *Reply {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if r.Kind != "ERROR" || r.Code != code {
			t.Fatalf("got %s, want ERROR %s", r.Raw, code)
		}
		return r
	}
}

func order(price int64) map[string]any {
	return map[string]any{"item": "book", "price": price, "currency": "USD"}
}

func TestBriefOverGET(t *testing.T) {
	w := newWorld(t, "shop.example")
	for _, path := range []string{"", "/.well-known/parley"} {
		resp, err := http.Get(w.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var b struct {
			Kind    string            `json:"kind"`
			Service map[string]string `json:"service"`
		}
		json.NewDecoder(resp.Body).Decode(&b)
		resp.Body.Close()
		if b.Kind != "BRIEF" || b.Service["id"] != "shop.example" {
			t.Errorf("GET %q: %+v", path, b)
		}
	}
}

func TestFrameTooLarge(t *testing.T) {
	w := newWorld(t, "shop.example")
	resp, err := http.Post(w.srv.URL, "application/json", bytes.NewReader(make([]byte, maxFrame+10)))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("status %d, want 413", resp.StatusCode)
	}
}

func TestCommitWithinPer(t *testing.T) {
	w := newWorld(t, "shop.example")
	key := newKey(t)
	a := w.agent(key)
	g := w.issue(key, grant.Svc("shop.example"), grant.Can("shop.*"), grant.Exp(time.Now().Unix()+600),
		grant.Per(grant.Money{Amount: 2000, Currency: "USD"}), grant.Spend(grant.Money{Amount: 2500, Currency: "USD"}))

	r := must(t, "ANSWER")(a.Ask("shop.status", g))
	if !strings.Contains(string(r.Data), `"orders":0`) {
		t.Errorf("answer %s", r.Data)
	}
	p, err := must(t, "PROPOSALS")(a.Intent("shop.order", order(1500), g)).Proposal()
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := grant.ProposalHash(mustJSON(t, p)); h != p.Hash {
		t.Fatalf("proposal hash %s, recomputed %s", p.Hash, h)
	}
	refused(t, "conflict")(a.Commit(p.ID, "AAAA"+p.Hash[4:], g))
	rc := must(t, "RECEIPT")(a.Commit(p.ID, p.Hash, g))
	if rc.Replay {
		t.Error("first commit marked as replay")
	}
	tok, _ := grant.Decode(g)
	if got := w.svc.Spent(tok.Blocks[0].ID()); got != 1500 {
		t.Errorf("spent %d, want 1500", got)
	}
	// A retry after a lost response replays, and spends nothing more.
	again := must(t, "RECEIPT")(a.Commit(p.ID, p.Hash, g))
	if !again.Replay || !bytes.Equal(again.Receipt, rc.Receipt) {
		t.Errorf("replay %s", again.Raw)
	}
	// The spend cap counts the first commit: 15 + 15 > 25.
	p2, _ := must(t, "PROPOSALS")(a.Intent("shop.order", order(1500), g)).Proposal()
	refused(t, "consent_required")(a.Commit(p2.ID, p2.Hash, g))

	u := must(t, "RECEIPT")(a.Undo(rc.ReceiptID(), g))
	if !strings.Contains(string(u.Receipt), `"undoes":"`+rc.ReceiptID()+`"`) {
		t.Errorf("undo receipt %s", u.Receipt)
	}
	if again := must(t, "RECEIPT")(a.Undo(rc.ReceiptID(), g)); !again.Replay {
		t.Errorf("second undo not a replay: %s", again.Raw)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestConsentRequired(t *testing.T) {
	w := newWorld(t, "shop.example")
	key := newKey(t)
	a := w.agent(key)
	g := w.issue(key, grant.Svc("shop.example"), grant.Can("shop.*"), grant.Per(grant.Money{Amount: 2000, Currency: "USD"}))
	pr := must(t, "PROPOSALS")(a.Intent("shop.order", order(4500), g))
	p, _ := pr.Proposal()
	e := refused(t, "consent_required")(a.Commit(p.ID, p.Hash, g))
	if e.Consent == nil {
		t.Fatalf("no consent object: %s", e.Raw)
	}
	// The consent object passes the check an agent's tooling makes (§6.6).
	if err := grant.CheckConsent(*e.Consent, "shop.example", p, time.Now().Unix()); err != nil {
		t.Fatalf("consent does not check: %v", err)
	}
	if e.Consent.Principal != pub(w.principal) {
		t.Errorf("consent principal %s", e.Consent.Principal)
	}
	nonce, _ := grant.NewNonce(rand.Reader)
	ct, err := grant.IssueConsent(w.principal, key.Public().(ed25519.PublicKey), *e.Consent, time.Now().Unix(), nonce)
	if err != nil {
		t.Fatal(err)
	}
	c := ct.Encode()
	rc := must(t, "RECEIPT")(a.Commit(p.ID, p.Hash, c))

	cases := []struct {
		name string
		do   func() (*Reply, error)
		code string
		need string
	}{
		{"fail/consent-for-undo", func() (*Reply, error) { return a.Undo(rc.ReceiptID(), c) }, "forbidden", "verbs"},
		{"fail/consent-for-ask", func() (*Reply, error) { return a.Ask("shop.status", c) }, "forbidden", "verbs"},
		{"fail/consent-for-other-proposal", func() (*Reply, error) {
			p2, _ := must(t, "PROPOSALS")(a.Intent("shop.gift", order(4500), g)).Proposal()
			return a.Commit(p2.ID, p2.Hash, c)
		}, "forbidden", "can"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := refused(t, tc.code)(tc.do())
			if !slices.ContainsFunc(r.Need, func(c grant.Caveat) bool { return c.Name == tc.need }) {
				t.Errorf("need %v, want %s among them", r.Need, tc.need)
			}
		})
	}
}

func TestWhoMayCommit(t *testing.T) {
	w := newWorld(t, "shop.example")
	alice, mallory := newKey(t), newKey(t)
	ga := w.issue(alice, grant.Can("shop.*"))
	gm := w.issue(mallory, grant.Can("shop.*"))
	p, _ := must(t, "PROPOSALS")(w.agent(alice).Intent("shop.order", order(100), ga)).Proposal()
	cases := []struct {
		name string
		do   func() (*Reply, error)
		code string
	}{
		{"fail/other-agent-commits", func() (*Reply, error) { return w.agent(mallory).Commit(p.ID, p.Hash, gm) }, "unauthorized"},
		{"fail/no-grants", func() (*Reply, error) { return w.agent(alice).Commit(p.ID, p.Hash) }, "unauthorized"},
		{"fail/intent-without-grants", func() (*Reply, error) { return w.agent(alice).Intent("shop.order", order(1)) }, "unauthorized"},
		{"fail/untrusted-principal", func() (*Reply, error) {
			other := newWorld(t, "shop.example")
			return w.agent(alice).Commit(p.ID, p.Hash, other.issue(alice, grant.Can("shop.*")))
		}, "unauthorized"},
		{"fail/unknown-capability", func() (*Reply, error) { return w.agent(alice).Intent("shop.nothing", order(1), ga) }, "unknown_capability"},
		{"fail/unknown-verb", func() (*Reply, error) { return w.agent(alice).Do("DANCE", nil, "", nil) }, "bad_frame"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { refused(t, tc.code)(tc.do()) })
	}
	must(t, "RECEIPT")(w.agent(alice).Commit(p.ID, p.Hash, ga))
}

func TestProofBoundToService(t *testing.T) {
	w := newWorld(t, "shop.example")
	key := newKey(t)
	g := w.issue(key, grant.Can("shop.*"))
	a := w.agent(key)
	a.Service = "other.example" // proofs signed for another audience
	refused(t, "unauthorized")(a.Ask("shop.status", g))
}
