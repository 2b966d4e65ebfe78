package grant

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func allCaveats() []Caveat {
	return []Caveat{
		Svc("shop.example", "cal.example"), Verbs("ASK", "COMMIT"), Can("shop.*"),
		Exp(testNow + 3600), Nbf(testNow - 3600),
		Per(Money{3000, "USD"}), Spend(Money{5000, "USD"}), Risk(riskMedium), Only("HASH"),
	}
}

func TestIssueDecodeRoundTrip(t *testing.T) {
	root := issue(t, allCaveats()...)
	tok := delegate(t, root, keyAgent, keySub, Can("shop.search"), Verbs("ASK"))
	text := tok.Encode()
	if !strings.HasPrefix(text, "pg1.") {
		t.Fatalf("token %q lacks the pg1. prefix", text)
	}
	got, err := Decode(text)
	if err != nil {
		t.Fatal(err)
	}
	if got.Encode() != text {
		t.Error("decoded token re-encodes differently")
	}
	for i := range tok.Blocks {
		if diff := cmp.Diff(payloadOf(tok.Blocks[i]), payloadOf(got.Blocks[i]), cmpopts.IgnoreUnexported(Block{})); diff != "" {
			t.Errorf("block %d payload (-issued +decoded):\n%s", i, diff)
		}
		if string(tok.Blocks[i].Sig) != string(got.Blocks[i].Sig) {
			t.Errorf("block %d: signature differs", i)
		}
	}
	if err := got.CheckChain(); err != nil {
		t.Fatal(err)
	}
	if got.ID() != root.ID() || got.Blocks[1].Prev != root.ID() {
		t.Error("grant id or prev link is not the root block id")
	}
	if got.Holder() != pubText(keySub) || got.Issuer() != principalPub {
		t.Errorf("holder %s issuer %s", got.Holder(), got.Issuer())
	}
	if e, ok := got.Expiry(); !ok || e != testNow+3600 {
		t.Errorf("Expiry = %d, %v", e, ok)
	}
	// The root payload is signed in exactly this canonical form (§6.2).
	wantRoot := `{"caveats":[{"svc":["shop.example","cal.example"]},{"verbs":["ASK","COMMIT"]},{"can":["shop.*"]},` +
		`{"exp":1790003600},{"nbf":1789996400},{"per":{"currency":"USD","max":3000}},` +
		`{"spend":{"currency":"USD","max":5000}},{"risk":"medium"},{"only":"HASH"}],` +
		`"iat":1789999900,"iss":"` + principalPub + `","nonce":"nonce-1","sub":"` + pubText(keyAgent) + `"}`
	if s := string(got.Blocks[0].signed); s != wantRoot {
		t.Errorf("root payload\n got %s\nwant %s", s, wantRoot)
	}
}

// sig86 is a well-formed (not valid) signature text: Decode checks form only.
var sig86 = strings.Repeat("A", 86)

func rootPayload(fields string) string {
	return `{"caveats":[],"iat":1,"iss":"` + principalPub + `","nonce":"n",` + fields + `"sub":"` + pubText(keyAgent) + `"}`
}

