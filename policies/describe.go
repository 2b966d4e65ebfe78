package policies

import (
	"fmt"
	"slices"
	"strings"

	"github.com/parley-keyd/parley-keyd/grant"
)

// Summary is one rule that applies to an agent, as a HELLO manifest or a
// status page shows it: what the agent may get and how. Lists are absent
// when the rule does not restrict that dimension.
type Summary struct {
	Rule       string    `json:"rule"`
	Action     Action    `json:"action"`
	Svc        []string  `json:"svc,omitempty"`
	Verbs      []string  `json:"verbs,omitempty"`
	Can        []string  `json:"can,omitempty"`
	MaxExp     int64     `json:"max_exp,omitempty"`     // seconds; absent for deny
	DefaultExp int64     `json:"default_exp,omitempty"` // seconds; absent for deny
	Per        *Limit    `json:"per,omitempty"`
	Spend      *Limit    `json:"spend,omitempty"`
	Risk       string    `json:"risk,omitempty"`
	Channels   []Channel `json:"channels,omitempty"`
	Strong     bool      `json:"strong,omitempty"`
	Clamp      bool      `json:"clamp,omitempty"`
	// Remember is, for an ask rule that allows it, the longest a human may
	// have an approval remembered, and RememberExp each grant's lifetime
	// under it, in seconds.
	Remember    int64  `json:"remember,omitempty"`
	RememberExp int64  `json:"remember_exp,omitempty"`
	Text        string `json:"text"` // the rule in one plain sentence
}

// Limit is a money limit written as the per and spend caveats of a grant
// write it (§6.3): the most, in minor units, and the currency. Limits are
// "max" wherever they appear; "amount" is a cost, as in a proposal (§5.1).
type Limit struct {
	Max      int64  `json:"max"`
	Currency string `json:"currency"`
}

func limitOf(m *grant.Money) *Limit {
	if m == nil {
		return nil
	}
	return &Limit{Max: m.Amount, Currency: m.Currency}
}

// Allowed returns, in decision order, the rules that apply to the caller's
// agent: what it may get without asking, what needs approval and what is
// refused. It is empty for a caller that matches no agent.
func (p *Policy) Allowed(c Caller) []Summary {
	a := p.agentFor(c)
	if a == nil {
		return nil
	}
	var out []Summary
	for _, u := range p.rules {
		if !appliesTo(u.agents, a.name) {
			continue
		}
		s := Summary{
			Rule: u.name, Action: u.action,
			Svc: clone(u.scope.svc), Verbs: clone(u.scope.verbs), Can: clone(u.scope.can),
			Text: describeRule(u),
		}
		if u.action != Deny {
			s.MaxExp, s.DefaultExp = u.lifetimes()
			s.Per, s.Spend, s.Risk = limitOf(u.per), limitOf(u.spend), u.risk
			s.Clamp = u.clamp
		}
		if u.action == Ask {
			s.Channels = u.channelsOrAll()
			s.Strong = u.strong
			s.Remember, s.RememberExp = u.remember, u.rememberExp
		}
		out = append(out, s)
	}
	return out
}

// lifetimes returns the rule's effective maximum and default lifetimes.
func (u *rule) lifetimes() (maxLife, defLife int64) {
	maxLife = u.maxExp
	if maxLife == 0 {
		maxLife = Ceiling
	}
	defLife = u.defaultExp
	if defLife == 0 {
		defLife = min(DefaultLifetime, maxLife)
	}
	return maxLife, defLife
}

func (u *rule) channelsOrAll() []Channel {
	if u.channels == nil {
		return append([]Channel{}, allChannels...)
	}
	return append([]Channel{}, u.channels...)
}

// orList writes channels as "terminal, desktop or phone".
func orList(cs []Channel) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = string(c)
	}
	if len(s) <= 1 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// scopeWords writes a scope as "capabilities "x" at services "y" with verbs "z"".
