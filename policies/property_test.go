package policies

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/parley-keyd/parley-keyd/grant"
)

// The generators draw from small universes so that requests and rules
// overlap, contain and miss each other often.
var (
	genSvc      = []string{"s1", "s2", "s3"}
	genPatterns = []string{"*", "a*", "a.*", "a.b", "a.b.*", "a.c", "ab*", "b.*", "b.x"}
	genRisks    = []string{"low", "medium", "high"}
)

func genNames(rng *rand.Rand, from []string) []string {
	if rng.IntN(3) == 0 {
		return nil
	}
	var out []string
	for _, s := range from {
		if rng.IntN(2) == 0 {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		out = []string{from[rng.IntN(len(from))]}
	}
	return out
}

func genMoney(rng *rand.Rand) *grant.Money {
	if rng.IntN(2) == 0 {
		return nil
	}
	cur := "USD"
	if rng.IntN(5) == 0 {
		cur = "EUR"
	}
	return &grant.Money{Amount: int64(rng.IntN(3000)), Currency: cur}
}

func genRisk(rng *rand.Rand) string {
	if rng.IntN(2) == 0 {
		return ""
	}
	return genRisks[rng.IntN(3)]
}

func genRule(rng *rand.Rand, i int) *rule {
	u := &rule{name: fmt.Sprintf("r%d", i), agents: []string{"*"}}
	u.action = []Action{Auto, Auto, Ask, Ask, Deny}[rng.IntN(5)]
	u.scope = scope{svc: genNames(rng, genSvc), verbs: genNames(rng, grant.ParleyVerbs()), can: genNames(rng, genPatterns)}
	if u.action == Deny {
		return u
	}
	if rng.IntN(4) != 0 {
		u.maxExp = int64(60 + rng.IntN(7200))
	}
	if rng.IntN(2) == 0 {
		limit := int64(Ceiling)
		if u.maxExp != 0 {
			limit = u.maxExp
		}
		u.defaultExp = 1 + rng.Int64N(limit)
	}
	u.per, u.spend, u.risk = genMoney(rng), genMoney(rng), genRisk(rng)
	u.clamp = rng.IntN(2) == 0
	if u.action == Ask {
		u.channels = genChannels(rng)
		u.strong = rng.IntN(2) == 0
	}
	return u
}

func genChannels(rng *rand.Rand) []Channel {
	if rng.IntN(2) == 0 {
		return nil
	}
	var out []Channel
	for _, c := range allChannels {
		if rng.IntN(2) == 0 {
			out = append(out, c)
		}
	}
	if out == nil {
		out = []Channel{Phone}
	}
	return out
}

func genRequest(rng *rand.Rand) grant.Request {
	r := grant.Request{Svc: genNames(rng, genSvc), Verbs: genNames(rng, grant.ParleyVerbs()), Can: genNames(rng, genPatterns)}
	if rng.IntN(3) != 0 {
		r.Exp = now + 1 + int64(rng.IntN(10000))
	}
	if rng.IntN(4) == 0 {
		r.Nbf = now - 100 + int64(rng.IntN(5000))
	}
	r.Per, r.Spend, r.Risk = genMoney(rng), genMoney(rng), genRisk(rng)
	return r
}

// TestNeverWider checks, over generated policies and requests, that a grant
// Decide returns is never wider than the request nor than the rule that
// decided it, that it always expires after now, that every narrowing is
// reported, and that an earlier deny or ask rule that reaches into the
// request is never skipped.
func TestNeverWider(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 2026))
	var issued, denied, clamped, escalated int
	for i := range 20000 {
		p := &Policy{file: "gen", agents: []*agent{{name: "any", any: true, rate: 1, pending: 1}}}
		for j := range 1 + rng.IntN(4) {
			p.rules = append(p.rules, genRule(rng, j))
		}
		r := genRequest(rng)
		d := p.Decide(Caller{}, r, now)
		if d.Action == Deny {
			denied++
			if d.Reason == "" {
				t.Fatalf("case %d: a refusal without a reason", i)
			}
			continue
		}
		issued++
		if len(d.Narrowed) > 0 {
			clamped++
		}
		if len(d.Escalated) > 0 {
			escalated++
		}
		idx := slices.IndexFunc(p.rules, func(u *rule) bool { return u.name == d.Rule })
		if idx < 0 {
			t.Fatalf("case %d: decided by unknown rule %q", i, d.Rule)
		}
		u := p.rules[idx]
		if err := checkWithin(d.Grant, r, now, u); err != nil {
			t.Fatalf("case %d: %v\nrequest %+v\nrule %+v\ndecision %+v", i, err, r, u, d)
		}
		// The caveats the grant is issued with say exactly what it holds.
		if back, err := grant.ParseRequest(d.Grant.Caveats(), now); err != nil || !reflect.DeepEqual(*back, d.Grant) {
			t.Fatalf("case %d: the grant's caveats %v read back as %+v, %v; want %+v", i, d.Grant.Caveats(), back, err, d.Grant)
		}
		if len(d.Narrowed) == 0 {
			if err := checkUnnarrowed(d.Grant, r); err != nil {
				t.Fatalf("case %d: narrowed silently: %v\nrequest %+v\nrule %+v\ndecision %+v", i, err, r, u, d)
			}
		}
		for _, e := range p.rules[:idx] {
			if !e.scope.overlaps(r) {
				continue
			}
			if e.action == Deny {
				t.Fatalf("case %d: skipped deny rule %q that reaches into the request %+v", i, e.name, r)
			}
			if e.action == Ask && d.Action != Ask {
				t.Fatalf("case %d: ask rule %q reaches into the request but the decision is %q", i, e.name, d.Action)
			}
		}
	}
	t.Logf("%d issued (%d narrowed, %d escalated), %d refused", issued, clamped, escalated, denied)
	if issued < 2000 || denied < 2000 || clamped < 500 || escalated < 100 {
		t.Errorf("the generators cover too little: %d issued, %d narrowed, %d escalated, %d refused", issued, clamped, escalated, denied)
	}
}

