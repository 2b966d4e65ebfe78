package grant

import (
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// A grant's nearest counterpart built from JWTs, for comparison in the
// benchmarks (docs/performance.md). golang-jwt is imported by tests only.
//
// The shape mirrors benchChain: a chain of n compact JWS tokens (alg EdDSA),
// one per block. Token 0 is signed by the principal and carries iss, sub,
// iat, jti (the nonce) and the root's six caveats as claims: exp, svc, can,
// spend, per, risk. Token i > 0 is signed by the sub of token i−1 and carries
// prev (b64url SHA-256 of token i−1's signature, like a block id), sub, iat
// and the delegation's caveats exp, can and verbs. The verifier does what
// Verify does, as a JWT user would write it: ParseWithClaims into a typed
// struct for each token (golang-jwt checks the alg, the signature and exp),
// with the key of token 0 from the trusted issuer and of each later token
// from the previous sub; the prev links; the holder against the proof key;
// then every caveat against the request.
type jwtBlock struct {
	jwt.RegisteredClaims
	Prev  string   `json:"prev,omitempty"`
	Svc   []string `json:"svc,omitempty"`
	Can   []string `json:"can,omitempty"`
	Verbs []string `json:"verbs,omitempty"`
	Spend *Money   `json:"spend,omitempty"`
	Per   *Money   `json:"per,omitempty"`
	Risk  string   `json:"risk,omitempty"`
}

// jwtChain builds the JWT chain of n blocks that mirrors benchChain(n).
func jwtChain(b testing.TB, n int) []string {
	b.Helper()
	sign := func(key ed25519.PrivateKey, c *jwtBlock) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodEdDSA, c).SignedString(key)
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	at := func(t int64) *jwt.NumericDate { return jwt.NewNumericDate(time.Unix(t, 0)) }
	root := &jwtBlock{
		RegisteredClaims: jwt.RegisteredClaims{Issuer: principalPub, Subject: pubText(keyAgent), IssuedAt: at(testNow - 100),
			ID: "nonce-1", ExpiresAt: at(testNow + 3600)},
		Svc: []string{"shop.example"}, Can: []string{"shop.*"},
		Spend: &Money{5000, "USD"}, Per: &Money{3000, "USD"}, Risk: riskMedium,
	}
	chain := []string{sign(keyPrincipal, root)}
	signer := keyAgent
	for i := 1; i < n; i++ {
		next := seedKey(b64.EncodeToString([]byte(fmt.Sprintf("bench-key-%022d", i))))
		c := &jwtBlock{
			RegisteredClaims: jwt.RegisteredClaims{Subject: pubText(next), IssuedAt: at(testNow - 50), ExpiresAt: at(testNow + 1800)},
			Prev:             jwtID(b, chain[i-1]),
			Can:              []string{"shop.order", "shop.search"}, Verbs: []string{"ASK", "COMMIT"},
		}
		chain = append(chain, sign(signer, c))
		signer = next
	}
	return chain
}

func jwtID(b testing.TB, tok string) string {
	t, _, err := jwt.NewParser().ParseUnverified(tok, &jwtBlock{})
	if err != nil {
		b.Fatal(err)
	}
	sum := sha256.Sum256(t.Signature)
	return b64.EncodeToString(sum[:])
}

var errJWT = errors.New("jwt chain refused")

// verifyJWTChain is Verify's work for a JWT chain (see jwtBlock).
func verifyJWTChain(chain []string, trusted []string, ctx *Context) error {
	parser := jwt.NewParser(jwt.WithValidMethods([]string{"EdDSA"}), jwt.WithExpirationRequired(),
		jwt.WithTimeFunc(func() time.Time { return time.Unix(ctx.Now, 0) }))
	var prevSub, prevID string
	blocks := make([]jwtBlock, len(chain))
	for i, s := range chain {
		c := &blocks[i]
		tok, err := parser.ParseWithClaims(s, c, func(t *jwt.Token) (any, error) {
			if i == 0 {
				if !slices.Contains(trusted, c.Issuer) {
					return nil, errJWT
				}
				return ParsePublicKey(c.Issuer)
			}
			if c.Issuer != "" || c.Prev != prevID {
				return nil, errJWT
			}
			return ParsePublicKey(prevSub)
		})
		if err != nil {
			return err
		}
		sum := sha256.Sum256(tok.Signature)
		prevSub, prevID = c.Subject, b64.EncodeToString(sum[:])
	}
	if prevSub != ctx.ProofKey {
		return errJWT
	}
	for i := range blocks {
		c := &blocks[i]
		if c.Svc != nil && !slices.Contains(c.Svc, ctx.Service) {
			return errJWT
		}
		if c.Verbs != nil && !slices.Contains(c.Verbs, ctx.Verb) {
			return errJWT
		}
		if c.Can != nil && !slices.ContainsFunc(c.Can, func(p string) bool { return matchPattern(p, ctx.Capability) }) {
			return errJWT
		}
		if ctx.Verb != "COMMIT" {
			continue
		}
		cost := ctx.Proposal.Cost
		if c.Per != nil && cost != nil && (cost.Currency != c.Per.Currency || cost.Amount > c.Per.Amount) {
			return errJWT
		}
		if c.Spend != nil && cost != nil && (cost.Currency != c.Spend.Currency || cost.Amount > c.Spend.Amount-ctx.Spent[prevID]) {
			return errJWT
		}
		if c.Risk != "" {
			ceiling, ok := riskRank(c.Risk)
			if r, _ := riskRank(ctx.Proposal.Risk); !ok || r > ceiling {
				return errJWT
			}
		}
	}
	return nil
}

