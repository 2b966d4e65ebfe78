package grant

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testkeys"
)

// The attack of issue 10 item 1 (keyless grants): a key that is a
// small-order Ed25519 point takes a signature anyone can make without a
// private key (see internal/testkit/testkeys). A grant held by such a key is usable
// by everyone who sees it.

// forgeProof makes, with no private key, a proof by key for (aud, verb,
// target) at some ts within proofWindow of now. It reports false when no ts
// in the window gives a hash that kills the key: for a key of full order,
// that never happens.
func forgeProof(key ed25519.PublicKey, aud, verb, target string, now int64) (Proof, bool) {
	i, ok := testkeys.Forge(key, 2*proofWindow+1, func(i int) []byte {
		return proofMessage(aud, verb, target, now-proofWindow+int64(i))
	})
	if !ok {
		return Proof{}, false
	}
	return Proof{Key: FormatPublicKey(key), Ts: now - proofWindow + int64(i), Sig: b64.EncodeToString(testkeys.ForgedSig())}, true
}

func TestSmallOrderTableIsSmallOrder(t *testing.T) {
	// Every listed point, in every encoding, takes the keyless signature:
	// so each is of small order (a point with a component of order ℓ never
	// does), and the test below attacks real forgeries, not made-up keys.
	encs := testkeys.SmallOrder()
	if len(encs) != 14 {
		t.Fatalf("%d encodings, want 8 canonical and 6 others", len(encs))
	}
	seen := map[string]bool{}
	for _, k := range encs {
		if seen[string(k.Key)] {
			t.Fatalf("%s: encoding listed twice", k.Name)
		}
		seen[string(k.Key)] = true
		if _, ok := forgeProof(k.Key, "shop.example", "COMMIT", "h", testNow); !ok {
			t.Errorf("%s: no keyless signature verifies, so it is not a small-order point", k.Name)
		}
	}
	if _, ok := forgeProof(pub(keyAgent), "shop.example", "COMMIT", "h", testNow); ok {
		t.Fatal("a keyless signature verifies for a real key")
	}
}

func TestSmallOrderKeysRefused(t *testing.T) {
	for _, k := range testkeys.SmallOrder() {
		t.Run("fail/"+k.Name, func(t *testing.T) {
			text := FormatPublicKey(k.Key)
			if _, err := ParsePublicKey(text); err == nil {
				t.Errorf("ParsePublicKey(%s) accepts it", text)
			}
			if err := CheckPublicKey(k.Key); err == nil {
				t.Error("CheckPublicKey accepts it")
			}
			// Proof key: the forged proof verifies under crypto/ed25519,
			// and VerifyProof refuses it.
			p, ok := forgeProof(k.Key, "shop.example", "COMMIT", "h", testNow)
			if !ok {
				t.Fatal("no forgery")
			}
			if err := VerifyProof(p, "shop.example", "COMMIT", "h", testNow); codeOf(err) != codeUnauthorized {
				t.Errorf("VerifyProof accepts a forged proof: %v", err)
			}
			// Holder of a root grant and of a delegation.
			if _, err := Issue(keyPrincipal, k.Key, nil, testNow, "n"); err == nil {
				t.Error("Issue signs a grant for it")
			}
			if _, err := issue(t, Exp(testNow+60)).Delegate(keyAgent, k.Key, nil, testNow); err == nil {
				t.Error("Delegate hands a grant to it")
			}
			if _, err := IssueConsent(keyPrincipal, k.Key, ConsentRequest{Proposal: "p", Hash: "h", Service: "s",
				Capability: "c", Principal: principalPub, Expires: testNow + 60}, testNow, "n"); err == nil {
				t.Error("IssueConsent signs a consent for it")
			}
		})
	}
}

// forgedToken signs the blocks of a chain whose keys may be small-order
// points: a block signed by such a key gets the keyless signature, found by
// varying iat.
func forgedToken(t *testing.T, blocks ...forged) string {
	t.Helper()
	tok := &Token{}
	for i, f := range blocks {
		p := f.p
		if i > 0 {
			p.Prev = tok.Blocks[i-1].ID()
		}
		found := false
		for iat := int64(testNow - 1000); iat < testNow; iat++ {
			p.Iat = iat
			msg, err := marshalPayload(&p, i == 0)
			if err != nil {
				t.Fatal(err)
			}
			var sig []byte
			if f.signer != nil {
				sig = ed25519.Sign(f.signer, msg)
			} else if ed25519.Verify(f.signerPub, msg, testkeys.ForgedSig()) {
				sig = testkeys.ForgedSig()
			} else {
				continue
			}
			p.Sig, p.signed = sig, msg
			tok.Blocks = append(tok.Blocks, p)
			found = true
			break
		}
		if !found {
			t.Fatal("no forgery")
		}
	}
	return tok.Encode()
}

type forged struct {
	p         Block              // the payload
	signer    ed25519.PrivateKey // a real key, or nil
	signerPub ed25519.PublicKey  // the small-order key that signs, when signer is nil
}