// checkWithin reports how g is wider than request r, asked at now, or rule
// u.
func checkWithin(g, r grant.Request, now int64, u *rule) error {
	for _, dim := range []struct {
		name           string
		got, req, rule []string
	}{{"svc", g.Svc, r.Svc, u.scope.svc}, {"verbs", g.Verbs, r.Verbs, u.scope.verbs}} {
		if dim.got != nil && len(dim.got) == 0 {
			return fmt.Errorf("%s is an empty list", dim.name)
		}
		if !subset(dim.got, dim.req) {
			return fmt.Errorf("%s %q wider than the request's %q", dim.name, dim.got, dim.req)
		}
		if !subset(dim.got, dim.rule) {
			return fmt.Errorf("%s %q wider than the rule's %q", dim.name, dim.got, dim.rule)
		}
	}
	if g.Can != nil && len(g.Can) == 0 {
		return fmt.Errorf("can is an empty list")
	}
	if !coveredBy(g.Can, r.Can) || !coveredBy(g.Can, u.scope.can) {
		return fmt.Errorf("can %q not inside request %q and rule %q", g.Can, r.Can, u.scope.can)
	}
	maxLife := u.maxExp
	if maxLife == 0 {
		maxLife = Ceiling
	}
	switch {
	case g.Exp <= now:
		return fmt.Errorf("expiry %d not after now %d", g.Exp, now)
	case r.Exp != 0 && g.Exp > r.Exp:
		return fmt.Errorf("expiry %d later than requested %d", g.Exp, r.Exp)
	case g.Exp-now > maxLife:
		return fmt.Errorf("lifetime %d longer than the rule's %d", g.Exp-now, maxLife)
	case g.Nbf < r.Nbf:
		return fmt.Errorf("not-before %d earlier than requested %d", g.Nbf, r.Nbf)
	case g.Nbf != 0 && g.Nbf >= g.Exp:
		return fmt.Errorf("not-before %d not before expiry %d", g.Nbf, g.Exp)
	}
	for _, m := range []struct {
		name           string
		got, req, rule *grant.Money
	}{{"per", g.Per, r.Per, u.per}, {"spend", g.Spend, r.Spend, u.spend}} {
		for _, limit := range []*grant.Money{m.req, m.rule} {
			if limit == nil {
				continue
			}
			if m.got == nil || m.got.Currency != limit.Currency || m.got.Amount > limit.Amount {
				return fmt.Errorf("%s %v wider than %v", m.name, m.got, limit)
			}
		}
	}
	for _, limit := range []string{r.Risk, u.risk} {
		if limit != "" && (g.Risk == "" || riskRank(g.Risk) > riskRank(limit)) {
			return fmt.Errorf("risk %q wider than %q", g.Risk, limit)
		}
	}
	return nil
}

// checkUnnarrowed reports where g differs from what r named, for decisions
// that report no narrowing.
func checkUnnarrowed(g, r grant.Request) error {
	switch {
	case r.Svc != nil && !slices.Equal(g.Svc, r.Svc):
		return fmt.Errorf("svc")
	case r.Verbs != nil && !slices.Equal(g.Verbs, r.Verbs):
		return fmt.Errorf("verbs")
	case r.Can != nil && !slices.Equal(g.Can, r.Can):
		return fmt.Errorf("can")
	case r.Exp != 0 && g.Exp != r.Exp:
		return fmt.Errorf("exp")
	case r.Per != nil && *g.Per != *r.Per:
		return fmt.Errorf("per")
	case r.Spend != nil && *g.Spend != *r.Spend:
		return fmt.Errorf("spend")
	case r.Risk != "" && g.Risk != r.Risk:
		return fmt.Errorf("risk")
	case r.Nbf != g.Nbf:
		return fmt.Errorf("nbf")
	}
	return nil
}
