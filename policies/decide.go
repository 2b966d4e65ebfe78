package policies

import (
	"fmt"
	"strings"

	"github.com/parley-keyd/parley-keyd/grant"
)

// Bounds on a request. Requests come from untrusted agents; containment
// checks cost the product of list lengths, so an agent must not be able to
// make the daemon spin on a huge list (denial of service).
const (
	maxRequestList   = 64
	maxRequestString = 256
	maxTime          = 1<<53 - 1 // canonical JSON integers (§10)
)

// AgentFor returns the name of the first agent of the policy that matches
// the caller, in file order. ok is false when none does; such a caller is
// refused everything.
func (p *Policy) AgentFor(c Caller) (name string, ok bool) {
	if a := p.agentFor(c); a != nil {
		return a.name, true
	}
	return "", false
}

func (p *Policy) agentFor(c Caller) *agent {
	for _, a := range p.agents {
		if a.matches(c) {
			return a
		}
	}
	return nil
}

// matches reports whether every matcher the agent names accepts the caller.
// Within one matcher any listed value is enough. An empty caller field never
// matches a matcher that names values (fail closed).
func (a *agent) matches(c Caller) bool {
	if a.any {
		return true
	}
	if a.users != nil && (c.User == "" || !has(a.users, c.User)) {
		return false
	}
	if a.uids != nil && !has(a.uids, c.UID) {
		return false
	}
	if a.groups != nil && !anyOf(c.Groups, func(g string) bool { return g != "" && has(a.groups, g) }) {
		return false
	}
	if a.gids != nil && !has(a.gids, c.GID) && !anyOf(c.GroupIDs, func(g uint32) bool { return has(a.gids, g) }) {
		return false
	}
	if a.exes != nil && (c.Exe == "" || !anyOf(a.exes, func(p string) bool { return match(p, c.Exe) })) {
		return false
	}
	if a.units != nil && (c.Unit == "" || !anyOf(a.units, func(p string) bool { return match(p, c.Unit) })) {
		return false
	}
	if a.keys != nil && (c.HolderKey == "" || !has(a.keys, c.HolderKey)) {
		return false
	}
	return true
}

func anyOf[T any](xs []T, f func(T) bool) bool {
	for _, x := range xs {
		if f(x) {
			return true
		}
	}
	return false
}

// checkRequest refuses malformed requests, asked at now, before any rule
// sees them.
func checkRequest(r grant.Request, now int64) error {
	if now < 0 || now > maxTime {
		return fmt.Errorf("the request time %d is out of range", now)
	}
	for _, l := range []struct {
		name  string
		list  []string
		check func(string) error
	}{{"svc", r.Svc, printable}, {"verbs", r.Verbs, checkVerb}, {"can", r.Can, checkPattern}} {
		if l.list == nil {
			continue
		}
		if len(l.list) == 0 {
			return fmt.Errorf("%s is an empty list, which allows nothing; leave it out to ask for all", l.name)
		}
		if len(l.list) > maxRequestList {
			return fmt.Errorf("%s has more than %d entries", l.name, maxRequestList)
		}
		for _, s := range l.list {
			if len(s) > maxRequestString {
				return fmt.Errorf("an entry of %s is longer than %d bytes", l.name, maxRequestString)
			}
			if err := l.check(s); err != nil {
				return fmt.Errorf("%s: %v", l.name, err)
			}
		}
	}
	if r.Exp != 0 && (r.Exp <= now || r.Exp > maxTime) {
		return fmt.Errorf("the requested expiry is not in the future")
	}
	if r.Nbf < 0 || r.Nbf > maxTime {
		return fmt.Errorf("the requested not-before time is out of range")
	}
	if r.Nbf != 0 && r.Exp != 0 && r.Nbf >= r.Exp {
		return fmt.Errorf("the requested not-before time is not before the expiry")
	}
	for _, m := range []struct {
		name string
		m    *grant.Money
	}{{"per", r.Per}, {"spend", r.Spend}} {
		if m.m == nil {
			continue
		}
		if m.m.Amount < 0 || m.m.Amount > maxTime {
			return fmt.Errorf("%s amount %d is out of range", m.name, m.m.Amount)
		}
		if len(m.m.Currency) != 3 || strings.Trim(m.m.Currency, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
			return fmt.Errorf("%s currency %q is not three capital letters", m.name, m.m.Currency)
		}
	}
	if r.Risk != "" && riskRank(r.Risk) < 0 {
		return fmt.Errorf("risk must be low, medium or high, not %q", r.Risk)
	}
	return nil
}

