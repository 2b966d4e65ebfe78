package policies

import (
	"fmt"

	"github.com/parley-keyd/parley-keyd/grant"
)

// Within reports whether grant g asks for nothing beyond scope, the grant a
// human approved and had remembered (issue 24): its services, verbs and
// capabilities are inside scope's, and it carries a per, a spend and a risk
// ceiling at most scope's wherever scope has one. Times are not compared:
// the daemon bounds a grant's expiry under a remembered approval itself.
// When it is not within, why says the first dimension that is wider.
func Within(g, scope grant.Request) (ok bool, why string) {
	switch {
	case !subset(g.Svc, scope.Svc):
		return false, "it names services beyond the remembered ones"
	case !subset(g.Verbs, scope.Verbs):
		return false, "it names verbs beyond the remembered ones"
	case !coveredBy(g.Can, scope.Can):
		return false, "it names capabilities beyond the remembered ones"
	}
	for _, m := range []struct {
		name        string
		want, limit *grant.Money
	}{{"per", g.Per, scope.Per}, {"spend", g.Spend, scope.Spend}} {
		if l, w := m.limit, m.want; l != nil && (w == nil || w.Currency != l.Currency || w.Amount > l.Amount) {
			return false, fmt.Sprintf("its %s is above the remembered one", m.name)
		}
	}
	if scope.Risk != "" && (g.Risk == "" || riskRank(g.Risk) < 0 || riskRank(g.Risk) > riskRank(scope.Risk)) {
		return false, "its risk ceiling is above the remembered one"
	}
	return true, ""
}

// RememberAllowed reports whether rule, as this policy has it, still lets
// agent have an approval of scope remembered: the rule exists, asks, names
// the agent, allows remembering, and covers scope without cutting it. It
// returns the rule's remember and remember_exp and whether it needs a
// strong channel, or why not. A reload that fails it ends the approvals
// remembered under that rule.
func (p *Policy) RememberAllowed(agent, rule string, scope grant.Request) (remember, rememberExp int64, strong bool, why string) {
	if p.agentNamed(agent) == nil {
		return 0, 0, false, fmt.Sprintf("the policy no longer defines agent %q", agent)
	}
	for _, u := range p.rules {
		if u.name != rule {
			continue
		}
		switch {
		case u.action != Ask:
			return 0, 0, false, fmt.Sprintf("rule %q no longer asks a human", rule)
		case !appliesTo(u.agents, agent):
			return 0, 0, false, fmt.Sprintf("rule %q no longer applies to agent %q", rule, agent)
		case u.remember == 0:
			return 0, 0, false, fmt.Sprintf("rule %q no longer allows remembering approvals", rule)
		}
		s := scope
		s.Exp, s.Nbf = 0, 0
		if f := fitRule(u, s, 0); len(f.exceeded) > 0 {
			return 0, 0, false, fmt.Sprintf("rule %q no longer covers the remembered request: %s", rule, f.exceeded[0])
		}
		return u.remember, u.rememberExp, u.strong, ""
	}
	return 0, 0, false, fmt.Sprintf("the policy no longer has rule %q", rule)
}
