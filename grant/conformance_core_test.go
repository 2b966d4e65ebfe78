package grant

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/parley-keyd/parley-keyd/grant/internal/jsontext"
)

// The published vectors of /work/shared/conformance, copied byte for byte
// into testdata/conformance. Every case runs; none is skipped.

func readVectors(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "conformance", name))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func TestConformanceCanonical(t *testing.T) {
	var cases []struct {
		Name      string          `json:"name"`
		Input     json.RawMessage `json:"input"`
		Canonical string          `json:"canonical"`
	}
	readVectors(t, "canonical.json", &cases)
	if len(cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			got, err := CanonicalizeJSON(c.Input)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.Canonical {
				t.Errorf("CanonicalizeJSON:\n got %q\nwant %q", got, c.Canonical)
			}
			// The same through a Go value and through the strict reader.
			v, err := parseJSON(c.Input)
			if err != nil {
				t.Fatal(err)
			}
			got2, err := canonical(v)
			if err != nil || string(got2) != c.Canonical {
				t.Errorf("Canonical = %q, %v", got2, err)
			}
			if !jsontext.IsCanonical([]byte(c.Canonical)) {
				t.Errorf("jsontext.IsCanonical(%q) = false", c.Canonical)
			}
		})
	}
}

func TestConformanceKeys(t *testing.T) {
	var cases []struct {
		Seed   string `json:"seed"`
		Public string `json:"public"`
	}
	readVectors(t, "keys.json", &cases)
	if len(cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range cases {
		t.Run(c.Seed, func(t *testing.T) {
			k, err := keyFromSeed(c.Seed)
			if err != nil {
				t.Fatal(err)
			}
			pub := k.Public().(ed25519.PublicKey)
			if got := FormatPublicKey(pub); got != c.Public {
				t.Errorf("FormatPublicKey = %q, want %q", got, c.Public)
			}
			parsed, err := ParsePublicKey(c.Public)
			if err != nil || !parsed.Equal(pub) {
				t.Errorf("ParsePublicKey(%q) = %x, %v", c.Public, parsed, err)
			}
		})
	}
}

func TestConformanceHash(t *testing.T) {
	var cases []struct {
		Name     string          `json:"name"`
		Proposal json.RawMessage `json:"proposal"`
		Hash     string          `json:"hash"`
	}
	readVectors(t, "hash.json", &cases)
	if len(cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			got, err := ProposalHash(c.Proposal)
			if err != nil {
				t.Fatal(err)
			}
			if got != c.Hash {
				t.Errorf("ProposalHash = %q, want %q", got, c.Hash)
			}
			if _, err := ParseProposal(c.Proposal); err != nil {
				t.Errorf("ParseProposal: %v", err)
			}
		})
	}
}