// verifyBench is one shape of grant, its JWT twin, and the request both
// are verified against.
type verifyBench struct {
	tokens  []string
	jwt     []string
	ctx     Context
	trusted []string
	// others are distinct grants of the same shape, for the cache's miss
	// path: verified round-robin through a cache smaller than their
	// blocks, each one misses.
	others [][]string
	keys   []ed25519.PublicKey
	msgs   [][]byte
	sigs   [][]byte
}

func newVerifyBench(b *testing.B, n int) *verifyBench {
	tok, holder, keys, msgs, sigs := benchChain(b, n)
	v := &verifyBench{
		tokens: []string{tok}, jwt: jwtChain(b, n), trusted: []string{principalPub},
		keys: keys, msgs: msgs, sigs: sigs,
		ctx: Context{
			Service: "shop.example", Verb: "COMMIT", Capability: "shop.order", Now: testNow, ProofKey: holder,
			Proposal: &Proposal{Hash: "H", Cost: &Money{1000, "USD"}, Risk: riskLow},
			Spent:    map[string]int64{"x": 1},
		},
	}
	if err := verifyJWTChain(v.jwt, v.trusted, &v.ctx); err != nil {
		b.Fatalf("jwt chain: %v", err)
	}
	for i := range 8 {
		t, err := Decode(tok)
		if err != nil {
			b.Fatal(err)
		}
		// A distinct root (another iat) with the same delegations would
		// break the prev links; a new chain of the same shape is simpler:
		// re-issue the root with another nonce and re-delegate.
		other := issueNonce(b, fmt.Sprintf("other-%d", i), t.Blocks[0].Caveats)
		signer := keyAgent
		for j := 1; j < n; j++ {
			next := seedKey(b64.EncodeToString([]byte(fmt.Sprintf("bench-key-%022d", j))))
			other = delegate(b, other, signer, next, t.Blocks[j].Caveats...)
			signer = next
		}
		v.others = append(v.others, []string{other.Encode()})
	}
	return v
}

func issueNonce(b *testing.B, nonce string, caveats []Caveat) *Token {
	tok, err := Issue(keyPrincipal, pub(keyAgent), caveats, testNow-100, nonce)
	if err != nil {
		b.Fatal(err)
	}
	return tok
}

// BenchmarkVerifyCache compares, for grants of 1, 3 and 8 blocks: Verify
// without a cache (cold), with a cache that misses every time (the cost of
// keeping one), with a cache that holds the grant (warm), and the JWT chain
// of the same shape (see jwtBlock). Wall time; BenchmarkVerifyCompare has
// the same in thread CPU time.
func BenchmarkVerifyCache(b *testing.B) {
	for _, n := range []int{1, 3, 8} {
		v := newVerifyBench(b, n)
		b.Run(fmt.Sprintf("cold/blocks=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Verify(v.tokens, v.trusted, v.ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("miss/blocks=%d", n), func(b *testing.B) {
			ctx := v.ctx
			ctx.Cache = newBlockCache(n)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := Verify(v.others[i%len(v.others)], v.trusted, ctx); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run(fmt.Sprintf("warm/blocks=%d", n), func(b *testing.B) {
			ctx := v.ctx
			ctx.Cache = newBlockCache(0)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Verify(v.tokens, v.trusted, ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("jwt/blocks=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := verifyJWTChain(v.jwt, v.trusted, &v.ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestJWTChainRefuses keeps the JWT twin honest: it must refuse what Verify
// refuses, or the comparison would time less work.
func TestJWTChainRefuses(t *testing.T) {
	chain := jwtChain(t, 3)
	holder := pubText(seedKey(b64.EncodeToString([]byte(fmt.Sprintf("bench-key-%022d", 2)))))
	ok := Context{Service: "shop.example", Verb: "COMMIT", Capability: "shop.order", Now: testNow, ProofKey: holder,
		Proposal: &Proposal{Hash: "H", Cost: &Money{1000, "USD"}, Risk: riskLow}}
	trusted := []string{principalPub}
	if err := verifyJWTChain(chain, trusted, &ok); err != nil {
		t.Fatalf("genuine chain: %v", err)
	}
	with := func(f func(*Context)) *Context { c := ok; f(&c); return &c }
	tampered := slices.Clone(chain)
	tampered[1] = tampered[1][:len(tampered[1])-2] + "AA"
	for name, tc := range map[string]struct {
		chain   []string
		trusted []string
		ctx     *Context
	}{
		"fail/expired":       {chain, trusted, with(func(c *Context) { c.Now = testNow + 1800 })},
		"fail/service":       {chain, trusted, with(func(c *Context) { c.Service = "bank.example" })},
		"fail/capability":    {chain, trusted, with(func(c *Context) { c.Capability = "shop.refund" })},
		"fail/verb":          {chain, trusted, with(func(c *Context) { c.Verb = "INTENT" })},
		"fail/cost-over-per": {chain, trusted, with(func(c *Context) { c.Proposal = &Proposal{Cost: &Money{4000, "USD"}, Risk: riskLow} })},
		"fail/risk":          {chain, trusted, with(func(c *Context) { c.Proposal = &Proposal{Cost: &Money{1, "USD"}, Risk: riskHigh} })},
		"fail/holder":        {chain, trusted, with(func(c *Context) { c.ProofKey = pubText(keyAgent) })},
		"fail/untrusted":     {chain, []string{pubText(keyMallory)}, &ok},
		"fail/prev-link":     {[]string{chain[0], chain[2]}, trusted, &ok},
		"fail/bad-signature": {tampered, trusted, &ok},
		"fail/block-missing": {chain[:2], trusted, &ok},
	} {
		if err := verifyJWTChain(tc.chain, tc.trusted, tc.ctx); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
