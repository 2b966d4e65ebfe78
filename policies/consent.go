package policies

import (
	"fmt"

	"github.com/parley-keyd/parley-keyd/grant"
)

// DecideConsent decides whether a human may be asked for a consent grant
// (§6.6) for the proposal described by f. It returns Ask or Deny, never
// Auto: consent is never issued without a human. The first consent rule, in
// file order, that names the caller's agent and whose svc and can match the
// proposal's service and capability decides:
//
//   - a deny rule refuses;
//   - a cost above deny_above_cost, or in another currency, is refused;
//   - a risk above deny_above_risk is refused;
//   - strong = true, a cost above strong_above_cost (or in another
//     currency), or a risk above strong_above_risk requires a strong
//     channel;
//   - Expires is the proposal's expiry, cut to Now + max_exp (or the
//     Ceiling).
//
// A risk other than low, medium or high counts as high. When no consent
// rule matches, the consent is refused.
func (p *Policy) DecideConsent(c Caller, f ConsentFacts) ConsentDecision {
	a := p.agentFor(c)
	if a == nil {
		return ConsentDecision{Action: Deny, Reason: fmt.Sprintf("no agent of the policy matches this caller (uid %d); the policy must name it in an [[agent]]", c.UID)}
	}
	d := ConsentDecision{Action: Deny, Agent: a.name}
	switch {
	case f.Now < 0 || f.Now > maxTime:
		d.Reason = "malformed consent request: the request time is out of range"
		return d
	case f.Expires <= f.Now || f.Expires > maxTime:
		d.Reason = "the proposal has expired; ask the service for a new one"
		return d
	case printable(f.Service) != nil || len(f.Service) > maxRequestString:
		d.Reason = "malformed consent request: the service id is empty or not printable"
		return d
	case printable(f.Capability) != nil || len(f.Capability) > maxRequestString:
		d.Reason = "malformed consent request: the capability is empty or not printable"
		return d
	}
	cost := f.Cost
	if cost != nil && cost.Amount < 0 {
		d.Reason = "malformed consent request: the cost is negative"
		return d
	}
	if cost != nil && cost.Amount == 0 {
		cost = nil // free in any currency
	}
	risk := f.Risk
	if riskRank(risk) < 0 {
		risk = "high" // fail closed: an unknown level is the worst one
	}
	for _, u := range p.consents {
		if !appliesTo(u.agents, a.name) {
			continue
		}
		if u.svc != nil && !has(u.svc, f.Service) {
			continue
		}
		if u.can != nil && !anyOf(u.can, func(pat string) bool { return match(pat, f.Capability) }) {
			continue
		}
		d.Rule = u.name
		if u.action == Deny {
			d.Reason = fmt.Sprintf("consent rule %q refuses consent for %q at %q", u.name, f.Capability, f.Service)
			return d
		}
		if u.denyAboveCost != nil && cost != nil {
			if cost.Currency != u.denyAboveCost.Currency {
				d.Reason = fmt.Sprintf("consent rule %q limits costs in %s and this proposal costs %s", u.name, u.denyAboveCost.Currency, fmtMoney(*cost))
				return d
			}
			if cost.Amount > u.denyAboveCost.Amount {
				d.Reason = fmt.Sprintf("consent rule %q refuses costs above %s and this proposal costs %s", u.name, fmtMoney(*u.denyAboveCost), fmtMoney(*cost))
				return d
			}
		}
		if u.denyAboveRisk != "" && riskRank(risk) > riskRank(u.denyAboveRisk) {
			d.Reason = fmt.Sprintf("consent rule %q refuses risk above %s and this proposal's risk is %s", u.name, u.denyAboveRisk, risk)
			return d
		}
		d.Action = Ask
		d.Strong = u.strong ||
			u.strongAboveCost != nil && cost != nil && costAbove(*cost, *u.strongAboveCost) ||
			u.strongAboveRisk != "" && riskRank(risk) > riskRank(u.strongAboveRisk)
		d.Channels = u.channels
		if d.Channels == nil {
			d.Channels = append([]Channel{}, allChannels...)
		}
		life := u.maxExp
		if life == 0 {
			life = Ceiling
		}
		d.Expires = min(f.Expires, f.Now+life)
		d.Reason = fmt.Sprintf("consent rule %q: a human must approve this proposal", u.name)
		if d.Strong {
			d.Reason += " on a strong channel"
		}
		return d
	}
	d.Reason = fmt.Sprintf("no consent rule covers %q at %q for agent %q", f.Capability, f.Service, a.name)
	return d
}

// costAbove reports whether cost is above limit; a cost in another currency
// cannot be compared and counts as above (fail closed).
func costAbove(cost, limit grant.Money) bool {
	return cost.Currency != limit.Currency || cost.Amount > limit.Amount
}
