package policies

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/grant"
)

func FuzzParse(f *testing.F) {
	f.Add(DefaultFile)
	if data, err := os.ReadFile("testdata/test.toml"); err == nil {
		f.Add(data)
	}
	for _, s := range []string{
		"", "version = 1", "[[agent]]\nname = \"a\"\nany = true\n[[rule]]\nagents = \"*\"\naction = \"auto\"\nmax_exp = \"1d2h\"",
		"agent = [{name = \"a\", uid = [1]}]\nrule = [{agents = \"a\", action = \"ask\", can = [\"x.*\"]}]",
		"[a.b]\nc = 1\n[[a.d]]\n", "x = \"\\u00e9\"\n'y' = 1979-05-27T07:32:00Z",
		"[[agent]]\nname = \"a\"\nuid = [0x10, 0o7, 0b1]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data, "fuzz.toml")
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Line < 1 || pe.File != "fuzz.toml" {
				t.Fatalf("error %q (%T) does not name the file and a line", err, err)
			}
			if !strings.Contains(err.Error(), "line ") {
				t.Fatalf("error %q does not say \"line \"", err)
			}
			return
		}
		_ = p.Describe()
		_ = p.Warnings()
		for _, c := range []Caller{{}, {UID: 1, User: "a", Exe: "/x", Unit: "u"}} {
			_ = p.Allowed(c)
			for _, r := range []grant.Request{{}, {Can: []string{"a.*"}, Svc: []string{"s"}, Exp: now + 60, Risk: "low", Per: usd(5)}} {
				d := p.Decide(c, r, now)
				if d.Action == Deny {
					continue
				}
				for _, u := range p.rules {
					if u.name == d.Rule {
						if err := checkWithin(d.Grant, r, now, u); err != nil {
							t.Fatalf("decision %+v: %v", d, err)
						}
					}
				}
			}
			cd := p.DecideConsent(c, ConsentFacts{Service: "s", Capability: "a.b", Cost: usd(100), Risk: "low", Expires: now + 60, Now: now})
			if cd.Action == Auto {
				t.Fatal("consent decided auto")
			}
		}
	})
}

// FuzzDecide feeds arbitrary request fields to the test policy: nothing
// panics, refusals carry a reason and grants stay within request and rule.
func FuzzDecide(f *testing.F) {
	p := testPolicy(f)
	f.Add("cal.example", "ASK", "calendar.*", int64(3600), int64(0), int64(500), "USD", "low", "calbot")
	f.Add("", "", "", int64(0), int64(0), int64(-1), "", "", "")
	f.Add("shop.example", "COMMIT", "shop.order", int64(60), int64(30), int64(2000), "USD", "high", "")
	f.Fuzz(func(t *testing.T, svc, verb, can string, exp, nbf, amount int64, currency, risk, user string) {
		r := grant.Request{Exp: exp, Nbf: nbf, Risk: risk}
		if exp > 0 && exp < 1<<40 {
			r.Exp = now + exp
		}
		if nbf > 0 && nbf < 1<<40 {
			r.Nbf = now + nbf
		}
		if svc != "" {
			r.Svc = strings.Split(svc, ",")
		}
		if verb != "" {
			r.Verbs = strings.Split(verb, ",")
		}
		if can != "" {
			r.Can = strings.Split(can, ",")
		}
		if amount >= 0 {
			r.Per = &grant.Money{Amount: amount, Currency: currency}
		}
		d := p.Decide(Caller{User: user, UID: 2001}, r, now)
		if d.Action == Deny {
			if d.Reason == "" {
				t.Fatal("a refusal without a reason")
			}
			return
		}
		for _, u := range p.rules {
			if u.name == d.Rule {
				if err := checkWithin(d.Grant, r, now, u); err != nil {
					t.Fatalf("decision %+v: %v", d, err)
				}
				return
			}
		}
		t.Fatalf("decided by unknown rule %q", d.Rule)
	})
}