// overlapsScope reports whether some request inside r's scope is also
// inside s: the services, verbs and capabilities overlap.
func (s scope) overlaps(r grant.Request) bool {
	return overlapNames(s.svc, r.Svc) && overlapNames(s.verbs, r.Verbs) && overlapPatterns(s.can, r.Can)
}

// fit is how a request fits a rule.
type fit struct {
	grant      grant.Request // the grant within the rule's limits (narrowed when clamping)
	narrowed   []string      // where grant is narrower than the request
	added      []string      // rule limits the request did not name
	exceeded   []string      // where the request goes beyond the rule
	impossible string        // why clamping cannot help; "" when it can
}

// fitRule measures r, asked at now, against rule u (auto or ask). The grant
// it returns is the request cut to the rule on every dimension; it is issued
// only when nothing was exceeded, or when the rule clamps and clamping is
// possible.
func fitRule(u *rule, r grant.Request, now int64) fit {
	var f fit
	g := grant.Request{Nbf: r.Nbf, Risk: r.Risk}
	name := fmt.Sprintf("rule %q", u.name)

	// Services and verbs: a request without one asks for all of them; only
	// a rule without it covers that. Capabilities: every requested pattern
	// must be contained in an allowed one; clamping keeps the intersections.
	g.Svc = fitList(&f, name, "service", "services", "allowed by", r.Svc, u.scope.svc, subset, intersectNames)
	g.Verbs = fitList(&f, name, "verb", "verbs", "allowed by", r.Verbs, u.scope.verbs, subset, intersectNames)
	g.Can = fitList(&f, name, "capability", "capabilities", "within", r.Can, u.scope.can, coveredBy, intersectPatterns)

	// Expiry: every grant has one. A request without one gets the rule's
	// default; one beyond the rule's maximum exceeds it.
	maxLife := u.maxExp
	capName := "maximum"
	if maxLife == 0 {
		maxLife, capName = Ceiling, "ceiling"
	}
	switch {
	case r.Exp == 0:
		life := u.defaultExp
		if life == 0 {
			life = min(DefaultLifetime, maxLife)
			f.added = append(f.added, fmt.Sprintf("expiry set to %s, the default lifetime", fmtDur(life)))
		} else {
			f.added = append(f.added, fmt.Sprintf("expiry set to %s, the default of %s", fmtDur(life), name))
		}
		g.Exp = now + life
	case r.Exp-now > maxLife:
		g.Exp = now + maxLife
		f.exceeded = append(f.exceeded, fmt.Sprintf("the requested lifetime of %s exceeds the %s of %s, %s", fmtDur(r.Exp-now), capName, name, fmtDur(maxLife)))
		f.narrowed = append(f.narrowed, fmt.Sprintf("expiry cut from %s to the %s of %s, %s", fmtDur(r.Exp-now), capName, name, fmtDur(maxLife)))
	default:
		g.Exp = r.Exp
	}
	if r.Nbf != 0 && r.Nbf >= g.Exp {
		f.exceeded = append(f.exceeded, fmt.Sprintf("the requested not-before time is after the expiry %s would set", name))
		f.impossible = fmt.Sprintf("the requested not-before time is after the expiry %s would set", name)
	}

	// Money and risk: a limit the request does not name is added; a named
	// one above the rule's exceeds it; another currency cannot be compared.
	g.Per = fitMoney(&f, "per-commit limit", r.Per, u.per, name)
	g.Spend = fitMoney(&f, "spending limit", r.Spend, u.spend, name)
	switch {
	case u.risk == "":
	case r.Risk == "":
		g.Risk = u.risk
		f.added = append(f.added, fmt.Sprintf("risk ceiling %s added by %s", u.risk, name))
	case riskRank(r.Risk) > riskRank(u.risk):
		g.Risk = u.risk
		f.exceeded = append(f.exceeded, fmt.Sprintf("the requested risk ceiling %s is above the %s of %s", r.Risk, u.risk, name))
		f.narrowed = append(f.narrowed, fmt.Sprintf("risk ceiling cut from %s to the %s of %s", r.Risk, u.risk, name))
	}
	f.grant = g
	return f
}