func scopeWords(s scope) string {
	var b strings.Builder
	if s.can == nil {
		b.WriteString("every capability")
	} else {
		b.WriteString("capabilities " + list(s.can))
	}
	if s.svc == nil {
		b.WriteString(" at every service")
	} else {
		b.WriteString(" at services " + list(s.svc))
	}
	if s.verbs == nil {
		b.WriteString(" with every verb")
	} else {
		b.WriteString(" with verbs " + list(s.verbs))
	}
	return b.String()
}

// describeRule writes a rule as one plain sentence.
func describeRule(u *rule) string {
	switch u.action {
	case Deny:
		if u.scope.svc == nil && u.scope.verbs == nil && u.scope.can == nil {
			return "Refuses every request."
		}
		return fmt.Sprintf("Refuses every request that reaches into %s.", scopeWords(u.scope))
	}
	var b strings.Builder
	if u.action == Auto {
		b.WriteString("Issues without asking")
	} else {
		fmt.Fprintf(&b, "Asks a human on %s", orList(u.channelsOrAll()))
		if u.strong {
			b.WriteString(" (a strong channel is required)")
		}
		b.WriteString(" before issuing")
	}
	fmt.Fprintf(&b, " grants for %s", scopeWords(u.scope))
	maxLife, defLife := u.lifetimes()
	if u.maxExp == 0 {
		fmt.Fprintf(&b, ", lasting up to the %s ceiling (%s when the request names no expiry)", fmtDur(maxLife), fmtDur(defLife))
	} else {
		fmt.Fprintf(&b, ", lasting at most %s (%s when the request names no expiry)", fmtDur(maxLife), fmtDur(defLife))
	}
	switch {
	case u.per != nil && u.per.Amount == 0:
		b.WriteString(", for commits that cost nothing")
	case u.per != nil:
		fmt.Fprintf(&b, ", at most %s per commit", fmtMoney(*u.per))
	}
	if u.spend != nil {
		fmt.Fprintf(&b, ", at most %s spent in all", fmtMoney(*u.spend))
	}
	if u.risk != "" {
		fmt.Fprintf(&b, ", risk at most %s", u.risk)
	}
	if u.remember != 0 {
		fmt.Fprintf(&b, "; a human may have an approval remembered for up to %s, each grant under it living %s", fmtDur(u.remember), fmtDur(u.rememberExp))
	}
	if u.clamp {
		b.WriteString("; larger requests are cut down to these limits.")
	} else {
		b.WriteString("; larger requests go on to the next rule.")
	}
	return b.String()
}

func describeAgent(a *agent) string {
	if a.any {
		return "every caller the daemon accepts"
	}
	var parts []string
	add := func(what string, xs []string) {
		if xs != nil {
			parts = append(parts, what+" "+orQuoted(xs))
		}
	}
	ids := func(xs []uint32) []string {
		if xs == nil {
			return nil
		}
		s := make([]string, len(xs))
		for i, x := range xs {
			s[i] = fmt.Sprint(x)
		}
		return s
	}
	add("user", a.users)
	if a.uids != nil {
		parts = append(parts, "uid "+strings.Join(ids(a.uids), " or "))
	}
	add("group", a.groups)
	if a.gids != nil {
		parts = append(parts, "gid "+strings.Join(ids(a.gids), " or "))
	}
	add("executable", a.exes)
	add("systemd unit", a.units)
	add("holder key", a.keys)
	return "callers with " + strings.Join(parts, " and ")
}

func orQuoted(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	return strings.Join(q, " or ")
}

func agentWords(names []string) string {
	if len(names) == 1 && names[0] == "*" {
		return "every agent"
	}
	if len(names) == 1 {
		return "agent " + list(names)
	}
	return "agents " + list(names)
}

