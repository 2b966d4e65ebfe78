package keyd

import (
	"fmt"
	"strings"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/grant/lens"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/parley-keyd/parley-keyd/policies"
)

// What a human is shown is the daemon's own rendering of what it checked and
// would sign (DESIGN.md), and it is shown whole (property 8): one line per
// service, pattern or effect, every value neutralized but never cut. A
// request too large to show is refused before it is queued (the policy's
// Bounds, and maxShownField below), so there is never a part of a rendering
// that a human approves without having seen it.

// maxShownField bounds one piece of text a service or an agent wrote and a
// human must read: a proposal's summary or an effect's detail, say. A longer
// one is refused (invalid_params), never cut: a cut field would let the
// part that matters sit past the cut.
const maxShownField = 1000

// safe neutralizes text that came from an agent, a service or /proc before a
// human sees it: control characters, terminal escapes, bidi overrides and
// zero-width characters become visible. It cuts nothing; what reaches it is
// bounded before.
func safe(s string) string { return lens.SafeText(s, 0) }

func (s *Server) relTime(unix int64) string {
	d := time.Unix(unix, 0).Sub(s.now()).Round(time.Second)
	return fmt.Sprintf("%s UTC (in %s)", time.Unix(unix, 0).UTC().Format("2006-01-02 15:04:05"), d)
}

// rendering is a PendingView's text being written.
type rendering struct {
	b     strings.Builder
	lines int
}

func (r *rendering) line(format string, args ...any) {
	fmt.Fprintf(&r.b, format, args...)
	r.b.WriteByte('\n')
	r.lines++
}

// asker writes who asks: the first line after "Asked by", the rest as they are.
func (r *rendering) asker(who []string) {
	r.line("Asked by %s", who[0])
	for _, l := range who[1:] {
		r.line("%s", l)
	}
}

// list writes a heading with the count, then one entry per line.
func (r *rendering) list(heading string, entries []string) {
	r.line("%s (%d):", heading, len(entries))
	for _, e := range entries {
		r.line("  - %s", safe(e))
	}
}

// scope renders what a grant request allows, in the daemon's words: its
// services, verbs, capability patterns and money limits. A pending GRANT
// and a remembered approval are shown through it, so the human reads the
// same words for the same caveats in both.
func (r *rendering) scope(g grant.Request) {
	if g.Svc == nil {
		r.line("Services: every service")
	} else {
		r.list("Services", g.Svc)
	}
	if g.Verbs == nil {
		r.line("Verbs: every verb")
	} else {
		r.list("Verbs", g.Verbs)
	}
	if g.Can == nil {
		r.line("Capabilities: every capability")
	} else {
		r.list("Capability patterns", g.Can)
	}
	if g.Per != nil {
		r.line("Money: at most %s for each action", safe(lens.FormatMoney(g.Per.Amount, g.Per.Currency)))
	}
	if g.Spend != nil {
		r.line("Money: at most %s in all", safe(lens.FormatMoney(g.Spend.Amount, g.Spend.Currency)))
	}
}