// fitList fits one list dimension of a request (services, verbs or
// capabilities) to a rule: want as it is when covered says the rule allows
// it, else its intersection with allowed, recording what exceeded the rule
// and what was cut. A nil want asks for every one.
func fitList(f *fit, rule, one, many, by string, want, allowed []string,
	covered func(want, allowed []string) bool, intersect func(want, allowed []string) []string) []string {
	if covered(want, allowed) {
		return clone(want)
	}
	got := intersect(want, allowed)
	from := "every " + one
	if want != nil {
		from = list(want)
	}
	f.exceeded = append(f.exceeded, fmt.Sprintf("%s allows only %s %s and the request asks for %s", rule, many, list(allowed), from))
	if len(got) == 0 {
		f.impossible = fmt.Sprintf("none of the requested %s is %s %s", many, by, rule)
	}
	f.narrowed = append(f.narrowed, fmt.Sprintf("%s cut from %s to %s", many, from, list(got)))
	return got
}

func fitMoney(f *fit, what string, want, limit *grant.Money, name string) *grant.Money {
	switch {
	case limit == nil:
		return cloneMoney(want)
	case want == nil:
		f.added = append(f.added, fmt.Sprintf("%s of %s added by %s", what, fmtMoney(*limit), name))
		return cloneMoney(limit)
	case want.Currency != limit.Currency:
		s := fmt.Sprintf("the requested %s is in %s and %s limits it in %s", what, want.Currency, name, limit.Currency)
		f.exceeded = append(f.exceeded, s)
		f.impossible = s
		return cloneMoney(limit)
	case want.Amount > limit.Amount:
		f.exceeded = append(f.exceeded, fmt.Sprintf("the requested %s of %s is above the %s of %s", what, fmtMoney(*want), fmtMoney(*limit), name))
		f.narrowed = append(f.narrowed, fmt.Sprintf("%s cut from %s to the %s of %s", what, fmtMoney(*want), fmtMoney(*limit), name))
		return cloneMoney(limit)
	}
	return cloneMoney(want)
}

func clone(xs []string) []string {
	if xs == nil {
		return nil
	}
	return append([]string{}, xs...)
}

func cloneMoney(m *grant.Money) *grant.Money {
	if m == nil {
		return nil
	}
	c := *m
	return &c
}