func describeConsent(c *consentRule) string {
	what := "every capability"
	if c.can != nil {
		what = "capabilities " + list(c.can)
	}
	if c.svc != nil {
		what += " at services " + list(c.svc)
	} else {
		what += " at every service"
	}
	if c.action == Deny {
		if c.can == nil && c.svc == nil {
			return "Refuses every consent."
		}
		return fmt.Sprintf("Refuses consent for %s.", what)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Asks a human on %s before consenting to %s", orList(channelsOrAll(c.channels)), what)
	if c.denyAboveCost != nil {
		fmt.Fprintf(&b, "; refuses costs above %s or in another currency", fmtMoney(*c.denyAboveCost))
	}
	if c.denyAboveRisk != "" {
		fmt.Fprintf(&b, "; refuses risk above %s", c.denyAboveRisk)
	}
	switch {
	case c.strong:
		b.WriteString("; always requires a strong channel")
	case c.strongAboveCost != nil || c.strongAboveRisk != "":
		var w []string
		if c.strongAboveCost != nil {
			w = append(w, fmt.Sprintf("costs above %s (or in another currency)", fmtMoney(*c.strongAboveCost)))
		}
		if c.strongAboveRisk != "" {
			w = append(w, "risk above "+c.strongAboveRisk)
		}
		fmt.Fprintf(&b, "; requires a strong channel for %s", strings.Join(w, " and "))
	}
	if c.maxExp != 0 {
		fmt.Fprintf(&b, "; a consent lives at most %s", fmtDur(c.maxExp))
	} else {
		fmt.Fprintf(&b, "; a consent lives until the proposal expires, at most %s", fmtDur(Ceiling))
	}
	b.WriteString(".")
	return b.String()
}

func channelsOrAll(cs []Channel) []Channel {
	if cs == nil {
		return allChannels
	}
	return cs
}

// Describe returns the policy in plain words, one entry per agent, rule and
// consent rule, in the order they are tried, for `parley-keyd policy check`.
func (p *Policy) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Policy %s: %s, %s, %s.\n", p.file, count(len(p.agents), "agent"), count(len(p.rules), "rule"), count(len(p.consents), "consent rule"))
	b.WriteString("\nAgents (the first that matches a caller names it; a caller no agent matches is refused):\n")
	if len(p.agents) == 0 {
		b.WriteString("  none: every caller is refused.\n")
	}
	for i, a := range p.agents {
		fmt.Fprintf(&b, "  %d. %q (line %d): %s; at most %d requests a minute and %d approvals waiting.\n",
			i+1, a.name, a.line, describeAgent(a), a.rate, a.pending)
	}
	b.WriteString("\nRules (the first that covers a request decides; a deny rule refuses every request that reaches into it; a request no rule covers is refused):\n")
	if len(p.rules) == 0 {
		b.WriteString("  none: every request is refused.\n")
	}
	for i, u := range p.rules {
		fmt.Fprintf(&b, "  %d. %q (line %d), for %s: %s\n", i+1, u.name, u.line, agentWords(u.agents), describeRule(u))
	}
	b.WriteString("\nConsent (never without a human; the first rule that matches the proposal decides; a consent no rule covers is refused):\n")
	if len(p.consents) == 0 {
		b.WriteString("  none: every consent is refused.\n")
	}
	for i, c := range p.consents {
		fmt.Fprintf(&b, "  %d. %q (line %d), for %s: %s\n", i+1, c.name, c.line, agentWords(c.agents), describeConsent(c))
	}
	return b.String()
}

