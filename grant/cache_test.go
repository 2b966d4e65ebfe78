package grant

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
)

// widen returns a token with tok's signatures and blocks, except that block
// i carries payload p instead: its signature, and so its block id (§6.2: the
// hash of the signature's text), stay the same. This is the forgery a cache
// keyed by block id alone would let through.
func widen(t testing.TB, tok *Token, i int, edit func(p *Block)) string {
	t.Helper()
	forged := &Token{Blocks: append([]Block(nil), tok.Blocks...)}
	b := &forged.Blocks[i]
	p := payloadOf(*b)
	p.Caveats = append([]Caveat(nil), p.Caveats...)
	edit(&p)
	// Without the signed bytes, Encode writes the edited payload.
	p.Sig = b.Sig
	*b = p
	s := forged.Encode()
	d, err := Decode(s)
	if err != nil {
		t.Fatalf("forged token does not decode: %v", err)
	}
	if d.Blocks[i].ID() != tok.Blocks[i].ID() {
		t.Fatal("the forgery changed the block id; it would not test what it should")
	}
	if d.Blocks[i].Sig == nil || string(d.Blocks[i].signed) == string(tok.Blocks[i].signed) {
		t.Fatal("the forgery did not change the signed payload")
	}
	return s
}

// TestBlockCacheForgery plays an agent that holds a verified grant and tries
// to make a service's cache vouch for a widened copy of it: the same
// signature (and so the same block id) on a payload with more rights.
func TestBlockCacheForgery(t *testing.T) {
	root := issue(t, Svc("shop.example"), Can("shop.search"), Exp(testNow+60))
	chain := delegate(t, root, keyAgent, keySub, Can("shop.search"), Verbs("ASK"), Exp(testNow+30))
	agent, sub := pubText(keyAgent), pubText(keySub)
	ask := Context{Service: "shop.example", Verb: "ASK", Capability: "shop.search", Now: testNow}
	trusted := []string{principalPub}

	tests := []struct {
		name    string
		genuine *Token
		forged  string
		ctx     Context // a request the forged token's payload would allow
	}{
		{
			name: "fail/root-widened-to-every-capability", genuine: root,
			forged: widen(t, root, 0, func(p *Block) { p.Caveats = []Caveat{Can("*"), Exp(testNow + 1e6)} }),
			ctx:    Context{Service: "bank.example", Verb: "COMMIT", Capability: "bank.transfer", Now: testNow + 1000, ProofKey: agent, Proposal: &Proposal{Hash: "h", Risk: riskHigh}},
		},
		{
			name: "fail/root-expiry-removed", genuine: root,
			forged: widen(t, root, 0, func(p *Block) { p.Caveats = p.Caveats[:2] }),
			ctx:    Context{Service: "shop.example", Verb: "ASK", Capability: "shop.search", Now: testNow + 1000, ProofKey: agent},
		},
		{
			name: "fail/root-handed-to-another-holder", genuine: root,
			forged: widen(t, root, 0, func(p *Block) { p.Sub = sub }),
			ctx:    Context{Service: "shop.example", Verb: "ASK", Capability: "shop.search", Now: testNow, ProofKey: sub},
		},
		{
			name: "fail/delegation-caveats-removed", genuine: chain,
			forged: widen(t, chain, 1, func(p *Block) { p.Caveats = []Caveat{} }),
			ctx:    Context{Service: "shop.example", Verb: "COMMIT", Capability: "shop.search", Now: testNow + 45, ProofKey: sub, Proposal: &Proposal{Hash: "h", Risk: riskLow}},
		},
		{
			name: "fail/delegation-iat-changed", genuine: chain,
			forged: widen(t, chain, 1, func(p *Block) { p.Iat++ }),
			ctx:    Context{Service: "shop.example", Verb: "ASK", Capability: "shop.search", Now: testNow, ProofKey: sub},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cache := newBlockCache(16)
			ok := ask
			ok.ProofKey, ok.Cache = tc.genuine.Holder(), cache
			if _, err := Verify([]string{tc.genuine.Encode()}, trusted, ok); err != nil {
				t.Fatalf("genuine grant: %v", err)
			}
			if cache.len() != len(tc.genuine.Blocks) {
				t.Fatalf("cache holds %d blocks after verifying %d", cache.len(), len(tc.genuine.Blocks))
			}
			ctx := tc.ctx
			ctx.Cache = cache
			_, err := Verify([]string{tc.forged}, trusted, ctx)
			var e *Error
			if !errors.As(err, &e) || e.Code != codeUnauthorized {
				t.Fatalf("forged grant with a cached signature: got %v, want unauthorized (bad signature)", err)
			}
			// The answer does not depend on the cache.
			ctx.Cache = nil
			if _, err2 := Verify([]string{tc.forged}, trusted, ctx); !reflect.DeepEqual(err, err2) {
				t.Fatalf("with the cache: %v; without: %v", err, err2)
			}
		})
	}
}