// Decide decides one request of caller c. Rules are tried in file order,
// skipping those that do not name the caller's agent or whose scope does not
// overlap the request:
//
//   - a deny rule whose scope overlaps the request refuses it;
//   - an auto or ask rule decides when it covers the request, or when it
//     clamps and the request can be cut down to it;
//   - an ask rule that overlaps the request but does not decide makes any
//     later decision at least Ask (its channels and strength apply too), so
//     that a broad auto rule cannot hand out what an earlier ask rule
//     reserved for a human;
//   - when no rule decides, the request is refused.
//
// Decide never returns a grant wider than the request or the deciding rule,
// and every grant it returns has an expiry after now, the unix time of the
// request.
func (p *Policy) Decide(c Caller, r grant.Request, now int64) Decision {
	a := p.agentFor(c)
	if a == nil {
		return Decision{Action: Deny, Reason: fmt.Sprintf("no agent of the policy matches this caller (uid %d); the policy must name it in an [[agent]]", c.UID)}
	}
	d := Decision{Action: Deny, Agent: a.name}
	if err := checkRequest(r, now); err != nil {
		d.Reason = "malformed request: " + err.Error()
		return d
	}
	var escalators []*rule
	firstMiss := ""
	for _, u := range p.rules {
		if !appliesTo(u.agents, a.name) || !u.scope.overlaps(r) {
			continue
		}
		if u.action == Deny {
			d.Rule = u.name
			d.Reason = fmt.Sprintf("rule %q refuses requests of agent %q that reach into %s; ask for less", u.name, a.name, describeScope(u.scope))
			return d
		}
		f := fitRule(u, r, now)
		if len(f.exceeded) > 0 && (!u.clamp || f.impossible != "") {
			if u.action == Ask {
				escalators = append(escalators, u)
			}
			if firstMiss == "" {
				firstMiss = f.exceeded[0]
			}
			continue
		}
		d.Rule = u.name
		d.Grant = f.grant
		if len(f.exceeded) > 0 {
			d.Narrowed = f.narrowed
		}
		d.Added = f.added
		return p.finish(d, u, escalators)
	}
	what := "every capability"
	if r.Can != nil {
		what = list(r.Can)
	}
	d.Reason = fmt.Sprintf("no rule covers %s for agent %q", what, a.name)
	if firstMiss != "" {
		d.Reason += ": " + firstMiss + "; ask within that rule's limits"
	}
	return d
}

// finish sets the action, channels and strength of a decision by rule u,
// raising it to Ask when earlier ask rules overlapped the request.
func (p *Policy) finish(d Decision, u *rule, escalators []*rule) Decision {
	d.Action = u.action
	if len(escalators) == 0 && u.action == Auto {
		d.Reason = fmt.Sprintf("rule %q allows this without asking", u.name)
		return d
	}
	asks := escalators
	if u.action == Ask {
		asks = append([]*rule{u}, escalators...)
	}
	channels := allChannels
	for _, e := range asks {
		if e.channels != nil {
			channels = intersectChannels(channels, e.channels)
		}
		d.Strong = d.Strong || e.strong
	}
	for _, e := range escalators {
		d.Escalated = append(d.Escalated, e.name)
	}
	if len(channels) == 0 {
		names := make([]string, len(asks))
		for i, e := range asks {
			names[i] = e.name
		}
		return Decision{Action: Deny, Agent: d.Agent, Rule: u.name,
			Reason: fmt.Sprintf("rules %s all apply to this request and share no approval channel; name svc and can so that the request stays inside one of them", list(names))}
	}
	d.Action = Ask
	d.Channels = channels
	d.Remember, d.RememberExp = asks[0].remember, asks[0].rememberExp
	for _, e := range asks[1:] {
		d.Remember, d.RememberExp = min(d.Remember, e.remember), min(d.RememberExp, e.rememberExp)
	}
	if d.Remember == 0 {
		d.RememberExp = 0
	}
	if len(escalators) > 0 {
		d.Reason = fmt.Sprintf("rule %q would allow this, and it also reaches into rule %q, which needs a human to approve", u.name, escalators[0].name)
	} else {
		d.Reason = fmt.Sprintf("rule %q needs a human to approve", u.name)
	}
	return d
}

func intersectChannels(a, b []Channel) []Channel {
	var out []Channel
	for _, c := range a {
		if has(b, c) {
			out = append(out, c)
		}
	}
	return out
}

// describeScope writes a rule's scope for a sentence.
func describeScope(s scope) string {
	var parts []string
	if s.svc != nil {
		parts = append(parts, "services "+list(s.svc))
	}
	if s.verbs != nil {
		parts = append(parts, "verbs "+list(s.verbs))
	}
	if s.can != nil {
		parts = append(parts, "capabilities "+list(s.can))
	}
	if len(parts) == 0 {
		return "everything"
	}
	return strings.Join(parts, ", ")
}
