package policies

import (
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/grant"
)

const rememberBase = "[[agent]]\nname = \"a\"\nuid = [1]\n"

func TestRememberParseErrors(t *testing.T) {
	for name, tc := range map[string]struct{ src, msg string }{
		"on auto":                {`[[rule]]` + "\naction = \"auto\"\nagents = [\"a\"]\nremember = \"8h\"", `remember is only for action = "ask"`},
		"exp on auto":            {`[[rule]]` + "\naction = \"auto\"\nagents = [\"a\"]\nremember_exp = \"8m\"", `remember_exp is only for action = "ask"`},
		"on deny":                {`[[rule]]` + "\naction = \"deny\"\nagents = [\"a\"]\nremember = \"8h\"", "a deny rule takes no remember"},
		"on consent":             {`[[consent]]` + "\naction = \"ask\"\nagents = [\"a\"]\nremember = \"8h\"", "never remembered"},
		"exp above max_exp":      {`[[rule]]` + "\naction = \"ask\"\nagents = [\"a\"]\nmax_exp = \"5m\"\nremember = \"8h\"\nremember_exp = \"10m\"", "remember_exp 10m is longer than max_exp 5m"},
		"exp above remember":     {`[[rule]]` + "\naction = \"ask\"\nagents = [\"a\"]\nremember = \"5m\"\nremember_exp = \"10m\"", "longer than remember 5m"},
		"exp without remember":   {`[[rule]]` + "\naction = \"ask\"\nagents = [\"a\"]\nremember_exp = \"10m\"", "remember_exp needs remember"},
		"zero remember":          {`[[rule]]` + "\naction = \"ask\"\nagents = [\"a\"]\nremember = \"0s\"", "more than zero"},
		"remember above ceiling": {`[[rule]]` + "\naction = \"ask\"\nagents = [\"a\"]\nremember = \"800h\"", "ceiling"},
	} {
		_, err := Parse([]byte(rememberBase+tc.src), "p.toml")
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: got %v, want an error saying %q", name, err, tc.msg)
		}
	}
}

func TestRememberDecisionAndDescribe(t *testing.T) {
	p, err := Parse([]byte(rememberBase+`[[rule]]
name = "mail"
action = "ask"
agents = ["a"]
svc = ["mail.example"]
can = ["mail.*"]
max_exp = "1h"
remember = "8h"
[[rule]]
name = "cal"
action = "ask"
agents = ["a"]
svc = ["cal.example"]
max_exp = "5m"
remember = "2h"
remember_exp = "3m"
[[rule]]
name = "files"
action = "ask"
agents = ["a"]
svc = ["files.example"]
`), "p.toml")
	if err != nil {
		t.Fatal(err)
	}
	c := Caller{UID: 1}
	for _, tc := range []struct {
		svc, can      string
		remember, exp int64
	}{{"mail.example", "mail.read", 8 * 3600, 600}, {"cal.example", "", 7200, 180}, {"files.example", "", 0, 0}} {
		r := grant.Request{Svc: []string{tc.svc}}
		if tc.can != "" {
			r.Can = []string{tc.can}
		}
		d := p.Decide(c, r, 1000)
		if d.Action != Ask || d.Remember != tc.remember || d.RememberExp != tc.exp {
			t.Errorf("%s: decided %s remember %d/%d, want ask %d/%d", tc.svc, d.Action, d.Remember, d.RememberExp, tc.remember, tc.exp)
		}
	}
	desc := p.Describe()
	if !strings.Contains(desc, "remembered for up to 8h, each grant under it living 10m") ||
		!strings.Contains(desc, "remembered for up to 2h, each grant under it living 3m") {
		t.Errorf("policy check does not show remember:\n%s", desc)
	}
	if s := p.Allowed(c); s[0].Remember != 8*3600 || s[0].RememberExp != 600 || s[2].Remember != 0 {
		t.Errorf("summaries: %+v", s)
	}
	if r, e, _, why := p.RememberAllowed("a", "mail", grant.Request{Svc: []string{"mail.example"}, Can: []string{"mail.read"}}); r != 8*3600 || e != 600 || why != "" {
		t.Errorf("RememberAllowed(mail) = %d %d %q", r, e, why)
	}
	for rule, scope := range map[string]grant.Request{
		"files": {Svc: []string{"files.example"}},                             // no remember
		"mail":  {Svc: []string{"mail.example"}, Can: []string{"calendar.*"}}, // no longer covered
		"gone":  {Svc: []string{"mail.example"}},
	} {
		if r, _, _, why := p.RememberAllowed("a", rule, scope); r != 0 || why == "" {
			t.Errorf("RememberAllowed(%s, %+v) = %d %q, want a refusal", rule, scope, r, why)
		}
	}
}

// TestWithinOneCaveatWider is the attack of issue 24: a request one caveat
// wider than the remembered one, on each dimension, is not within it.
func TestWithinOneCaveatWider(t *testing.T) {
	usd := func(n int64) *grant.Money { return &grant.Money{Amount: n, Currency: "USD"} }
	scope := grant.Request{Svc: []string{"mail.example"}, Verbs: []string{"read"}, Can: []string{"mail.inbox.*"},
		Per: usd(500), Spend: usd(2000), Risk: "low"}
	same := scope
	if ok, why := Within(same, scope); !ok {
		t.Fatalf("the remembered request itself is not within: %s", why)
	}
	narrower := scope
	narrower.Can, narrower.Per = []string{"mail.inbox.list"}, usd(100)
	if ok, why := Within(narrower, scope); !ok {
		t.Fatalf("a narrower request is not within: %s", why)
	}
	wider := map[string]func(r *grant.Request){
		"another service":    func(r *grant.Request) { r.Svc = []string{"mail.example", "bank.example"} },
		"every service":      func(r *grant.Request) { r.Svc = nil },
		"another verb":       func(r *grant.Request) { r.Verbs = []string{"read", "write"} },
		"can one level up":   func(r *grant.Request) { r.Can = []string{"mail.*"} },
		"every capability":   func(r *grant.Request) { r.Can = nil },
		"higher per":         func(r *grant.Request) { r.Per = usd(501) },
		"no per":             func(r *grant.Request) { r.Per = nil },
		"per other currency": func(r *grant.Request) { r.Per = &grant.Money{Amount: 1, Currency: "EUR"} },
		"higher spend":       func(r *grant.Request) { r.Spend = usd(2001) },
		"risk above":         func(r *grant.Request) { r.Risk = "medium" },
		"no risk":            func(r *grant.Request) { r.Risk = "" },
	}
	for name, widen := range wider {
		g := scope
		widen(&g)
		if ok, _ := Within(g, scope); ok {
			t.Errorf("%s: within the remembered scope", name)
		}
	}
}