// TestBlockCacheKey checks the cache key at its root: a hit needs the same
// signer key, the same signed bytes and the same signature.
func TestBlockCacheKey(t *testing.T) {
	msg := []byte(`{"caveats":[],"iat":1,"prev":"x","sub":"y"}`)
	sig := ed25519.Sign(keyAgent, msg)
	c := newBlockCache(8)
	if !c.verifySignature(pub(keyAgent), msg, sig) {
		t.Fatal("a valid signature was refused")
	}
	k := c.key(pub(keyAgent), msg, sig)
	if !c.has(&k) {
		t.Fatal("a verified signature was not remembered")
	}
	other := append([]byte(nil), msg...)
	other[len(other)-2] = 'z'
	sig2 := append([]byte(nil), sig...)
	sig2[5] ^= 1
	for name, k := range map[string]blockCacheKey{
		"other-signer":  c.key(pub(keySub), msg, sig),
		"other-payload": c.key(pub(keyAgent), other, sig),
		"other-sig":     c.key(pub(keyAgent), msg, sig2),
		"payload-cut":   c.key(pub(keyAgent), msg[:len(msg)-1], sig),
	} {
		if c.has(&k) {
			t.Errorf("%s: hit", name)
		}
	}
	// A signer key used where the signature was made by another key must
	// be checked, and fail, even though the payload and signature are cached.
	if c.verifySignature(pub(keySub), msg, sig) {
		t.Fatal("a signature was accepted for a key that did not make it")
	}
	// A failed check is never remembered.
	if c.verifySignature(pub(keyAgent), other, sig) || c.len() != 1 {
		t.Fatalf("after a failed check: cache holds %d entries", c.len())
	}
	if c.verifySignature(pub(keyAgent)[:31], msg, sig) || c.verifySignature(pub(keyAgent), msg, sig[:63]) {
		t.Fatal("a key or signature of the wrong length was accepted")
	}
}

// TestBlockCacheStillChecksEverything verifies a grant once, so that all its
// blocks are cached, and then checks that every other step of Verify still
// runs: expiry, nbf, caveats, the holder, the issuer's trust.
func TestBlockCacheStillChecksEverything(t *testing.T) {
	root := issue(t, Svc("shop.example"), Can("shop.*"), Nbf(testNow-10), Exp(testNow+60))
	chain := delegate(t, root, keyAgent, keySub, Verbs("ASK"), Exp(testNow+30))
	tok := []string{chain.Encode()}
	sub := pubText(keySub)
	cache := newBlockCache(0)
	ask := Context{Service: "shop.example", Verb: "ASK", Capability: "shop.search", Now: testNow, ProofKey: sub, Cache: cache}
	if _, err := Verify(tok, []string{principalPub}, ask); err != nil {
		t.Fatal(err)
	}
	if cache.len() != 2 {
		t.Fatalf("cache holds %d blocks, want 2", cache.len())
	}
	with := func(f func(*Context)) Context { c := ask; f(&c); return c }
	tests := []struct {
		name    string
		trusted []string
		ctx     Context
		code    string
		need    []Caveat
	}{
		{"fail/expired-delegation", []string{principalPub}, with(func(c *Context) { c.Now = testNow + 30 }), codeForbidden, []Caveat{Exp(testNow + 30)}},
		{"fail/expired-root-and-delegation", []string{principalPub}, with(func(c *Context) { c.Now = testNow + 60 }), codeForbidden, []Caveat{Exp(testNow + 60), Exp(testNow + 30)}},
		{"fail/not-yet-valid", []string{principalPub}, with(func(c *Context) { c.Now = testNow - 11 }), codeForbidden, []Caveat{Nbf(testNow - 10)}},
		{"fail/other-service", []string{principalPub}, with(func(c *Context) { c.Service = "bank.example" }), codeForbidden, []Caveat{Svc("shop.example")}},
		{"fail/verb-not-delegated", []string{principalPub}, with(func(c *Context) { c.Verb = "INTENT" }), codeForbidden, []Caveat{Verbs("ASK")}},
		{"fail/holder-is-not-the-proof-key", []string{principalPub}, with(func(c *Context) { c.ProofKey = pubText(keyAgent) }), codeUnauthorized, nil},
		{"fail/issuer-no-longer-trusted", []string{pubText(keyMallory)}, ask, codeUnauthorized, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Verify(tok, tc.trusted, tc.ctx)
			var e *Error
			if !errors.As(err, &e) || e.Code != tc.code {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
			if !reflect.DeepEqual(e.Need, tc.need) {
				t.Fatalf("need %v, want %v", e.Need, tc.need)
			}
		})
	}
}