func TestSmallOrderInTokens(t *testing.T) {
	now := int64(testNow)
	ctx := Context{Service: "shop.example", Verb: "ASK", Capability: "shop.search", Now: now}
	for _, k := range testkeys.SmallOrder() {
		text := FormatPublicKey(k.Key)
		t.Run("fail/holder/"+k.Name, func(t *testing.T) {
			// A real principal issued a grant to a small-order holder:
			// anyone who sees it can forge the holder's proof.
			tok := forgedToken(t, forged{p: Block{Iss: principalPub, Sub: text, Nonce: "n", Caveats: []Caveat{}}, signer: keyPrincipal})
			c := ctx
			c.ProofKey = text
			if _, err := Verify([]string{tok}, []string{principalPub}, c); codeOf(err) != codeUnauthorized {
				t.Errorf("Verify accepts a grant held by a small-order key: %v", err)
			}
			if _, err := Decode(tok); err == nil {
				t.Error("Decode accepts it")
			}
		})
		t.Run("fail/delegation-sub/"+k.Name, func(t *testing.T) {
			// The agent delegated to a small-order key; anyone then
			// appends a block "signed" by it, handing the grant to
			// themselves.
			tok := forgedToken(t,
				forged{p: Block{Iss: principalPub, Sub: pubText(keyAgent), Nonce: "n", Caveats: []Caveat{}}, signer: keyPrincipal},
				forged{p: Block{Sub: text, Caveats: []Caveat{}}, signer: keyAgent},
				forged{p: Block{Sub: pubText(keyMallory), Caveats: []Caveat{}}, signerPub: k.Key},
			)
			c := ctx
			c.ProofKey = pubText(keyMallory)
			if _, err := Verify([]string{tok}, []string{principalPub}, c); codeOf(err) != codeUnauthorized {
				t.Errorf("Verify accepts a chain through a small-order key: %v", err)
			}
		})
		t.Run("fail/trusted-issuer/"+k.Name, func(t *testing.T) {
			// A service that trusts a small-order key (a typo'd or
			// hostile --trust) would accept root grants anyone signs.
			tok := forgedToken(t, forged{p: Block{Iss: text, Sub: pubText(keyMallory), Nonce: "n", Caveats: []Caveat{}}, signerPub: k.Key})
			c := ctx
			c.ProofKey = pubText(keyMallory)
			if _, err := Verify([]string{tok}, []string{text}, c); codeOf(err) != codeUnauthorized {
				t.Errorf("Verify accepts a root grant from a trusted small-order key: %v", err)
			}
		})
	}
}

// TestNonCanonicalKeysRefused covers every encoding with y ≥ p, both signs,
// and x = 0 with the sign bit set: each names a point (or no point) that has
// another, canonical spelling, so a key would have two names.
func TestNonCanonicalKeysRefused(t *testing.T) {
	for _, k := range testkeys.NonCanonical() {
		t.Run("fail/"+k.Name, func(t *testing.T) {
			err := CheckPublicKey(k.Key)
			if !errors.Is(err, errKeyNotCanonical) {
				t.Errorf("CheckPublicKey = %v, want errKeyNotCanonical", err)
			}
			if _, err := ParsePublicKey(FormatPublicKey(k.Key)); !errors.Is(err, errKeyNotCanonical) {
				t.Errorf("ParsePublicKey = %v, want errKeyNotCanonical", err)
			}
		})
	}
	// The canonical small-order encodings are refused as small order.
	for _, p := range testkeys.SmallOrderCanonical {
		if err := CheckPublicKey(p.Key); !errors.Is(err, errKeySmallOrder) {
			t.Errorf("%s: CheckPublicKey = %v, want errKeySmallOrder", p.Name, err)
		}
	}
	// Ordinary keys, including those whose bytes sit next to the refused
	// ones, still parse.
	near := []string{
		"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7e", // y = p − 1 − 2^248
		"ebffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // y = p − 2
		"0200000000000000000000000000000000000000000000000000000000000000", // y = 2
	}
	for _, h := range near {
		b, _ := hex.DecodeString(h)
		if err := CheckPublicKey(b); err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}
	for _, k := range []ed25519.PrivateKey{keyPrincipal, keyAgent, keySub, keyMallory} {
		if _, err := ParsePublicKey(pubText(k)); err != nil {
			t.Errorf("%s: %v", pubText(k), err)
		}
	}
	if err := CheckPublicKey(make([]byte, 31)); err == nil || !strings.Contains(err.Error(), "32 bytes") {
		t.Errorf("short key: %v", err)
	}
}

// BenchmarkCheckPublicKey measures what the key check adds to every key that
// is parsed (Verify parses one or two per block), against the floor of the
// parse without it (b64url decoding) and one ed25519.Verify, in the same
// run.
func BenchmarkCheckPublicKey(b *testing.B) {
	text := pubText(keyAgent)
	key := pub(keyAgent)
	b.Run("check", func(b *testing.B) {
		for b.Loop() {
			if CheckPublicKey(key) != nil {
				b.Fatal("refused")
			}
		}
	})
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := ParsePublicKey(text); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor/b64url", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := b64DecodeLen(text[len(publicKeyPrefix):], ed25519.PublicKeySize); err != nil {
				b.Fatal(err)
			}
		}
	})
	msg := []byte("a message")
	sig := ed25519.Sign(keyAgent, msg)
	b.Run("floor/ed25519-verify", func(b *testing.B) {
		for b.Loop() {
			if !ed25519.Verify(key, msg, sig) {
				b.Fatal("bad")
			}
		}
	})
}