func TestConformanceProof(t *testing.T) {
	var cases []struct {
		Seed   string `json:"seed"`
		Aud    string `json:"aud"`
		Verb   string `json:"verb"`
		Target string `json:"target"`
		Ts     int64  `json:"ts"`
		Key    string `json:"key"`
		Sig    string `json:"sig"`
	}
	readVectors(t, "proof.json", &cases)
	if len(cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range cases {
		t.Run(c.Aud+"/"+c.Verb, func(t *testing.T) {
			k, err := keyFromSeed(c.Seed)
			if err != nil {
				t.Fatal(err)
			}
			p, err := MakeProof(k, c.Aud, c.Verb, c.Target, c.Ts)
			if err != nil {
				t.Fatal(err)
			}
			want := Proof{Key: c.Key, Ts: c.Ts, Sig: c.Sig}
			if diff := cmp.Diff(want, p); diff != "" {
				t.Errorf("MakeProof (-want +got):\n%s", diff)
			}
			if err := VerifyProof(want, c.Aud, c.Verb, c.Target, c.Ts); err != nil {
				t.Errorf("VerifyProof: %v", err)
			}
		})
	}
}

// grantVectors is the shape of grants.json.
type grantVectors struct {
	Seeds            map[string]string `json:"seeds"`
	RootSpendBlockID string            `json:"rootSpendBlockId"`
	Cases            []grantCase       `json:"cases"`
}

type grantCase struct {
	Name     string   `json:"name"`
	Token    string   `json:"token"`
	Trusted  []string `json:"trusted"`
	ProofKey string   `json:"proofKey"`
	Ctx      struct {
		Service    string           `json:"service"`
		Verb       string           `json:"verb"`
		Capability string           `json:"capability"`
		Now        int64            `json:"now"`
		Proposal   *Proposal        `json:"proposal"`
		Spent      map[string]int64 `json:"spent"`
	} `json:"ctx"`
	Spent  map[string]int64 `json:"spent"` // also accepted beside ctx
	Expect struct {
		OK   bool              `json:"ok"`
		Code string            `json:"code"`
		Need []json.RawMessage `json:"need"`
	} `json:"expect"`
}

func (c *grantCase) context() Context {
	spent := c.Ctx.Spent
	if spent == nil {
		spent = c.Spent
	}
	return Context{
		Service:    c.Ctx.Service,
		Verb:       c.Ctx.Verb,
		Capability: c.Ctx.Capability,
		Now:        c.Ctx.Now,
		ProofKey:   c.ProofKey,
		Proposal:   c.Ctx.Proposal,
		Spent:      spent,
	}
}

func TestConformanceGrants(t *testing.T) {
	var v grantVectors
	readVectors(t, "grants.json", &v)
	if len(v.Cases) != 26 {
		t.Fatalf("grants.json has %d cases, want 26", len(v.Cases))
	}
	usedSpent := false
	for _, c := range v.Cases {
		t.Run(c.Name, func(t *testing.T) {
			ctx := c.context()
			usedSpent = usedSpent || len(ctx.Spent) > 0
			res, err := Verify([]string{c.Token}, c.Trusted, ctx)
			if c.Expect.OK {
				if err != nil {
					t.Fatalf("Verify: %v, want ok", err)
				}
				if res.Holder != c.ProofKey {
					t.Errorf("Holder = %q, want %q", res.Holder, c.ProofKey)
				}
				return
			}
			if err == nil {
				t.Fatalf("Verify ok, want %s", c.Expect.Code)
			}
			e, ok := err.(*Error)
			if !ok {
				t.Fatalf("error %T, want *Error", err)
			}
			if e.Code != c.Expect.Code {
				t.Errorf("code %q (%v), want %q", e.Code, e, c.Expect.Code)
			}
			if c.Expect.Need != nil {
				var got []string
				for _, n := range e.Need {
					got = append(got, n.String())
				}
				var want []string
				for _, n := range c.Expect.Need {
					cn, err := CanonicalizeJSON(n)
					if err != nil {
						t.Fatal(err)
					}
					want = append(want, string(cn))
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("need (-want +got):\n%s", diff)
				}
			}
			if e.Code == codeConsentRequired && e.Principal != c.Trusted[0] {
				t.Errorf("consent principal %q, want %q", e.Principal, c.Trusted[0])
			}
		})
	}
	if !usedSpent {
		t.Error("no case carried spent: the vectors' shape changed")
	}
}

// TestConformanceGrantsRoundTrip checks that every vector token that decodes
// re-encodes to the same text, and that the root spend block id matches.
func TestConformanceGrantsRoundTrip(t *testing.T) {
	var v grantVectors
	readVectors(t, "grants.json", &v)
	for _, c := range v.Cases {
		tok, err := Decode(c.Token)
		if err != nil {
			continue // garbage token
		}
		if got := tok.Encode(); got != c.Token {
			t.Errorf("%s: re-encoded token differs", c.Name)
		}
		if c.Name == "root: ask ok" && tok.ID() != v.RootSpendBlockID {
			t.Errorf("root block id %q, want %q", tok.ID(), v.RootSpendBlockID)
		}
	}
}