// TestBlockCacheFloodStaysBounded plays an agent that holds one genuine
// grant and delegates it to itself over and over, each time with a new
// block that verifies, to grow a service's cache without end or to evict
// other agents' grants.
func TestBlockCacheFloodStaysBounded(t *testing.T) {
	const size = 64
	cache := newBlockCache(size)
	root := issue(t, Svc("shop.example"), Can("shop.*"), Exp(testNow+3600))
	hot := issue(t, Svc("shop.example"), Can("shop.search"), Exp(testNow+3600))
	hotTok := []string{hot.Encode()}
	ask := Context{Service: "shop.example", Verb: "ASK", Capability: "shop.search", Now: testNow, Cache: cache}
	hotCtx := ask
	hotCtx.ProofKey = hot.Holder()
	trusted := []string{principalPub}
	for i := range 1000 {
		flood := delegate(t, root, keyAgent, keyAgent, Exp(testNow+100+int64(i)))
		c := ask
		c.ProofKey = flood.Holder()
		if _, err := Verify([]string{flood.Encode()}, trusted, c); err != nil {
			t.Fatalf("flood grant %d: %v", i, err)
		}
		if n := cache.len(); n > size {
			t.Fatalf("after %d flood grants the cache holds %d blocks, over its bound of %d", i+1, n, size)
		}
		// Another agent's grant, verified between the flood's requests.
		if _, err := Verify(hotTok, trusted, hotCtx); err != nil {
			t.Fatal(err)
		}
	}
	if n := cache.len(); n != size {
		t.Fatalf("cache holds %d blocks, want it full at %d", n, size)
	}
	// CLOCK gives the entry that is hit between the flood's inserts a
	// second chance every time: the flood did not evict it.
	k := cache.key(pub(keyPrincipal), hot.Blocks[0].signed, hot.Blocks[0].Sig)
	if !cache.has(&k) {
		t.Fatal("the flood evicted a grant that was in use all along")
	}
}

// TestNewBlockCacheSize checks that the shards' capacities add up to exactly
// the size asked for.
func TestNewBlockCacheSize(t *testing.T) {
	for _, size := range []int{-1, 0, 1, 5, 15, 16, 17, 100, 4096} {
		c := newBlockCache(size)
		want := size
		if size < 1 {
			want = defaultBlockCacheSize
		}
		total := 0
		for i := range c.shards {
			if len(c.shards[i].slots) == 0 {
				t.Fatalf("size %d: shard %d has no room", size, i)
			}
			total += len(c.shards[i].slots)
		}
		if total != want {
			t.Errorf("size %d: capacity %d, want %d", size, total, want)
		}
	}
}

// TestBlockCacheZeroValue checks that a BlockCache made with new, as a
// service makes one, remembers what Verify checked and holds at most 4096
// blocks.
func TestBlockCacheZeroValue(t *testing.T) {
	tok := []string{delegate(t, issue(t, Svc("shop.example")), keyAgent, keySub).Encode()}
	cache := new(BlockCache)
	ctx := Context{Service: "shop.example", Verb: "ASK", Capability: "shop.search", Now: testNow, ProofKey: pubText(keySub), Cache: cache}
	if _, err := Verify(tok, []string{principalPub}, ctx); err != nil {
		t.Fatal(err)
	}
	if cache.len() != 2 {
		t.Errorf("cache holds %d blocks, want 2", cache.len())
	}
	total := 0
	for i := range cache.shards {
		total += len(cache.shards[i].slots)
	}
	if total != defaultBlockCacheSize {
		t.Errorf("capacity %d, want %d", total, defaultBlockCacheSize)
	}
}

