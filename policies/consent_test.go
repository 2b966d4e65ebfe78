package policies

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/parley-keyd/parley-keyd/grant"
)

func TestDecideConsent(t *testing.T) {
	p := testPolicy(t)
	order := ConsentFacts{Service: "shop.example", Capability: "shop.order", Cost: usd(1500), Risk: "low", Expires: now + 3600, Now: now}
	with := func(f func(*ConsentFacts)) ConsentFacts {
		c := order
		f(&c)
		return c
	}
	tests := []struct {
		name     string
		caller   Caller
		facts    ConsentFacts
		want     ConsentDecision
		reason   string
		noReason bool
	}{
		{
			name: "ok/shop-asks-weak", caller: shopCaller, facts: order,
			want: ConsentDecision{Action: Ask, Agent: "shopper", Rule: "shop", Channels: []Channel{Desktop, Phone}, Expires: now + 600},
		},
		{
			name: "ok/shop-expiry-kept-when-sooner", caller: shopCaller, facts: with(func(f *ConsentFacts) { f.Expires = now + 60 }),
			want: ConsentDecision{Action: Ask, Agent: "shopper", Rule: "shop", Channels: []Channel{Desktop, Phone}, Expires: now + 60},
		},
		{
			name: "ok/shop-at-strong-threshold-is-weak", caller: shopCaller, facts: with(func(f *ConsentFacts) { f.Cost = usd(2000) }),
			want: ConsentDecision{Action: Ask, Agent: "shopper", Rule: "shop", Channels: []Channel{Desktop, Phone}, Expires: now + 600},
		},
		{
			name: "ok/shop-above-strong-threshold", caller: shopCaller, facts: with(func(f *ConsentFacts) { f.Cost = usd(2001) }),
			want: ConsentDecision{Action: Ask, Agent: "shopper", Rule: "shop", Channels: []Channel{Desktop, Phone}, Strong: true, Expires: now + 600},
		},
		{
			name: "ok/shop-free", caller: shopCaller, facts: with(func(f *ConsentFacts) { f.Cost = nil }),
			want: ConsentDecision{Action: Ask, Agent: "shopper", Rule: "shop", Channels: []Channel{Desktop, Phone}, Expires: now + 600},
		},
		{
			name: "ok/shop-zero-in-other-currency-is-free", caller: shopCaller, facts: with(func(f *ConsentFacts) { f.Cost = eur(0) }),
			want: ConsentDecision{Action: Ask, Agent: "shopper", Rule: "shop", Channels: []Channel{Desktop, Phone}, Expires: now + 600},
		},
		{
			name: "ok/shop-at-deny-threshold", caller: shopCaller, facts: with(func(f *ConsentFacts) { f.Cost = usd(50000) }),
			want: ConsentDecision{Action: Ask, Agent: "shopper", Rule: "shop", Channels: []Channel{Desktop, Phone}, Strong: true, Expires: now + 600},
		},
		{
			name: "fail/shop-above-deny-threshold", caller: shopCaller, facts: with(func(f *ConsentFacts) { f.Cost = usd(50001) }),
			want: ConsentDecision{Action: Deny, Agent: "shopper", Rule: "shop"}, reason: "refuses costs above 500.00 USD",
		},
		{
			name: "fail/shop-other-currency", caller: shopCaller, facts: with(func(f *ConsentFacts) { f.Cost = eur(100) }),
			want: ConsentDecision{Action: Deny, Agent: "shopper", Rule: "shop"}, reason: "limits costs in USD",
		},
		{
			name: "fail/shop-high-risk", caller: shopCaller, facts: with(func(f *ConsentFacts) { f.Risk = "high" }),
			want: ConsentDecision{Action: Deny, Agent: "shopper", Rule: "shop"}, reason: "refuses risk above medium",
		},
		{
			name: "fail/shop-unknown-risk-counts-high", caller: shopCaller, facts: with(func(f *ConsentFacts) { f.Risk = "" }),
			want: ConsentDecision{Action: Deny, Agent: "shopper", Rule: "shop"}, reason: "risk is high",
		},
		{
			name: "ok/shop-other-service-goes-to-rest", caller: shopCaller, facts: with(func(f *ConsentFacts) { f.Service = "other.example"; f.Risk = "medium" }),
			want: ConsentDecision{Action: Ask, Agent: "shopper", Rule: "rest", Channels: []Channel{Terminal, Desktop, Phone}, Strong: true, Expires: now + 3600},
		},
		{
			name: "ok/rest-low-risk-weak", caller: calCaller, facts: with(func(f *ConsentFacts) { f.Cost = eur(100000) }),
			want: ConsentDecision{Action: Ask, Agent: "calendar", Rule: "rest", Channels: []Channel{Terminal, Desktop, Phone}, Expires: now + 3600},
		},
		{
			name: "ok/rest-expiry-capped-by-ceiling", caller: calCaller, facts: with(func(f *ConsentFacts) { f.Expires = now + 2*Ceiling }),
			want: ConsentDecision{Action: Ask, Agent: "calendar", Rule: "rest", Channels: []Channel{Terminal, Desktop, Phone}, Expires: now + Ceiling},
		},
		{
			name: "fail/guest-refused", caller: guestCaller, facts: order,
			want: ConsentDecision{Action: Deny, Agent: "guest", Rule: "guest-never"}, reason: `consent rule "guest-never" refuses`,
		},
		{
			name: "fail/expired-proposal", caller: shopCaller, facts: with(func(f *ConsentFacts) { f.Expires = now }),
			want: ConsentDecision{Action: Deny, Agent: "shopper"}, reason: "expired",
		},
		{
			name: "fail/empty-service", caller: shopCaller, facts: with(func(f *ConsentFacts) { f.Service = "" }),
			want: ConsentDecision{Action: Deny, Agent: "shopper"}, reason: "service id",
		},
		{
			name: "fail/capability-with-newline", caller: shopCaller, facts: with(func(f *ConsentFacts) { f.Capability = "shop.order\nx" }),
			want: ConsentDecision{Action: Deny, Agent: "shopper"}, reason: "capability",
		},
		{
			name: "fail/negative-cost", caller: shopCaller, facts: with(func(f *ConsentFacts) { f.Cost = usd(-1) }),
			want: ConsentDecision{Action: Deny, Agent: "shopper"}, reason: "negative",
		},
	}
	p2 := mustParse(t, base+"[[consent]]\nagents = [\"a\"]\ncan = [\"x.*\"]\n")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := p.DecideConsent(tt.caller, tt.facts)
			if !strings.Contains(got.Reason, tt.reason) || got.Reason == "" {
				t.Errorf("reason = %q, want it to contain %q", got.Reason, tt.reason)
			}
			got.Reason = ""
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("DecideConsent (-want +got):\n%s", diff)
			}
			if got.Action == Auto {
				t.Error("consent decided auto")
			}
		})
	}
	t.Run("fail/no-consent-rule-matches", func(t *testing.T) {
		got := p2.DecideConsent(Caller{UID: 1}, ConsentFacts{Service: "s", Capability: "y.z", Expires: now + 1, Now: now})
		if got.Action != Deny || got.Rule != "" || !strings.Contains(got.Reason, "no consent rule covers") {
			t.Errorf("DecideConsent = %+v", got)
		}
	})
	t.Run("fail/no-agent", func(t *testing.T) {
		got := p2.DecideConsent(Caller{UID: 2}, order)
		if got.Action != Deny || got.Agent != "" || !strings.Contains(got.Reason, "no agent") {
			t.Errorf("DecideConsent = %+v", got)
		}
	})
	t.Run("ok/consent-rule-pattern-matches", func(t *testing.T) {
		got := p2.DecideConsent(Caller{UID: 1}, ConsentFacts{Service: "s", Capability: "x.z", Cost: &grant.Money{Amount: 5, Currency: "JPY"}, Expires: now + 1, Now: now})
		if got.Action != Ask || got.Rule != "consent-1" || got.Expires != now+1 {
			t.Errorf("DecideConsent = %+v", got)
		}
	})
}
