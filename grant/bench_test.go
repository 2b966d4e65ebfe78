package grant

import (
	"crypto/ed25519"
	"fmt"
	"testing"
)

// benchChain returns a grant of n blocks, each with typical caveats, and the
// keys and signed payloads of its blocks.
func benchChain(b *testing.B, n int) (tok string, holder string, keys []ed25519.PublicKey, msgs, sigs [][]byte) {
	b.Helper()
	t := issue(b, Svc("shop.example"), Can("shop.*"), Exp(testNow+3600),
		Spend(Money{5000, "USD"}), Per(Money{3000, "USD"}), Risk(riskMedium))
	signer := keyAgent
	for i := 1; i < n; i++ {
		next := seedKey(b64.EncodeToString([]byte(fmt.Sprintf("bench-key-%022d", i))))
		t = delegate(b, t, signer, next, Can("shop.order", "shop.search"), Verbs("ASK", "COMMIT"), Exp(testNow+1800))
		signer = next
	}
	for i := range t.Blocks {
		blk := &t.Blocks[i]
		k := t.Blocks[0].Iss
		if i > 0 {
			k = t.Blocks[i-1].Sub
		}
		pk, err := ParsePublicKey(k)
		if err != nil {
			b.Fatal(err)
		}
		keys = append(keys, pk)
		msgs = append(msgs, blk.signed)
		sigs = append(sigs, blk.Sig)
	}
	return t.Encode(), t.Holder(), keys, msgs, sigs
}

// BenchmarkVerify compares Verify of a chain of n blocks with the n bare
// ed25519.Verify calls it cannot avoid. See docs/performance.md.
func BenchmarkVerify(b *testing.B) {
	for _, n := range []int{1, 3, 8} {
		tok, holder, keys, msgs, sigs := benchChain(b, n)
		ctx := Context{
			Service: "shop.example", Verb: "COMMIT", Capability: "shop.order", Now: testNow, ProofKey: holder,
			Proposal: &Proposal{Hash: "H", Cost: &Money{1000, "USD"}, Risk: riskLow},
			Spent:    map[string]int64{"x": 1},
		}
		tokens, trusted := []string{tok}, []string{principalPub}
		b.Run(fmt.Sprintf("grant/blocks=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Verify(tokens, trusted, ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("ed25519/blocks=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for i := range keys {
					if !ed25519.Verify(keys[i], msgs[i], sigs[i]) {
						b.Fatal("bad signature")
					}
				}
			}
		})
	}
}

// BenchmarkDecode measures decoding alone, without signatures.
func BenchmarkDecode(b *testing.B) {
	tok, _, _, _, _ := benchChain(b, 3)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(tok); err != nil {
			b.Fatal(err)
		}
	}
}