// TestBlockCacheConcurrent runs verifiers on many goroutines against one
// small cache (so that entries are evicted all the time) with genuine,
// expired and forged grants, under -race. Every answer must be the one
// Verify gives without a cache.
func TestBlockCacheConcurrent(t *testing.T) {
	root := issue(t, Svc("shop.example"), Can("shop.*"), Exp(testNow+60))
	var tokens []string
	for i := range 12 {
		d := delegate(t, root, keyAgent, keySub, Exp(testNow+int64(i*10)))
		tokens = append(tokens, d.Encode())
		if i%3 == 0 {
			tokens = append(tokens, widen(t, d, 1, func(p *Block) { p.Caveats = []Caveat{} }))
		}
	}
	tokens = append(tokens, widen(t, root, 0, func(p *Block) { p.Caveats = []Caveat{Can("*")} }))
	trusted := []string{principalPub}
	ctxFor := func(i int) Context {
		return Context{Service: "shop.example", Verb: "ASK", Capability: "shop.search", Now: testNow + int64(i%7)*10, ProofKey: pubText(keySub)}
	}
	type answer struct {
		res *Result
		err error
	}
	want := map[[2]int]answer{}
	for i := range tokens {
		for j := range 7 {
			res, err := Verify([]string{tokens[i]}, trusted, ctxFor(j))
			want[[2]int{i, j}] = answer{res, err}
		}
	}
	cache := newBlockCache(5)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range 300 {
				i, j := (g*31+n*7)%len(tokens), (g+n)%7
				ctx := ctxFor(j)
				ctx.Cache = cache
				res, err := Verify([]string{tokens[i]}, trusted, ctx)
				if w := want[[2]int{i, j}]; !reflect.DeepEqual(res, w.res) || !reflect.DeepEqual(err, w.err) {
					errs <- fmt.Errorf("token %d at now+%d: got %v, %v; without a cache %v, %v", i, j*10, res, err, w.res, w.err)
					return
				}
				if cache.len() > 5 {
					errs <- fmt.Errorf("cache holds %d blocks, over its bound of 5", cache.len())
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// fuzzCache is shared by every run of FuzzVerifyCache, so that one input can
// meet the signatures an earlier one left in it.
var fuzzCache = newBlockCache(256)

// FuzzVerifyCache checks that a cache never changes what Verify answers:
// the same token and request give the same result with a cache that may
// hold any earlier input's blocks, twice in a row, as without one.
func FuzzVerifyCache(f *testing.F) {
	root := issue(f, Svc("shop.example"), Can("shop.*"), Exp(testNow+60))
	chain := delegate(f, root, keyAgent, keySub, Verbs("ASK"), Exp(testNow+30))
	for _, tok := range append(vectorTokens(f), root.Encode(), chain.Encode()) {
		f.Add(tok, "shop.example", "ASK", "shop.search", int64(testNow), true)
		f.Add(tok, "shop.example", "COMMIT", "shop.order", int64(testNow+40), false)
	}
	f.Add(widen(f, chain, 1, func(p *Block) { p.Caveats = []Caveat{} }), "shop.example", "COMMIT", "shop.search", int64(testNow+40), true)
	f.Add(widen(f, root, 0, func(p *Block) { p.Caveats = []Caveat{Can("*")} }), "bank.example", "ASK", "bank.transfer", int64(testNow), false)
	trusted := []string{principalPub}
	f.Fuzz(func(t *testing.T, tok, service, verb, capability string, now int64, sub bool) {
		proofKey := pubText(keyAgent)
		if sub {
			proofKey = pubText(keySub)
		}
		ctx := Context{Service: service, Verb: verb, Capability: capability, Now: now, ProofKey: proofKey,
			Proposal: &Proposal{Hash: "HASH_OK", Risk: riskLow}}
		res, err := Verify([]string{tok}, trusted, ctx)
		ctx.Cache = fuzzCache
		for range 2 {
			res2, err2 := Verify([]string{tok}, trusted, ctx)
			if !reflect.DeepEqual(res, res2) || !reflect.DeepEqual(err, err2) {
				t.Fatalf("without a cache: %v, %v; with one: %v, %v", res, err, res2, err2)
			}
		}
	})
}
