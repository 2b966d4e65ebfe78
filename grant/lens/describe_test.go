package lens

import (
	"crypto/ed25519"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/parley-keyd/parley-keyd/grant"
)

const testNow = 1790000000

func seedKey(b byte) ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = b
	}
	return ed25519.NewKeyFromSeed(seed)
}

var (
	keyPrincipal = seedKey(1)
	keyAgent     = seedKey(2)
	keySub       = seedKey(3)
)

func pub(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

func pubText(k ed25519.PrivateKey) string { return grant.FormatPublicKey(pub(k)) }

func issue(t *testing.T, caveats ...grant.Caveat) *grant.Token {
	t.Helper()
	tok, err := grant.Issue(keyPrincipal, pub(keyAgent), caveats, testNow-100, "nonce-1")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func delegate(t *testing.T, tok *grant.Token, from, to ed25519.PrivateKey, caveats ...grant.Caveat) *grant.Token {
	t.Helper()
	d, err := tok.Delegate(from, pub(to), caveats, testNow-50)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestCaveatDescribe(t *testing.T) {
	tests := []struct {
		c    grant.Caveat
		want string
	}{
		{grant.Svc("shop.example"), "only at service shop.example"},
		{grant.Svc("a", "b"), "only at services a, b"},
		{grant.Svc(), "only at services (none: never satisfied)"},
		{grant.Verbs("ASK", "INTENT"), "only the verbs ASK, INTENT"},
		{grant.Can("shop.*"), "only capability shop.*"},
		{grant.Exp(1790003600), "expires at 2026-09-21T15:13:20Z"},
		{grant.Nbf(1790000040), "not before 2026-09-21T14:14Z"},
		{grant.Per(grant.Money{Amount: 3000, Currency: "USD"}), "commits cost at most 30.00 USD each"},
		{grant.Spend(grant.Money{Amount: 500, Currency: "JPY"}), "commits cost at most 500 JPY in total"},
		{grant.Risk("medium"), "commits only of proposals with risk medium or lower"},
		{grant.Only("abc"), "commits only the proposal with hash abc"},
		{grant.Caveat{Name: "region", Value: json.RawMessage(`"eu"`)}, `unknown caveat "region" (never satisfied)`},
		{grant.Risk("extreme"), `malformed risk caveat (never satisfied): "extreme"`},
	}
	for _, tt := range tests {
		if got := DescribeCaveat(tt.c); got != tt.want {
			t.Errorf("DescribeCaveat(%s) = %q, want %q", tt.c, got, tt.want)
		}
	}
}

func TestDescribe(t *testing.T) {
	root := issue(t, grant.Svc("shop.example"), grant.Exp(testNow+3600), grant.Per(grant.Money{Amount: 3000, Currency: "USD"}))
	tok := delegate(t, root, keyAgent, keySub, grant.Can("shop.search"), grant.Exp(testNow-1), grant.Exp(testNow+10))
	got := Describe(tok, testNow)
	want := []BlockInfo{
		{
			Index: 0, ID: root.ID(), Signer: grant.FormatPublicKey(pub(keyPrincipal)), Holder: pubText(keyAgent),
			Caveats: root.Blocks[0].Caveats,
			Words: []string{
				"only at service shop.example",
				"expires at " + FormatTime(testNow+3600),
				"commits cost at most 30.00 USD each",
			},
			Iat: testNow - 100, Expires: testNow + 3600, HasExpiry: true,
		},
		{
			Index: 1, ID: tok.Blocks[1].ID(), Signer: pubText(keyAgent), Holder: pubText(keySub),
			Caveats: tok.Blocks[1].Caveats,
			Words: []string{
				"only capability shop.search",
				"expires at " + FormatTime(testNow-1),
				"expires at " + FormatTime(testNow+10),
			},
			Iat: testNow - 50, Expires: testNow - 1, HasExpiry: true, Expired: true,
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Describe (-want +got):\n%s", diff)
	}
	if e, ok := tok.Expiry(); !ok || e != testNow-1 {
		t.Errorf("Expiry = %d, %v; want the earliest exp over all blocks", e, ok)
	}
}

// FuzzDescribe: the words of any token that decodes, and of each of its
// caveats, are made without a panic.
func FuzzDescribe(f *testing.F) {
	tok, err := grant.Issue(keyPrincipal, pub(keyAgent), []grant.Caveat{grant.Svc("s"), grant.Exp(testNow), grant.Per(grant.Money{Amount: 1, Currency: "JPY"})}, testNow, "n")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(tok.Encode())
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := grant.Decode(s)
		if err != nil {
			return
		}
		for _, b := range Describe(tok, 0) {
			for _, c := range b.Caveats {
				_ = DescribeCaveat(c)
			}
		}
	})
}