func countWord(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// grantSummary is one line of what a grant would allow: how many services,
// verbs and patterns, the money, the risk and the expiry.
func (s *Server) grantSummary(g grant.Request) string {
	var parts []string
	add := func(list []string, one, many, all string) {
		if list == nil {
			parts = append(parts, all)
		} else {
			parts = append(parts, countWord(len(list), one, many))
		}
	}
	add(g.Svc, "service", "services", "every service")
	add(g.Verbs, "verb", "verbs", "every verb")
	add(g.Can, "capability pattern", "capability patterns", "every capability")
	switch {
	case g.Per == nil && g.Spend == nil:
		parts = append(parts, "any amount of money")
	default:
		if g.Per != nil {
			parts = append(parts, "at most "+lens.FormatMoney(g.Per.Amount, g.Per.Currency)+" an action")
		}
		if g.Spend != nil {
			parts = append(parts, "at most "+lens.FormatMoney(g.Spend.Amount, g.Spend.Currency)+" in all")
		}
	}
	if g.Risk != "" {
		parts = append(parts, "risk up to "+g.Risk)
	} else {
		parts = append(parts, "any risk")
	}
	parts = append(parts, "until "+s.relTime(g.Exp))
	return safe(strings.Join(parts, " · "))
}

// renderGrant is what the human is shown for a GRANT waiting for approval:
// the daemon's own words for the caveats it would sign, never the agent's.
func (s *Server) renderGrant(r *request, id, agent, holder string, d policies.Decision) protocol.PendingView {
	g := d.Grant
	var out rendering
	out.line("Request %s: a grant for agent %q", id, safe(agent))
	out.asker(r.caller.who(agent))
	out.line("For key %s", holder)
	out.line("In short: %s", s.grantSummary(g))
	out.scope(g)
	if g.Per == nil && g.Spend == nil {
		out.line("Money: no limit from this grant")
	}
	if g.Risk != "" {
		out.line("Risk: actions of risk %s or lower", safe(g.Risk))
	}
	if g.Nbf != 0 {
		out.line("Not before %s", s.relTime(g.Nbf))
	}
	out.line("Until %s", s.relTime(g.Exp))
	for _, n := range d.Narrowed {
		out.line("Narrowed by the policy: %s", safe(n))
	}
	out.line("Policy rule %q asks you to decide.", safe(d.Rule))
	if r.caller.Roles.Weak {
		out.line("Note: this agent's user may also approve, so an approval from that user is weak.")
	}
	return protocol.PendingView{
		ID: id, Kind: "grant", Caller: r.caller.view(), Agent: agent, Holder: holder, Rule: d.Rule,
		Title:   safe(fmt.Sprintf("%s asks for a grant", agent)),
		Summary: s.grantSummary(g),
		Text:    out.b.String(), Lines: out.lines,
		Scope: protocol.Scope{Caveats: g.Caveats()},
	}
}

// consentSummary is one line of what a consent is about: how many effects,
// the cost, the risk, the undo window and when the proposal expires.
func (s *Server) consentSummary(p *grant.Proposal) string {
	cost := "free"
	if p.Cost != nil && p.Cost.Amount != 0 {
		cost = lens.FormatMoney(p.Cost.Amount, p.Cost.Currency)
	}
	undo := "no undo"
	if p.Undo != nil {
		undo = "undo within " + (time.Duration(p.Undo.Window) * time.Second).String()
	}
	return safe(strings.Join([]string{countWord(len(p.Effects), "effect", "effects"), "cost " + cost,
		"risk " + p.Risk, undo, "proposal expires " + s.relTime(p.Expires)}, " · "))
}

// renderConsent shows the proposal whose hash the daemon recomputed, in the
// daemon's Lens rendering: every effect, the cost, risk, undo and expiry,
// not the service's summary alone (§6.6). Everything comes from p, the one
// parse of the proposal that the hash and the policy used (property 9);
// "data" is not shown, since the hash does not cover it and an agent could
// add words of its own there ("this is a refund").
func (s *Server) renderConsent(r *request, id, agent, holder, service string, p *grant.Proposal, cavs []grant.Caveat, d policies.ConsentDecision) (protocol.PendingView, error) {
	shown, err := lens.Display(p, 0)
	if err != nil {
		// A proposal the daemon cannot show whole is not shown at all.
		return protocol.PendingView{}, &protocol.Error{Code: protocol.CodeInvalidParams,
			Message: "the proposal cannot be shown to a human: " + shortErr(err)}
	}
	summary := s.consentSummary(p)
	var out rendering
	out.line("Request %s: consent to ONE action at %s", id, safe(service))
	out.asker(r.caller.who(agent))
	out.line("In short: %s", summary)
	for _, l := range strings.Split(strings.TrimSuffix(shown, "\n"), "\n") {
		out.line("%s", l)
	}
	out.line("The proposal expires %s.", s.relTime(p.Expires))
	_, hash := p.Hashed()
	out.line("The consent lets key %s COMMIT exactly this proposal (capability %s, hash %s), nothing else.",
		holder, safe(p.Capability), hash)
	out.line("Policy rule %q asks you to decide.", safe(d.Rule))
	if r.caller.Roles.Weak {
		out.line("Note: this agent's user may also approve, so an approval from that user is weak.")
	}
	cost := "free"
	if p.Cost != nil && p.Cost.Amount != 0 {
		cost = lens.FormatMoney(p.Cost.Amount, p.Cost.Currency)
	}
	return protocol.PendingView{
		ID: id, Kind: "consent", Caller: r.caller.view(), Agent: agent, Holder: holder, Rule: d.Rule,
		Title:   safe(fmt.Sprintf("%s asks for consent: %s", agent, cost)),
		Summary: summary,
		Text:    out.b.String(), Lines: out.lines,
		Scope: protocol.Scope{Caveats: cavs, Service: service, Proposal: protocol.ScopeProposal(p)},
	}, nil
}

// checkShowable refuses a proposal a human could not read whole: more
// effects than the agent's bound, or a piece of text longer than
// maxShownField. The agent is told which, and what to do.
func checkShowable(p *grant.Proposal, b policies.Bounds) error {
	if len(p.Effects) > b.Effects {
		return &protocol.Error{Code: protocol.CodeInvalidParams,
			Message: fmt.Sprintf("the proposal has %d effects; the human is shown every one, and this agent may ask about at most %d", len(p.Effects), b.Effects),
			Fix:     "split the action into smaller proposals, or an admin raises max_effects for this agent in the policy"}
	}
	long := func(what, v string) error {
		if len(v) <= maxShownField {
			return nil
		}
		return &protocol.Error{Code: protocol.CodeInvalidParams,
			Message: fmt.Sprintf("the proposal's %s is %d bytes; the human is shown it whole, and the daemon takes at most %d", what, len(v), maxShownField),
			Fix:     "the service must send a shorter proposal"}
	}
	for _, f := range []struct{ what, v string }{{"id", p.ID}, {"capability", p.Capability}, {"summary", p.Summary}, {"risk", p.Risk}} {
		if err := long(f.what, f.v); err != nil {
			return err
		}
	}
	if p.Cost != nil {
		if err := long("currency", p.Cost.Currency); err != nil {
			return err
		}
	}
	for i, e := range p.Effects {
		for _, f := range []struct{ what, v string }{{"op", e.Op}, {"target", e.Target}, {"field", e.Field}, {"detail", e.Detail}} {
			if err := long(fmt.Sprintf("effect %d %s", i+1, f.what), f.v); err != nil {
				return err
			}
		}
		for _, v := range []any{e.From, e.To} {
			if str, ok := v.(string); ok {
				if err := long(fmt.Sprintf("effect %d value", i+1), str); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// checkBounds refuses a grant request that names more services or patterns
// than the agent's bounds: every one is shown to a human.
func checkBounds(req grant.Request, b policies.Bounds) error {
	over := func(n, max int, what, key string) error {
		if n <= max {
			return nil
		}
		return &protocol.Error{Code: protocol.CodeInvalidParams,
			Message: fmt.Sprintf("the request names %d %s; the human is shown every one, and this agent may ask for at most %d", n, what, max),
			Fix:     fmt.Sprintf("ask for fewer (a pattern such as 'calendar.*' covers many), or an admin raises %s for this agent in the policy", key)}
	}
	if err := over(len(req.Svc), b.Services, "services", "max_services"); err != nil {
		return err
	}
	return over(len(req.Can), b.Patterns, "capability patterns", "max_patterns")
}