func tokenOf(payloads ...string) string {
	var b strings.Builder
	b.WriteString("[")
	for i, p := range payloads {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"p":` + p + `,"s":"` + sig86 + `"}`)
	}
	b.WriteString("]")
	return encodeBody(b.String())
}

func TestDecode(t *testing.T) {
	agent := pubText(keyAgent)
	okRoot := rootPayload("")
	deleg := `{"caveats":[],"iat":2,"prev":"` + strings.Repeat("A", 43) + `","sub":"` + agent + `"}`
	withCaveats := func(cs string) string {
		return `{"caveats":[` + cs + `],"iat":1,"iss":"` + principalPub + `","nonce":"n","sub":"` + agent + `"}`
	}
	valid := tokenOf(okRoot)
	many := func(n int, item string) string {
		return strings.TrimSuffix(strings.Repeat(item+",", n), ",")
	}

	okCases := []struct{ name, tok string }{
		{"ok/root", valid},
		{"ok/delegated", tokenOf(okRoot, deleg)},
		{"ok/unknown-caveat-decodes", tokenOf(withCaveats(`{"region":"eu"}`))},
		{"ok/malformed-caveat-value-decodes", tokenOf(withCaveats(`{"svc":"shop.example"}`))},
		{"ok/nested-caveat-value", tokenOf(withCaveats(`{"x":{"a":[1,{"b":null}]}}`))},
		{"ok/max-blocks", tokenOf(append([]string{okRoot}, repeat(deleg, maxBlocks-1)...)...)},
		{"ok/max-caveats", tokenOf(withCaveats(many(maxCaveatsPerBlock, `{"exp":1}`)))},
	}
	for _, tt := range okCases {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := Decode(tt.tok)
			if err != nil {
				t.Fatal(err)
			}
			if tok.Encode() != tt.tok {
				t.Error("re-encoded token differs")
			}
		})
	}

	failCases := []struct{ name, tok string }{
		{"fail/empty", ""},
		{"fail/no-prefix", strings.TrimPrefix(valid, "pg1.")},
		{"fail/other-version", "pg2." + strings.TrimPrefix(valid, "pg1.")},
		{"fail/padding", valid + "="},
		{"fail/newline-in-b64", valid[:20] + "\n" + valid[20:]},
		{"fail/std-alphabet", strings.NewReplacer("-", "+", "_", "/").Replace(valid) + "+"},
		{"fail/not-json", encodeBody("nope")},
		{"fail/no-blocks", encodeBody("[]")},
		{"fail/not-a-list", encodeBody(`{"p":{},"s":""}`)},
		{"fail/whitespace", encodeBody(`[ {"p":` + okRoot + `,"s":"` + sig86 + `"}]`)},
		{"fail/trailing-data", encodeBody(body(t, valid) + "\n")},
		{"fail/s-before-p", encodeBody(`[{"s":"` + sig86 + `","p":` + okRoot + `}]`)},
		{"fail/extra-block-field", encodeBody(`[{"p":` + okRoot + `,"s":"` + sig86 + `","x":1}]`)},
		{"fail/escaped-key", encodeBody(`[{"\u0070":` + okRoot + `,"s":"` + sig86 + `"}]`)},
		{"fail/unknown-payload-field", tokenOf(rootPayload(`"region":"eu",`))},
		{"fail/payload-keys-out-of-order", tokenOf(`{"iat":1,"caveats":[],"iss":"` + principalPub + `","nonce":"n","sub":"` + agent + `"}`)},
		{"fail/root-with-prev", tokenOf(rootPayload(`"prev":"` + strings.Repeat("A", 43) + `",`))},
		{"fail/root-without-nonce", tokenOf(`{"caveats":[],"iat":1,"iss":"` + principalPub + `","sub":"` + agent + `"}`)},
		{"fail/root-without-iss", tokenOf(`{"caveats":[],"iat":1,"nonce":"n","sub":"` + agent + `"}`)},
		{"fail/without-caveats", tokenOf(`{"iat":1,"iss":"` + principalPub + `","nonce":"n","sub":"` + agent + `"}`)},
		{"fail/without-iat", tokenOf(`{"caveats":[],"iss":"` + principalPub + `","nonce":"n","sub":"` + agent + `"}`)},
		{"fail/without-sub", tokenOf(`{"caveats":[],"iat":1,"iss":"` + principalPub + `","nonce":"n"}`)},
		{"fail/root-first-is-delegation", tokenOf(deleg)},
		{"fail/delegation-with-iss", tokenOf(okRoot, `{"caveats":[],"iat":2,"iss":"`+principalPub+`","prev":"`+strings.Repeat("A", 43)+`","sub":"`+agent+`"}`)},
		{"fail/delegation-with-nonce", tokenOf(okRoot, `{"caveats":[],"iat":2,"nonce":"n","prev":"`+strings.Repeat("A", 43)+`","sub":"`+agent+`"}`)},
		{"fail/delegation-without-prev", tokenOf(okRoot, `{"caveats":[],"iat":2,"sub":"`+agent+`"}`)},
		{"fail/prev-wrong-length", tokenOf(okRoot, `{"caveats":[],"iat":2,"prev":"AAAA","sub":"`+agent+`"}`)},
		{"fail/iss-not-a-key", tokenOf(strings.Replace(okRoot, principalPub, "ed25519:AAAA", 1))},
		{"fail/sub-not-a-key", tokenOf(strings.Replace(okRoot, agent, "bob", 1))},
		{"fail/iat-float", tokenOf(strings.Replace(okRoot, `"iat":1,`, `"iat":1.0,`, 1))},
		{"fail/iat-string", tokenOf(strings.Replace(okRoot, `"iat":1,`, `"iat":"1",`, 1))},
		{"fail/iat-unsafe", tokenOf(strings.Replace(okRoot, `"iat":1,`, `"iat":9007199254740992,`, 1))},
		{"fail/nonce-not-string", tokenOf(strings.Replace(okRoot, `"nonce":"n"`, `"nonce":1`, 1))},
		{"fail/caveat-not-object", tokenOf(withCaveats(`"svc"`))},
		{"fail/caveat-two-keys", tokenOf(withCaveats(`{"exp":1,"nbf":1}`))},
		{"fail/caveat-empty-object", tokenOf(withCaveats(`{}`))},
		{"fail/caveat-value-float", tokenOf(withCaveats(`{"exp":1.5}`))},
		{"fail/caveat-value-not-canonical", tokenOf(withCaveats(`{"per":{"max":1,"currency":"USD"}}`))},
		{"fail/caveat-value-escaped", tokenOf(withCaveats(`{"only":"\u0041"}`))},
		{"fail/caveat-value-too-deep", tokenOf(withCaveats(`{"x":` + strings.Repeat("[", 10) + strings.Repeat("]", 10) + `}`))},
		{"fail/sig-short", encodeBody(`[{"p":` + okRoot + `,"s":"` + sig86[:85] + `"}]`)},
		{"fail/sig-padded", encodeBody(`[{"p":` + okRoot + `,"s":"` + sig86 + `=="}]`)},
		{"fail/sig-not-string", encodeBody(`[{"p":` + okRoot + `,"s":1}]`)},
		{"fail/too-many-blocks", tokenOf(append([]string{okRoot}, repeat(deleg, maxBlocks)...)...)},
		{"fail/too-many-caveats", tokenOf(withCaveats(many(maxCaveatsPerBlock+1, `{"exp":1}`)))},
		{"fail/list-too-long", tokenOf(withCaveats(`{"svc":[` + many(maxListLen+1, `"a"`) + `]}`))},
		{"fail/string-too-long", tokenOf(strings.Replace(okRoot, `"nonce":"n"`, `"nonce":"`+strings.Repeat("n", maxStringLen+1)+`"`, 1))},
		{"fail/token-too-long", tokenOf(withCaveats(many(30, `{"x":"`+strings.Repeat("y", 1000)+`"}`)), withCaveats(many(30, `{"x":"`+strings.Repeat("y", 1000)+`"}`)))},
	}
	for _, tt := range failCases {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := Decode(tt.tok)
			if err == nil {
				t.Fatalf("Decode = %+v, want an error", tok)
			}
			if !errors.Is(err, errMalformedToken) {
				t.Errorf("error %v does not wrap errMalformedToken", err)
			}
		})
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// failingSigner returns a fixed signature, valid or not.
type failingSigner struct {
	pub ed25519.PublicKey
	sig []byte
	err error
}

func (s failingSigner) Public() crypto.PublicKey { return s.pub }
func (s failingSigner) Sign(io.Reader, []byte, crypto.SignerOpts) ([]byte, error) {
	return s.sig, s.err
}

func TestIssueRefuses(t *testing.T) {
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	agent := pub(keyAgent)
	tests := []struct {
		name    string
		signer  crypto.Signer
		holder  ed25519.PublicKey
		caveats []Caveat
		iat     int64
		nonce   string
	}{
		{"fail/unknown-caveat", keyPrincipal, agent, []Caveat{{Name: "region", Value: []byte(`"eu"`)}}, 1, "n"},
		{"fail/malformed-risk", keyPrincipal, agent, []Caveat{Risk("extreme")}, 1, "n"},
		{"fail/svc-not-list", keyPrincipal, agent, []Caveat{{Name: "svc", Value: []byte(`"a"`)}}, 1, "n"},
		{"fail/exp-out-of-range", keyPrincipal, agent, []Caveat{Exp(1 << 60)}, 1, "n"},
		{"fail/too-many-caveats", keyPrincipal, agent, make([]Caveat, maxCaveatsPerBlock+1), 1, "n"},
		{"fail/empty-nonce", keyPrincipal, agent, nil, 1, ""},
		{"fail/iat-out-of-range", keyPrincipal, agent, nil, -1 << 60, "n"},
		{"fail/short-holder", keyPrincipal, agent[:31], nil, 1, "n"},
		{"fail/not-ed25519", ecKey, agent, nil, 1, "n"},
		{"fail/signer-error", failingSigner{pub: pub(keyPrincipal), err: errors.New("hsm offline")}, agent, nil, 1, "n"},
		{"fail/signer-bad-signature", failingSigner{pub: pub(keyPrincipal), sig: make([]byte, 64)}, agent, nil, 1, "n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tok, err := Issue(tt.signer, tt.holder, tt.caveats, tt.iat, tt.nonce); err == nil {
				t.Errorf("Issue = %s, want an error", tok.Encode())
			}
		})
	}
}

func TestDelegate(t *testing.T) {
	root := issue(t, Can("shop.*"))
	t.Run("fail/not-the-holder", func(t *testing.T) {
		if _, err := root.Delegate(keyMallory, pub(keySub), nil, testNow); err == nil {
			t.Error("a key that does not hold the grant delegated it")
		}
	})
	t.Run("fail/principal-is-not-the-holder", func(t *testing.T) {
		if _, err := root.Delegate(keyPrincipal, pub(keySub), nil, testNow); err == nil {
			t.Error("the principal delegated a grant held by the agent")
		}
	})
	t.Run("fail/unknown-caveat", func(t *testing.T) {
		if _, err := root.Delegate(keyAgent, pub(keySub), []Caveat{{Name: "region", Value: []byte(`"eu"`)}}, testNow); err == nil {
			t.Error("delegated with an unknown caveat")
		}
	})
	t.Run("fail/max-blocks", func(t *testing.T) {
		tok := root
		for range maxBlocks - 1 {
			tok = delegate(t, tok, keyAgent, keyAgent)
		}
		if _, err := tok.Delegate(keyAgent, pub(keyAgent), nil, testNow); err == nil {
			t.Errorf("delegated past %d blocks", maxBlocks)
		}
	})
	t.Run("ok/original-unchanged", func(t *testing.T) {
		before := root.Encode()
		d := delegate(t, root, keyAgent, keySub, Verbs("ASK"))
		d2 := delegate(t, root, keyAgent, keyMallory)
		if root.Encode() != before || len(root.Blocks) != 1 {
			t.Error("Delegate changed the token it was called on")
		}
		if d.Holder() != pubText(keySub) || d2.Holder() != pubText(keyMallory) {
			t.Error("delegations share state")
		}
		if err := d.CheckChain(); err != nil {
			t.Error(err)
		}
	})
}

func TestCheckChain(t *testing.T) {
	root := issue(t, Can("shop.*"))
	good := delegate(t, root, keyAgent, keySub, Verbs("ASK"))
	deleg := payloadOf(good.Blocks[1])

	brokenPrev := deleg
	brokenPrev.Prev = b64.EncodeToString(make([]byte, 32))
	wrongSigner := deleg

	tampered := *good
	tampered.Blocks = append([]Block{}, good.Blocks...)
	tampered.Blocks[1].signed = []byte(strings.Replace(string(good.Blocks[1].signed), `"ASK"`, `"COMMIT"`, 1))

	otherRoot := issue(t, Can("*"))
	spliced := &Token{Blocks: []Block{otherRoot.Blocks[0], good.Blocks[1]}}

	rootWithPrev := payloadOf(root.Blocks[0])
	rootWithPrev.Prev = root.ID()

	tests := []struct {
		name string
		tok  *Token
	}{
		{"fail/broken-prev-link", &Token{Blocks: []Block{root.Blocks[0], forgeBlock(t, keyAgent, brokenPrev, false)}}},
		{"fail/delegation-signed-by-wrong-key", &Token{Blocks: []Block{root.Blocks[0], forgeBlock(t, keyMallory, wrongSigner, false)}}},
		{"fail/delegation-signed-by-principal", &Token{Blocks: []Block{root.Blocks[0], forgeBlock(t, keyPrincipal, wrongSigner, false)}}},
		{"fail/root-signed-by-holder", &Token{Blocks: []Block{forgeBlock(t, keyAgent, payloadOf(root.Blocks[0]), true)}}},
		{"fail/tampered-delegation", &tampered},
		{"fail/block-spliced-under-other-root", spliced},
		{"fail/no-blocks", &Token{}},
		{"fail/root-with-prev", &Token{Blocks: []Block{withSig(rootWithPrev, root.Blocks[0].Sig)}}},
	}
	if err := good.CheckChain(); err != nil {
		t.Fatalf("good chain: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.tok.CheckChain()
			if codeOf(err) != codeUnauthorized {
				t.Errorf("CheckChain = %v, want unauthorized", err)
			}
			if len(tt.tok.Blocks) == 0 || tt.tok.Blocks[0].signed == nil {
				return // a hand-built root encodes as a root, without prev
			}
			// Through the wire as well: the verdict must not change.
			if _, err := Decode(tt.tok.Encode()); err == nil {
				_, err = Verify([]string{tt.tok.Encode()}, []string{principalPub}, Context{
					Service: "shop.example", Verb: "ASK", Capability: "shop.search", Now: testNow, ProofKey: tt.tok.Holder(),
				})
				if codeOf(err) != codeUnauthorized {
					t.Errorf("Verify = %v, want unauthorized", err)
				}
			}
		})
	}
}

func TestConsent(t *testing.T) {
	c := ConsentRequest{
		Proposal: "p_1", Hash: "HASH_OK", Service: "shop.example", Capability: "shop.order",
		Principal: principalPub, Summary: "Buy", Expires: testNow + 600,
	}
	tok, err := IssueConsent(keyPrincipal, pub(keyAgent), c, testNow, "n2")
	if err != nil {
		t.Fatal(err)
	}
	// Exactly the five caveats of §6.6, errata 3, in this order.
	want := `[{"svc":["shop.example"]},{"verbs":["COMMIT"]},{"can":["shop.order"]},{"only":"HASH_OK"},{"exp":1790000600}]`
	got, err := canonical(tok.Blocks[0].Caveats)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("consent caveats\n got %s\nwant %s", got, want)
	}
	if !strings.Contains(string(tok.Blocks[0].signed), `"caveats":`+want) {
		t.Error("signed payload does not carry the consent caveats")
	}

	bad := []struct {
		name   string
		mutate func(*ConsentRequest)
	}{
		{"fail/other-principal", func(c *ConsentRequest) { c.Principal = pubText(keyMallory) }},
		{"fail/no-principal", func(c *ConsentRequest) { c.Principal = "" }},
		{"fail/expires-at-iat", func(c *ConsentRequest) { c.Expires = testNow }},
		{"fail/no-service", func(c *ConsentRequest) { c.Service = "" }},
		{"fail/no-capability", func(c *ConsentRequest) { c.Capability = "" }},
		{"fail/no-hash", func(c *ConsentRequest) { c.Hash = "" }},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			cc := c
			tt.mutate(&cc)
			if _, err := IssueConsent(keyPrincipal, pub(keyAgent), cc, testNow, "n2"); err == nil {
				t.Error("IssueConsent: no error")
			}
		})
	}
}

func TestNewNonce(t *testing.T) {
	n, err := NewNonce(strings.NewReader(strings.Repeat("x", 16)))
	if err != nil {
		t.Fatal(err)
	}
	if n != b64.EncodeToString([]byte(strings.Repeat("x", 16))) {
		t.Errorf("NewNonce = %q", n)
	}
	if _, err := NewNonce(strings.NewReader("short")); err == nil {
		t.Error("NewNonce from a short reader: no error")
	}
	a, _ := NewNonce(rand.Reader)
	b, _ := NewNonce(rand.Reader)
	if a == b || len(a) != 22 {
		t.Errorf("NewNonce gave %q and %q", a, b)
	}
}

// TestEncodeInPieces checks the token text Encode writes in pieces against
// the whole body encoded at once, for bodies on both sides of the pieces'
// boundaries: one block, chains of up to eight, and a caveat grown a byte
// at a time around them.
func TestEncodeInPieces(t *testing.T) {
	check := func(tok *Token) int {
		t.Helper()
		text := tok.Encode()
		b := body(t, text)
		if want := encodeBody(b); text != want {
			t.Fatalf("%d-byte body: Encode wrote %q, the body encoded at once is %q", len(b), text, want)
		}
		return len(b)
	}
	tok := issue(t, allCaveats()...)
	check(tok)
	for range 7 {
		tok = delegate(t, tok, keyAgent, keyAgent, Can("shop.search"))
		check(tok)
	}
	// Bodies longer than a piece, of every length mod 3.
	seen := map[int]bool{}
	for n := 1; n <= 60; n++ {
		tok := issue(t, Svc(strings.Repeat("s", n)+".example"), Exp(testNow+3600))
		for range 4 {
			tok = delegate(t, tok, keyAgent, keyAgent, Can("shop.search"))
		}
		if l := check(tok); l > 768 {
			seen[l%3] = true
		}
	}
	if len(seen) != 3 {
		t.Errorf("bodies over 768 bytes tried only of lengths %v mod 3", seen)
	}
}
