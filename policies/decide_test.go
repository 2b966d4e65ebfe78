package policies

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/parley-keyd/parley-keyd/grant"
)

const now = 1_800_000_000

var (
	calCaller   = Caller{UID: 1500, User: "calbot"}
	shopCaller  = Caller{UID: 2001, User: "shop"}
	guestCaller = Caller{UID: 3000, User: "g", Groups: []string{"users", "guests"}}
	keyCaller   = Caller{UID: 1, HolderKey: "ed25519:gTl3Dqh9F19Wo1Rmw0x-zMuNipG07jeiXfYPW4_Js5Q"}
	boxCaller   = Caller{UID: 5, Exe: "/opt/agents/run", Unit: "agent-x.service"}
	otherCaller = Caller{UID: 9, User: "someone"}
)

func testPolicy(t testing.TB) *Policy {
	t.Helper()
	data, err := os.ReadFile("testdata/test.toml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(data, "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func usd(cents int64) *grant.Money { return &grant.Money{Amount: cents, Currency: "USD"} }
func eur(cents int64) *grant.Money { return &grant.Money{Amount: cents, Currency: "EUR"} }

func TestDecide(t *testing.T) {
	p := testPolicy(t)
	calFind := grant.Request{Svc: []string{"cal.example"}, Verbs: []string{"ASK"}, Can: []string{"calendar.find"}}
	with := func(r grant.Request, f func(*grant.Request)) grant.Request {
		f(&r)
		return r
	}
	tests := []struct {
		name      string
		caller    Caller
		req       grant.Request
		at        int64 // the time of the request; 0 is now
		action    Action
		agent     string
		rule      string
		grant     *grant.Request // nil: not checked
		channels  []Channel      // checked for Ask
		strong    bool
		escalated []string
		narrowed  []string // substrings, one per Narrowed entry, in order
		reason    string   // substring
	}{
		{
			name: "ok/auto-within-rule", caller: calCaller,
			req:    with(calFind, func(r *grant.Request) { r.Exp = now + 1800 }),
			action: Auto, agent: "calendar", rule: "cal-auto",
			grant: &grant.Request{Svc: []string{"cal.example"}, Verbs: []string{"ASK"}, Can: []string{"calendar.find"}, Exp: now + 1800, Per: usd(0), Risk: "low"},
		},
		{
			name: "ok/auto-default-expiry", caller: calCaller, req: calFind,
			action: Auto, rule: "cal-auto",
			grant: &grant.Request{Svc: []string{"cal.example"}, Verbs: []string{"ASK"}, Can: []string{"calendar.find"}, Exp: now + 600, Per: usd(0), Risk: "low"},
		},
		{
			name: "ok/auto-exact-max-expiry", caller: calCaller,
			req:    with(calFind, func(r *grant.Request) { r.Exp = now + 3600 }),
			action: Auto, rule: "cal-auto",
			grant: &grant.Request{Svc: []string{"cal.example"}, Verbs: []string{"ASK"}, Can: []string{"calendar.find"}, Exp: now + 3600, Per: usd(0), Risk: "low"},
		},
		{
			name: "ok/clamp-expiry", caller: calCaller,
			req:    with(calFind, func(r *grant.Request) { r.Exp = now + 7200 }),
			action: Auto, rule: "cal-auto",
			grant:    &grant.Request{Svc: []string{"cal.example"}, Verbs: []string{"ASK"}, Can: []string{"calendar.find"}, Exp: now + 3600, Per: usd(0), Risk: "low"},
			narrowed: []string{"expiry cut from 2h to the maximum of rule \"cal-auto\", 1h"},
		},
		{
			name: "ok/clamp-svc-absent", caller: calCaller,
			req:    with(calFind, func(r *grant.Request) { r.Svc = nil }),
			action: Auto, rule: "cal-auto",
			grant:    &grant.Request{Svc: []string{"cal.example"}, Verbs: []string{"ASK"}, Can: []string{"calendar.find"}, Exp: now + 600, Per: usd(0), Risk: "low"},
			narrowed: []string{`services cut from every service to "cal.example"`},
		},
		{
			name: "ok/clamp-svc-partly", caller: calCaller,
			req:    with(calFind, func(r *grant.Request) { r.Svc = []string{"x.example", "cal.example"} }),
			action: Auto, rule: "cal-auto",
			grant:    &grant.Request{Svc: []string{"cal.example"}, Verbs: []string{"ASK"}, Can: []string{"calendar.find"}, Exp: now + 600, Per: usd(0), Risk: "low"},
			narrowed: []string{`services cut from "x.example" and "cal.example" to "cal.example"`},
		},
		{
			name: "ok/clamp-verbs", caller: calCaller,
			req:    with(calFind, func(r *grant.Request) { r.Verbs = []string{"ASK", "UNDO"} }),
			action: Auto, rule: "cal-auto",
			grant:    &grant.Request{Svc: []string{"cal.example"}, Verbs: []string{"ASK"}, Can: []string{"calendar.find"}, Exp: now + 600, Per: usd(0), Risk: "low"},
			narrowed: []string{`verbs cut from "ASK" and "UNDO" to "ASK"`},
		},
		{
			name: "ok/clamp-verbs-absent", caller: calCaller,
			req:    with(calFind, func(r *grant.Request) { r.Verbs = nil }),
			action: Auto, rule: "cal-auto",
			grant:    &grant.Request{Svc: []string{"cal.example"}, Verbs: []string{"ASK", "INTENT", "COMMIT"}, Can: []string{"calendar.find"}, Exp: now + 600, Per: usd(0), Risk: "low"},
			narrowed: []string{"verbs cut from every verb"},
		},
		{
			name: "ok/clamp-risk", caller: calCaller,
			req:    with(calFind, func(r *grant.Request) { r.Risk = "high" }),
			action: Auto, rule: "cal-auto",
			grant:    &grant.Request{Svc: []string{"cal.example"}, Verbs: []string{"ASK"}, Can: []string{"calendar.find"}, Exp: now + 600, Per: usd(0), Risk: "low"},
			narrowed: []string{"risk ceiling cut from high to the low of rule \"cal-auto\""},
		},
		{
			name: "ok/risk-below-rule-kept", caller: calCaller,
			req:    with(calFind, func(r *grant.Request) { r.Risk = "low" }),
			action: Auto, rule: "cal-auto",
			grant: &grant.Request{Svc: []string{"cal.example"}, Verbs: []string{"ASK"}, Can: []string{"calendar.find"}, Exp: now + 600, Per: usd(0), Risk: "low"},
		},
		{
			name: "ok/clamp-per", caller: calCaller,
			req:    with(calFind, func(r *grant.Request) { r.Per = usd(500) }),
			action: Auto, rule: "cal-auto",
			grant:    &grant.Request{Svc: []string{"cal.example"}, Verbs: []string{"ASK"}, Can: []string{"calendar.find"}, Exp: now + 600, Per: usd(0), Risk: "low"},
			narrowed: []string{"per-commit limit cut from 5.00 USD to the 0.00 USD"},
		},
		{
			name: "ok/clamp-everything-at-once", caller: calCaller,
			req:    grant.Request{Can: []string{"calendar.find"}, Exp: now + 86400, Risk: "medium", Per: usd(1)},
			action: Auto, rule: "cal-auto",
			grant:    &grant.Request{Svc: []string{"cal.example"}, Verbs: []string{"ASK", "INTENT", "COMMIT"}, Can: []string{"calendar.find"}, Exp: now + 3600, Per: usd(0), Risk: "low"},
			narrowed: []string{"services cut", "verbs cut", "expiry cut from 1d", "per-commit limit cut", "risk ceiling cut"},
		},
		{
			name: "ok/nbf-kept", caller: calCaller,
			req:    with(calFind, func(r *grant.Request) { r.Nbf = now + 300; r.Exp = now + 1800 }),
			action: Auto, rule: "cal-auto",
			grant: &grant.Request{Svc: []string{"cal.example"}, Verbs: []string{"ASK"}, Can: []string{"calendar.find"}, Exp: now + 1800, Nbf: now + 300, Per: usd(0), Risk: "low"},
		},
		{
			name: "ok/escalated-by-earlier-ask-rule", caller: calCaller,
			req:    with(calFind, func(r *grant.Request) { r.Can = []string{"calendar.*"} }),
			action: Ask, rule: "cal-auto", channels: []Channel{Desktop, Phone}, escalated: []string{"cal-delete-asks"},
			grant:  &grant.Request{Svc: []string{"cal.example"}, Verbs: []string{"ASK"}, Can: []string{"calendar.*"}, Exp: now + 600, Per: usd(0), Risk: "low"},
			reason: `reaches into rule "cal-delete-asks"`,
		},
		{
			name: "ok/escalated-broad-prefix-clamped", caller: calCaller,
			req:    grant.Request{Svc: []string{"cal.example"}, Verbs: []string{"ASK"}, Can: []string{"cal*"}},
			action: Ask, rule: "cal-auto", channels: []Channel{Desktop, Phone}, escalated: []string{"cal-delete-asks"},
			grant:    &grant.Request{Svc: []string{"cal.example"}, Verbs: []string{"ASK"}, Can: []string{"calendar.*"}, Exp: now + 600, Per: usd(0), Risk: "low"},
			narrowed: []string{`capabilities cut from "cal*" to "calendar.*"`},
		},
		{
			name: "fail/all-capabilities-reach-bank", caller: calCaller,
			req:    grant.Request{Svc: []string{"cal.example"}, Verbs: []string{"ASK"}},
			action: Deny, rule: "no-bank",
		},
		{
			name: "ok/ask-rule-decides", caller: calCaller,
			req:    grant.Request{Svc: []string{"cal.example"}, Can: []string{"calendar.delete"}},
			action: Ask, rule: "cal-delete-asks", channels: []Channel{Desktop, Phone},
			grant: &grant.Request{Svc: []string{"cal.example"}, Can: []string{"calendar.delete"}, Exp: now + 900},
		},
		{
			name: "ok/other-capability-falls-back", caller: calCaller,
			req:    grant.Request{Can: []string{"mail.send"}},
			action: Ask, rule: "fallback", channels: []Channel{Terminal},
			grant: &grant.Request{Can: []string{"mail.send"}, Exp: now + 900, Per: usd(0)},
		},
		{
			name: "fall/clamp-impossible-currency", caller: calCaller,
			req:    with(calFind, func(r *grant.Request) { r.Per = eur(5) }),
			action: Deny, rule: "", reason: `is in EUR and rule "cal-auto" limits it in USD`,
		},
		{
			name: "fall/clamp-impossible-service", caller: calCaller,
			req:    with(calFind, func(r *grant.Request) { r.Svc = []string{"other.example"} }),
			action: Ask, rule: "fallback", channels: []Channel{Terminal},
			grant: &grant.Request{Svc: []string{"other.example"}, Verbs: []string{"ASK"}, Can: []string{"calendar.find"}, Exp: now + 900, Per: usd(0)},
		},
		{
			name: "fall/nbf-after-default-expiry", caller: calCaller,
			req:    with(calFind, func(r *grant.Request) { r.Nbf = now + 7200 }),
			action: Deny, reason: "not-before",
		},
		{
			name: "fail/guest-denied", caller: guestCaller, req: calFind,
			action: Deny, agent: "guest", rule: "no-guest", reason: `rule "no-guest" refuses`,
		},
		{
			name: "fail/bank-exact", caller: calCaller, req: grant.Request{Can: []string{"bank.transfer"}},
			action: Deny, rule: "no-bank", reason: `capabilities "bank.*"`,
		},
		{
			name: "fail/bank-inside-everything", caller: otherCaller, req: grant.Request{},
			action: Deny, agent: "local", rule: "no-bank",
		},
		{
			name: "fail/bank-inside-broad-prefix", caller: otherCaller, req: grant.Request{Can: []string{"b*"}},
			action: Deny, rule: "no-bank",
		},
		{
			name: "ok/bank-lookalike-not-denied", caller: otherCaller, req: grant.Request{Can: []string{"bankruptcy.read", "bank"}},
			action: Ask, agent: "local", rule: "fallback", channels: []Channel{Terminal},
		},
		{
			name: "ok/shop-ask-phone", caller: shopCaller,
			req:    grant.Request{Svc: []string{"shop.example"}, Can: []string{"shop.order"}, Per: usd(1000)},
			action: Ask, agent: "shopper", rule: "shop-phone", channels: []Channel{Phone}, strong: true,
			grant: &grant.Request{Svc: []string{"shop.example"}, Can: []string{"shop.order"}, Exp: now + 900, Per: usd(1000), Spend: usd(10000)},
		},
		{
			name: "ok/shop-limits-added", caller: shopCaller,
			req:    grant.Request{Svc: []string{"shop.example"}, Can: []string{"shop.*"}},
			action: Ask, rule: "shop-phone", channels: []Channel{Phone}, strong: true,
			grant: &grant.Request{Svc: []string{"shop.example"}, Can: []string{"shop.*"}, Exp: now + 900, Per: usd(2000), Spend: usd(10000)},
		},
		{
			name: "fall/shop-per-above-rule", caller: shopCaller,
			req:    grant.Request{Svc: []string{"shop.example"}, Can: []string{"shop.order"}, Per: usd(5000)},
			action: Deny, reason: "per-commit limit of 50.00 USD is above the 20.00 USD",
		},
		{
			name: "fall/shop-without-svc-no-common-channel", caller: shopCaller,
			req:    grant.Request{Can: []string{"shop.order"}},
			action: Deny, rule: "fallback", reason: "share no approval channel",
		},
		{
			name: "ok/keyed-auto", caller: keyCaller,
			req:    grant.Request{Can: []string{"notes.read"}, Exp: now + 7200},
			action: Auto, agent: "keyed", rule: "keyed-auto",
			grant: &grant.Request{Can: []string{"notes.read"}, Exp: now + 7200},
		},
		{
			name: "fall/keyed-longer-than-both", caller: keyCaller,
			req:    grant.Request{Can: []string{"notes.read"}, Exp: now + 3*3600},
			action: Deny, reason: `the requested lifetime of 3h exceeds the maximum of rule "keyed-auto", 2h`,
		},
		{
			name: "fall/keyed-all-capabilities-asks", caller: keyCaller,
			req:    grant.Request{Can: []string{"notes.*"}},
			action: Ask, rule: "fallback", channels: []Channel{Terminal},
			grant: &grant.Request{Can: []string{"notes.*"}, Exp: now + 900, Per: usd(0)},
		},
		{
			name: "ok/boxed-agent", caller: boxCaller, req: grant.Request{Can: []string{"x"}},
			action: Ask, agent: "boxed", rule: "fallback", channels: []Channel{Terminal},
		},
		{
			name: "ok/boxed-wrong-exe-is-local", caller: Caller{UID: 5, Exe: "/usr/bin/run", Unit: "agent-x.service"}, req: grant.Request{Can: []string{"x"}},
			action: Ask, agent: "local", rule: "fallback",
		},
		{name: "fail/exp-in-past", caller: calCaller, req: with(calFind, func(r *grant.Request) { r.Exp = now }), action: Deny, agent: "calendar", reason: "not in the future"},
		{name: "fail/nbf-after-exp", caller: calCaller, req: with(calFind, func(r *grant.Request) { r.Exp = now + 60; r.Nbf = now + 60 }), action: Deny, reason: "not-before time is not before"},
		{name: "fail/negative-nbf", caller: calCaller, req: with(calFind, func(r *grant.Request) { r.Nbf = -1 }), action: Deny, reason: "out of range"},
		{name: "fail/unknown-verb", caller: calCaller, req: with(calFind, func(r *grant.Request) { r.Verbs = []string{"DELETE"} }), action: Deny, reason: `unknown verb "DELETE"`},
		{name: "fail/lowercase-verb", caller: calCaller, req: with(calFind, func(r *grant.Request) { r.Verbs = []string{"ask"} }), action: Deny, reason: "upper case"},
		{name: "fail/star-inside-pattern", caller: calCaller, req: with(calFind, func(r *grant.Request) { r.Can = []string{"cal*.find"} }), action: Deny, reason: "is not a pattern"},
		{name: "fail/empty-pattern", caller: calCaller, req: with(calFind, func(r *grant.Request) { r.Can = []string{""} }), action: Deny, reason: "malformed"},
		{name: "fail/empty-svc-list", caller: calCaller, req: with(calFind, func(r *grant.Request) { r.Svc = []string{} }), action: Deny, reason: "svc is an empty list"},
		{name: "fail/svc-with-space", caller: calCaller, req: with(calFind, func(r *grant.Request) { r.Svc = []string{"cal example"} }), action: Deny, reason: "space or control"},
		{name: "fail/bad-risk", caller: calCaller, req: with(calFind, func(r *grant.Request) { r.Risk = "extreme" }), action: Deny, reason: "risk must be"},
		{name: "fail/negative-per", caller: calCaller, req: with(calFind, func(r *grant.Request) { r.Per = usd(-1) }), action: Deny, reason: "out of range"},
		{name: "fail/lowercase-currency", caller: calCaller, req: with(calFind, func(r *grant.Request) { r.Spend = &grant.Money{Amount: 1, Currency: "usd"} }), action: Deny, reason: "three capital letters"},
		{name: "fail/too-many-patterns", caller: calCaller, req: with(calFind, func(r *grant.Request) { r.Can = make([]string, 65); fill(r.Can, "a") }), action: Deny, reason: "more than 64"},
		{name: "fail/long-pattern", caller: calCaller, req: with(calFind, func(r *grant.Request) { r.Can = []string{strings.Repeat("a", 257)} }), action: Deny, reason: "longer than 256"},
		{name: "fail/clock-out-of-range", caller: calCaller, req: calFind, at: -5, action: Deny, reason: "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at := int64(now)
			if tt.at != 0 {
				at = tt.at
			}
			d := p.Decide(tt.caller, tt.req, at)
			if d.Action != tt.action {
				t.Fatalf("action = %q, want %q (reason: %s)", d.Action, tt.action, d.Reason)
			}
			if tt.agent != "" && d.Agent != tt.agent {
				t.Errorf("agent = %q, want %q", d.Agent, tt.agent)
			}
			if d.Rule != tt.rule && (tt.rule != "" || tt.action != Deny) {
				t.Errorf("rule = %q, want %q", d.Rule, tt.rule)
			}
			if tt.grant != nil {
				if diff := cmp.Diff(*tt.grant, d.Grant); diff != "" {
					t.Errorf("grant (-want +got):\n%s", diff)
				}
			}
			if tt.action == Ask {
				if tt.channels != nil && !cmp.Equal(d.Channels, tt.channels) {
					t.Errorf("channels = %v, want %v", d.Channels, tt.channels)
				}
				if d.Strong != tt.strong {
					t.Errorf("strong = %v, want %v", d.Strong, tt.strong)
				}
			}
			if !cmp.Equal(d.Escalated, tt.escalated) {
				t.Errorf("escalated = %v, want %v", d.Escalated, tt.escalated)
			}
			if len(d.Narrowed) != len(tt.narrowed) {
				t.Errorf("narrowed = %q, want %d entries like %q", d.Narrowed, len(tt.narrowed), tt.narrowed)
			} else {
				for i, want := range tt.narrowed {
					if !strings.Contains(d.Narrowed[i], want) {
						t.Errorf("narrowed[%d] = %q, want it to contain %q", i, d.Narrowed[i], want)
					}
				}
			}
			if !strings.Contains(d.Reason, tt.reason) {
				t.Errorf("reason = %q, want it to contain %q", d.Reason, tt.reason)
			}
			if d.Action != Deny && d.Grant.Exp <= at {
				t.Errorf("grant expiry %d is not after now", d.Grant.Exp)
			}
			if d.Action == Deny && d.Reason == "" {
				t.Error("a refusal without a reason")
			}
		})
	}
}

func fill(xs []string, s string) {
	for i := range xs {
		xs[i] = s
	}
}

func TestDecideNoAgent(t *testing.T) {
	p, err := Parse([]byte("[[agent]]\nname = \"a\"\nuid = [7]\n[[rule]]\nagents = [\"*\"]\naction = \"auto\"\n"), "p.toml")
	if err != nil {
		t.Fatal(err)
	}
	d := p.Decide(Caller{UID: 8}, grant.Request{}, now)
	if d.Action != Deny || d.Agent != "" || d.Rule != "" || !strings.Contains(d.Reason, "no agent") {
		t.Errorf("decision for an unknown caller = %+v, want a refusal naming no agent", d)
	}
	d = p.Decide(Caller{UID: 7}, grant.Request{}, now)
	if d.Action != Auto || d.Grant.Exp != now+DefaultLifetime {
		t.Errorf("decision for a known caller = %+v, want auto with the default lifetime", d)
	}
}
