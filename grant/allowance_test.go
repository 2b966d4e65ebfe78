package grant

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAllowance(t *testing.T) {
	root := issue(t, Svc("a.example", "b.example", "c.example"), Verbs("ASK", "COMMIT"), Can("shop.*"),
		Exp(testNow+3600), Nbf(testNow-10), Per(Money{3000, "USD"}), Spend(Money{5000, "USD"}), Risk(riskMedium))
	tok := delegate(t, root, keyAgent, keySub, Svc("b.example", "c.example", "z.example"), Can("shop.order", "shop.search"),
		Exp(testNow+600), Nbf(testNow-100), Risk(riskHigh), Only("H1"))
	// A caveat this package does not know allows nothing, and adds no
	// limit Allowance could state.
	tok.Blocks[1].Caveats = append(tok.Blocks[1].Caveats, Caveat{Name: "future", Value: json.RawMessage("1")})
	a := tok.allowance()
	want := allowance{
		Svc: []string{"b.example", "c.example"}, Verbs: []string{"ASK", "COMMIT"},
		Can: [][]string{{"shop.*"}, {"shop.order", "shop.search"}},
		Exp: testNow + 600, HasExp: true, Nbf: testNow - 10, HasNbf: true,
		Per: []Money{{3000, "USD"}}, Spend: []Money{{5000, "USD"}}, Risk: riskMedium, Only: []string{"H1"},
	}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("Allowance (-want +got):\n%s", diff)
	}
	if a := issue(t).allowance(); a.Svc != nil || a.Verbs != nil || a.HasExp || a.Risk != "" {
		t.Errorf("Allowance of an open grant = %+v", a)
	}
	// Lists with nothing in common allow nothing: an empty, not a nil,
	// list.
	if a := delegate(t, issue(t, Svc("a")), keyAgent, keySub, Svc("b")).allowance(); a.Svc == nil || len(a.Svc) != 0 {
		t.Errorf("disjoint svc lists: %#v", a.Svc)
	}

	tests := []struct {
		name     string
		c        Caveat
		narrows  bool
		outside  []string
		by       string
		excludes bool
	}{
		{"ok/svc-narrows", Svc("b.example"), true, nil, "", false},
		{"ok/svc-outside", Svc("b.example", "q.example"), true, []string{"q.example"}, "", false},
		{"fail/svc-same", Svc("c.example", "b.example"), false, nil, `{"svc":["b.example","c.example"]}`, false},
		{"fail/svc-wider", Svc("b.example", "c.example", "x.example"), false, []string{"x.example"}, `{"svc":["b.example","c.example"]}`, false},
		{"fail/verbs-same", Verbs("ASK", "COMMIT", "UNDO"), false, []string{"UNDO"}, `{"verbs":["ASK","COMMIT"]}`, false},
		{"ok/can-narrows", Can("shop.order"), true, nil, "", false},
		{"fail/can-covers-first", Can("*"), false, nil, `{"can":["shop.*"]}`, false},
		{"fail/can-covers-second", Can("shop.order", "shop.search"), false, nil, `{"can":["shop.order","shop.search"]}`, false},
		{"ok/exp-earlier", Exp(testNow + 60), true, nil, "", false},
		{"fail/exp-later", Exp(testNow + 7200), false, nil, `{"exp":1790000600}`, false},
		{"ok/nbf-later", Nbf(testNow + 60), true, nil, "", false},
		{"fail/nbf-earlier", Nbf(testNow - 50), false, nil, `{"nbf":1789999990}`, false},
		{"ok/per-lower", Per(Money{1000, "USD"}), true, nil, "", false},
		{"ok/per-other-currency", Per(Money{1, "EUR"}), true, nil, "", false},
		{"fail/per-higher", Per(Money{4000, "USD"}), false, nil, `{"per":{"currency":"USD","max":3000}}`, false},
		{"fail/spend-same", Spend(Money{5000, "USD"}), false, nil, `{"spend":{"currency":"USD","max":5000}}`, false},
		{"ok/risk-lower", Risk(riskLow), true, nil, "", false},
		{"fail/risk-same", Risk(riskMedium), false, nil, `{"risk":"medium"}`, false},
		{"fail/only-same", Only("H1"), false, nil, `{"only":"H1"}`, false},
		{"ok/only-other-excludes", Only("H2"), true, nil, `{"only":"H1"}`, true},
		{"ok/unknown-narrows-all", Caveat{Name: "x", Value: json.RawMessage("1")}, true, nil, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := a.narrowing(tt.c, testNow)
			by := ""
			if n.By.Name != "" {
				by = n.By.String()
			}
			if n.Narrows != tt.narrows || !cmp.Equal(n.Outside, tt.outside) || by != tt.by || n.Excludes != tt.excludes {
				t.Errorf("Narrowing(%s) = %+v (by %s)", tt.c, n, by)
			}
		})
	}
	// An nbf in the past narrows nothing, with no caveat to blame.
	if n := issue(t).allowance().narrowing(Nbf(testNow-1), testNow); n.Narrows || n.By.Name != "" {
		t.Errorf("past nbf: %+v", n)
	}
}

func TestCoversAll(t *testing.T) {
	tests := []struct {
		name      string
		news, old []string
		want      bool
	}{
		{"ok/star-covers-all", []string{"*"}, []string{"a.b", "c.*"}, true},
		{"ok/prefix-covers-exact", []string{"cal.*"}, []string{"cal.find"}, true},
		{"ok/prefix-covers-narrower-prefix", []string{"cal.*"}, []string{"cal.ev.*"}, true},
		{"ok/same", []string{"cal.find"}, []string{"cal.find"}, true},
		{"fail/exact-does-not-cover-prefix", []string{"cal.find"}, []string{"cal.*"}, false},
		{"fail/narrower", []string{"cal.find"}, []string{"cal.find", "cal.book"}, false},
		{"fail/other", []string{"shop.*"}, []string{"cal.find"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := coversAll(tt.news, tt.old); got != tt.want {
				t.Errorf("coversAll(%q, %q) = %v, want %v", tt.news, tt.old, got, tt.want)
			}
		})
	}
}
