package grant

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func usd(n int64) *Money { return &Money{Amount: n, Currency: "USD"} }

func TestVerify(t *testing.T) {
	shopCaveats := []Caveat{
		Svc("shop.example"), Can("shop.*"), Exp(testNow + 3600),
		Spend(Money{5000, "USD"}), Per(Money{3000, "USD"}), Risk(riskMedium),
	}
	root := issue(t, shopCaveats...)
	rootID := root.ID()
	sub := delegate(t, root, keyAgent, keySub, Spend(Money{1000, "USD"}), Verbs("ASK", "COMMIT"))
	subID := sub.Blocks[1].ID()
	consent, err := IssueConsent(keyPrincipal, pub(keyAgent), ConsentRequest{
		Proposal: "p_1", Hash: "HASH_OK", Service: "shop.example", Capability: "shop.order",
		Principal: principalPub, Expires: testNow + 600,
	}, testNow, "n2")
	if err != nil {
		t.Fatal(err)
	}
	// An old-style consent grant (only + exp), which must not authorize
	// anything but the one COMMIT either: here, we check what it does
	// authorize, to show why errata 3 forbids issuing it.
	oldConsent := issue(t, Only("HASH_OK"), Exp(testNow+600))
	expired := issue(t, Exp(testNow))
	mallorys, err := Issue(keyMallory, pub(keyAgent), nil, testNow, "m")
	if err != nil {
		t.Fatal(err)
	}
	nonCanonical := encodeBody(strings.Replace(body(t, root.Encode()), `,"s":`, `, "s":`, 1))

	agent, subKey := pubText(keyAgent), pubText(keySub)
	ask := Context{Service: "shop.example", Verb: "ASK", Capability: "shop.search", Now: testNow, ProofKey: agent}
	commit := func(cost *Money, risk string, spent map[string]int64) Context {
		return Context{
			Service: "shop.example", Verb: "COMMIT", Capability: "shop.order", Now: testNow, ProofKey: agent,
			Proposal: &Proposal{Hash: "HASH_OK", Cost: cost, Risk: risk}, Spent: spent,
		}
	}
	with := func(c Context, f func(*Context)) Context { f(&c); return c }
	one := func(tok *Token, caveats ...Caveat) []string {
		if len(caveats) > 0 {
			tok = issue(t, caveats...)
		}
		return []string{tok.Encode()}
	}

	tests := []struct {
		name      string
		tokens    []string
		ctx       Context
		wantCode  string   // "" for ok
		wantNeed  []string // for forbidden
		wantGrant int
		wantSpend []string
	}{
		{name: "ok/ask", tokens: one(root), ctx: ask, wantSpend: []string{rootID}},
		{name: "ok/commit-within-limits", tokens: one(root), ctx: commit(usd(2000), riskLow, nil), wantSpend: []string{rootID}},

		// nbf and exp (§6.3): now ≥ nbf, now < exp.
		{name: "ok/nbf-reached", tokens: one(nil, Nbf(testNow)), ctx: ask},
		{name: "fail/nbf-not-yet", tokens: one(nil, Nbf(testNow+1)), ctx: ask, wantCode: codeForbidden, wantNeed: []string{`{"nbf":1790000001}`}},
		{name: "ok/exp-one-second-left", tokens: one(nil, Exp(testNow+1)), ctx: ask},
		{name: "fail/exp-reached", tokens: one(expired), ctx: ask, wantCode: codeForbidden, wantNeed: []string{`{"exp":1790000000}`}},

		// can patterns (§6.3, errata 1).
		{name: "ok/star-pattern", tokens: one(nil, Can("*")), ctx: with(ask, func(c *Context) { c.Capability = "bank.transfer" })},
		{name: "ok/exact-pattern", tokens: one(nil, Can("shop.search")), ctx: ask},
		{name: "fail/prefix-pattern-bare-name", tokens: one(nil, Can("shop.*")), ctx: with(ask, func(c *Context) { c.Capability = "shop" }),
			wantCode: codeForbidden, wantNeed: []string{`{"can":["shop.*"]}`}},
		{name: "fail/empty-can", tokens: one(nil, Can()), ctx: ask, wantCode: codeForbidden, wantNeed: []string{`{"can":[]}`}},
		{name: "fail/svc-and-can-both-need", tokens: one(root), ctx: with(ask, func(c *Context) { c.Service, c.Capability = "evil.example", "bank.x" }),
			wantCode: codeForbidden, wantNeed: []string{`{"svc":["shop.example"]}`, `{"can":["shop.*"]}`}},

		// per, spend, risk with a null cost and at the edges.
		{name: "ok/null-cost-passes-per-and-spend", tokens: one(root), ctx: commit(nil, riskLow, map[string]int64{rootID: 5000}), wantSpend: []string{rootID}},
		{name: "consent/null-cost-spend-already-over", tokens: one(root), ctx: commit(nil, riskLow, map[string]int64{rootID: 5001}), wantCode: codeConsentRequired},
		{name: "ok/spend-exactly-at-cap", tokens: one(root), ctx: commit(usd(2000), riskLow, map[string]int64{rootID: 3000}), wantSpend: []string{rootID}},
		{name: "consent/spend-one-over", tokens: one(root), ctx: commit(usd(2000), riskLow, map[string]int64{rootID: 3001}), wantCode: codeConsentRequired},
		{name: "ok/spend-of-another-block-ignored", tokens: one(root), ctx: commit(usd(2000), riskLow, map[string]int64{subID: 4999}), wantSpend: []string{rootID}},
		{name: "ok/per-exactly-at-cap", tokens: one(root), ctx: commit(usd(3000), riskMedium, nil), wantSpend: []string{rootID}},
		{name: "consent/per-currency-differs", tokens: one(nil, Per(Money{3000, "USD"})), ctx: commit(&Money{1, "EUR"}, riskLow, nil), wantCode: codeConsentRequired},
		{name: "consent/spend-currency-differs", tokens: one(nil, Spend(Money{3000, "USD"})), ctx: commit(&Money{1, "EUR"}, riskLow, nil), wantCode: codeConsentRequired},
		{name: "consent/risk-above-ceiling", tokens: one(root), ctx: commit(usd(1), riskHigh, nil), wantCode: codeConsentRequired},
		{name: "fail/hard-and-soft-need-only-hard", tokens: one(root), ctx: with(commit(usd(99999), riskHigh, nil), func(c *Context) { c.Capability = "bank.x" }),
			wantCode: codeForbidden, wantNeed: []string{`{"can":["shop.*"]}`}},

		// Spend of a delegated block: attributed to that block's id.
		{name: "ok/delegated-spend", tokens: one(sub), ctx: with(commit(usd(100), riskLow, map[string]int64{subID: 900}), func(c *Context) { c.ProofKey = subKey }),
			wantSpend: []string{rootID, subID}},
		{name: "consent/delegated-spend-over", tokens: one(sub), ctx: with(commit(usd(101), riskLow, map[string]int64{subID: 900}), func(c *Context) { c.ProofKey = subKey }),
			wantCode: codeConsentRequired},
		{name: "fail/delegated-verbs", tokens: one(sub), ctx: with(ask, func(c *Context) { c.Verb, c.ProofKey = "INTENT", subKey }),
			wantCode: codeForbidden, wantNeed: []string{`{"verbs":["ASK","COMMIT"]}`}},

		// UNDO: can against the receipt's capability; per, spend, risk and
		// only do not apply.
		{name: "ok/undo-receipt-capability", tokens: one(nil, Can("shop.*"), Per(Money{0, "USD"}), Only("X")), ctx: with(ask, func(c *Context) { c.Verb, c.Capability = "UNDO", "shop.order" })},
		{name: "fail/undo-receipt-capability", tokens: one(nil, Can("shop.*")), ctx: with(ask, func(c *Context) { c.Verb, c.Capability = "UNDO", "bank.transfer" }),
			wantCode: codeForbidden, wantNeed: []string{`{"can":["shop.*"]}`}},

		// Consent grants (§6.6).
		{name: "ok/consent-commit", tokens: one(consent), ctx: commit(usd(999999), riskHigh, nil)},
		{name: "fail/consent-ask", tokens: one(consent), ctx: with(ask, func(c *Context) { c.Capability = "shop.order" }),
			wantCode: codeForbidden, wantNeed: []string{`{"verbs":["COMMIT"]}`}},
		{name: "fail/consent-other-capability", tokens: one(consent), ctx: with(commit(usd(1), riskLow, nil), func(c *Context) { c.Capability = "shop.refund" }),
			wantCode: codeForbidden, wantNeed: []string{`{"can":["shop.order"]}`}},
		{name: "fail/consent-after-exp", tokens: one(consent), ctx: with(commit(usd(1), riskLow, nil), func(c *Context) { c.Now = testNow + 600 }),
			wantCode: codeForbidden, wantNeed: []string{`{"exp":1790000600}`}},
		{name: "ok/old-style-consent-authorizes-any-ask", tokens: one(oldConsent), ctx: with(ask, func(c *Context) { c.Service = "bank.example" })},

		// Malformed caveats fail closed whatever the verb.
		{name: "fail/malformed-per-on-ask", tokens: []string{tokenWithCaveat(t, `{"per":{"currency":"USD","max":"lots"}}`)}, ctx: ask,
			wantCode: codeForbidden, wantNeed: []string{`{"per":{"currency":"USD","max":"lots"}}`}},
		{name: "fail/malformed-risk-on-ask", tokens: []string{tokenWithCaveat(t, `{"risk":"extreme"}`)}, ctx: ask,
			wantCode: codeForbidden, wantNeed: []string{`{"risk":"extreme"}`}},
		{name: "fail/unknown-caveat", tokens: []string{tokenWithCaveat(t, `{"region":"eu"}`)}, ctx: ask,
			wantCode: codeForbidden, wantNeed: []string{`{"region":"eu"}`}},

		// Grants and proof keys.
		{name: "fail/no-grants", tokens: nil, ctx: ask, wantCode: codeUnauthorized},
		{name: "fail/too-many-grants", tokens: repeat(root.Encode(), MaxGrants+1), ctx: ask, wantCode: codeUnauthorized},
		{name: "fail/no-proof-key", tokens: one(root), ctx: with(ask, func(c *Context) { c.ProofKey = "" }), wantCode: codeUnauthorized},
		{name: "fail/untrusted-principal", tokens: []string{mallorys.Encode()}, ctx: ask, wantCode: codeUnauthorized},
		{name: "fail/non-canonical-token", tokens: []string{nonCanonical}, ctx: ask, wantCode: codeUnauthorized},

		// Several grants: any one suffices (§6.6); otherwise the most
		// useful verdict.
		{name: "ok/second-grant-suffices", tokens: []string{expired.Encode(), root.Encode()}, ctx: ask, wantGrant: 1, wantSpend: []string{rootID}},
		{name: "consent/beats-forbidden-and-unauthorized", tokens: []string{"pg1.bm9wZQ", expired.Encode(), root.Encode()}, ctx: commit(usd(4000), riskLow, nil),
			wantCode: codeConsentRequired},
		{name: "fail/forbidden-beats-unauthorized", tokens: []string{mallorys.Encode(), expired.Encode()}, ctx: ask,
			wantCode: codeForbidden, wantNeed: []string{`{"exp":1790000000}`}},
		{name: "fail/forbidden-with-fewest-needs", tokens: one(nil, Svc("x"), Can("y"))[:1:1], ctx: ask, wantCode: codeForbidden,
			wantNeed: []string{`{"svc":["x"]}`, `{"can":["y"]}`}},
		{name: "fail/fewest-needs-chosen", tokens: append(one(nil, Svc("x"), Can("y")), one(nil, Can("z"))...), ctx: ask, wantCode: codeForbidden,
			wantNeed: []string{`{"can":["z"]}`}},

		// Bad caller input.
		{name: "bad/commit-without-proposal", tokens: one(root), ctx: with(ask, func(c *Context) { c.Verb = "COMMIT" }), wantCode: codeInvalidParams},
		{name: "bad/proposal-risk", tokens: one(root), ctx: commit(usd(1), "extreme", nil), wantCode: codeInvalidParams},
		{name: "bad/negative-cost", tokens: one(root), ctx: commit(usd(-1), riskLow, nil), wantCode: codeInvalidParams},
		{name: "bad/negative-spent", tokens: one(root), ctx: commit(usd(1), riskLow, map[string]int64{rootID: -1}), wantCode: codeInvalidParams},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Verify(tt.tokens, []string{principalPub}, tt.ctx)
			if tt.wantCode == "" {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				tok, _ := Decode(tt.tokens[tt.wantGrant])
				want := &Result{Grant: tt.wantGrant, GrantID: tok.ID(), Holder: tt.ctx.ProofKey, Issuer: principalPub, SpendBlocks: tt.wantSpend}
				if diff := cmp.Diff(want, res); diff != "" {
					t.Errorf("Result (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("Verify ok (%+v), want %s", res, tt.wantCode)
			}
			e := err.(*Error)
			if e.Code != tt.wantCode {
				t.Fatalf("Verify: %v, want %s", e, tt.wantCode)
			}
			var need []string
			for _, c := range e.Need {
				need = append(need, c.String())
			}
			if diff := cmp.Diff(tt.wantNeed, need); diff != "" {
				t.Errorf("need (-want +got):\n%s", diff)
			}
			if e.Code == codeConsentRequired && e.Principal != principalPub {
				t.Errorf("consent principal = %q", e.Principal)
			}
		})
	}
}

// tokenWithCaveat issues a root grant to the agent carrying one caveat
// given as raw JSON, bypassing Issue's refusal of unknown or malformed
// caveats.
func tokenWithCaveat(t *testing.T, caveat string) string {
	t.Helper()
	var c Caveat
	if err := c.UnmarshalJSON([]byte(caveat)); err != nil {
		t.Fatal(err)
	}
	p := Block{Iss: principalPub, Sub: pubText(keyAgent), Caveats: []Caveat{c}, Iat: testNow, Nonce: "n"}
	tok := &Token{Blocks: []Block{forgeBlock(t, keyPrincipal, p, true)}}
	return tok.Encode()
}