// Warnings returns plain sentences about shapes that are legal but likely
// wrong or risky: agents and rules that can never match because an earlier
// one always does first, agents no rule applies to, agents of one user told
// apart only by exe or unit but given different rules, auto rules without
// an expiry cap, auto rules for every capability, auto rules that allow
// money without a per limit, money limits without svc, and no consent
// rules.
func (p *Policy) Warnings() []string {
	var w []string
	for j, b := range p.agents {
		for _, a := range p.agents[:j] {
			if agentCovers(a, b) {
				w = append(w, fmt.Sprintf("agent %q (line %d) can never match: agent %q (line %d) comes first and matches every caller it would", b.name, b.line, a.name, a.line))
				break
			}
		}
		for _, a := range p.agents[:j] {
			if !agentCovers(a, b) && onlyProgramApart(a, b) && p.rulesDiffer(a.name, b.name) {
				w = append(w, fmt.Sprintf("agents %q (line %d) and %q (line %d) may match the same OS user and are told apart only by exe or unit, "+
					"which is no boundary within one user: any program of that user can pass as either and get the other's rules; "+
					"run them as different users, or tell them apart by key (docs/policy.md)", a.name, a.line, b.name, b.line))
			}
		}
		used := false
		for _, u := range p.rules {
			if appliesTo(u.agents, b.name) {
				used = true
				break
			}
		}
		if !used {
			w = append(w, fmt.Sprintf("agent %q (line %d) has no rules: every request from it is refused", b.name, b.line))
		}
	}
	for j, v := range p.rules {
		for _, u := range p.rules[:j] {
			if agentsCover(u.agents, v.agents) && ruleShadows(u, v) {
				w = append(w, fmt.Sprintf("rule %q (line %d) can never decide: rule %q (line %d) comes first and decides every request it would", v.name, v.line, u.name, u.line))
				break
			}
		}
		if v.action != Auto {
			continue
		}
		if v.maxExp == 0 {
			w = append(w, fmt.Sprintf("rule %q (line %d) issues grants without asking and has no max_exp: they may live up to the %s ceiling", v.name, v.line, fmtDur(Ceiling)))
		}
		if v.scope.can == nil || has(v.scope.can, "*") {
			w = append(w, fmt.Sprintf("rule %q (line %d) issues grants for every capability (*) without asking", v.name, v.line))
		}
		if v.per == nil && (v.scope.verbs == nil || has(v.scope.verbs, "COMMIT")) {
			w = append(w, fmt.Sprintf("rule %q (line %d) issues grants without asking and has no per limit: they allow commits of any cost", v.name, v.line))
		}
	}
	for j, v := range p.rules {
		if v.action == Deny {
			continue
		}
		for _, u := range p.rules[:j] {
			if u.action != Ask || !overlapAgents(u.agents, v.agents) || !overlapScopes(u.scope, v.scope) {
				continue
			}
			vc := allChannels
			if v.action == Ask {
				vc = v.channelsOrAll()
			}
			if len(intersectChannels(u.channelsOrAll(), vc)) == 0 {
				w = append(w, fmt.Sprintf("rules %q (line %d) and %q (line %d) share no approval channel: a request that reaches into both is refused", u.name, u.line, v.name, v.line))
			}
		}
	}
	for _, v := range p.rules {
		if v.action == Deny || v.scope.svc != nil {
			continue
		}
		if v.per != nil && v.per.Amount > 0 || v.spend != nil && v.spend.Amount > 0 {
			w = append(w, fmt.Sprintf("rule %q (line %d) allows money but names no svc: its grants may spend at every service", v.name, v.line))
		}
	}
	for j, d := range p.consents {
		for _, c := range p.consents[:j] {
			if agentsCover(c.agents, d.agents) && subset(d.svc, c.svc) && coveredBy(d.can, c.can) {
				w = append(w, fmt.Sprintf("consent rule %q (line %d) can never decide: consent rule %q (line %d) comes first and matches every proposal it would", d.name, d.line, c.name, c.line))
				break
			}
		}
	}
	if len(p.consents) == 0 {
		w = append(w, "the policy has no [[consent]] rules: every consent is refused")
	}
	return w
}

// onlyProgramApart reports whether agents a and b may match callers of the
// same uid and differ only in what they ask of the caller's program: exe or
// unit, read from /proc, which another program of the same uid can fake
// (it can take over the agent's connection with pidfd_getfd, or exec the
// trusted binary once connected). Keys do tell agents apart, and so do user
// or uid lists that share no entry.
func onlyProgramApart(a, b *agent) bool {
	if a.exes == nil && a.units == nil && b.exes == nil && b.units == nil {
		return false
	}
	if slices.Equal(a.exes, b.exes) && slices.Equal(a.units, b.units) {
		return false
	}
	if a.keys != nil && b.keys != nil && !overlapNames(a.keys, b.keys) {
		return false
	}
	if a.any || b.any {
		return true
	}
	// Disjoint lists of the same kind rule a shared user out. A list of
	// names against one of numbers may still name one user: warn.
	if a.users != nil && b.users != nil && a.uids == nil && b.uids == nil && !overlapNames(a.users, b.users) {
		return false
	}
	if a.uids != nil && b.uids != nil && a.users == nil && b.users == nil && !overlapIDs(a.uids, b.uids) {
		return false
	}
	return true
}

func overlapIDs(a, b []uint32) bool {
	for _, x := range a {
		if has(b, x) {
			return true
		}
	}
	return false
}

// rulesDiffer reports whether some rule or consent rule applies to one of
// the agents named a and b and not to the other.
func (p *Policy) rulesDiffer(a, b string) bool {
	for _, u := range p.rules {
		if appliesTo(u.agents, a) != appliesTo(u.agents, b) {
			return true
		}
	}
	for _, c := range p.consents {
		if appliesTo(c.agents, a) != appliesTo(c.agents, b) {
			return true
		}
	}
	return false
}

// agentCovers reports whether every caller that b matches is matched by a.
func agentCovers(a, b *agent) bool {
	if a.any {
		return true
	}
	if b.any {
		return false
	}
	names := func(x, y []string) bool { return x == nil || y != nil && subset(y, x) }
	nums := func(x, y []uint32) bool {
		if x == nil {
			return true
		}
		if y == nil {
			return false
		}
		for _, v := range y {
			if !has(x, v) {
				return false
			}
		}
		return true
	}
	pats := func(x, y []string) bool { return x == nil || y != nil && coveredBy(y, x) }
	return names(a.users, b.users) && nums(a.uids, b.uids) && names(a.groups, b.groups) &&
		nums(a.gids, b.gids) && pats(a.exes, b.exes) && pats(a.units, b.units) && names(a.keys, b.keys)
}

// agentsCover reports whether agent list a names every agent list b names.
func agentsCover(a, b []string) bool {
	return has(a, "*") || !has(b, "*") && subset(b, a)
}

// ruleShadows reports whether rule u decides every request that rule v
// would decide, so that v never decides. It errs on the side of silence:
// false means "not certainly shadowed".
func ruleShadows(u, v *rule) bool {
	inScope := subset(v.scope.svc, u.scope.svc) && subset(v.scope.verbs, u.scope.verbs) && coveredBy(v.scope.can, u.scope.can)
	if !inScope {
		return false
	}
	if u.action == Deny {
		return true // every request v covers lies in u's scope and overlaps it
	}
	if v.action == Deny {
		return false // v refuses more than it covers; u may not reach all of it
	}
	if v.clamp && !u.clamp {
		return false // v cuts down requests beyond its limits; u lets them pass
	}
	uMax, uDef := u.lifetimes()
	vMax, vDef := v.lifetimes()
	if uMax < vMax || uDef < vDef {
		return false
	}
	money := func(um, vm *grant.Money) bool {
		if um == nil {
			return true
		}
		if vm == nil || vm.Currency != um.Currency {
			return false
		}
		return u.clamp || vm.Amount <= um.Amount
	}
	if !money(u.per, v.per) || !money(u.spend, v.spend) {
		return false
	}
	if u.risk != "" && !u.clamp && (v.risk == "" || riskRank(v.risk) > riskRank(u.risk)) {
		return false
	}
	return true
}

func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func overlapAgents(a, b []string) bool {
	return has(a, "*") || has(b, "*") || overlapNames(a, b)
}

func overlapScopes(a, b scope) bool {
	return overlapNames(a.svc, b.svc) && overlapNames(a.verbs, b.verbs) && overlapPatterns(a.can, b.can)
}
