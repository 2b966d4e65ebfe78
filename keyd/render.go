package keyd

import (
	"fmt"
	"strings"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/policies"
)

// Display caps for text a human is shown: one field, and a whole rendering.
const (
	maxFieldDisplay = 200
	maxTextDisplay  = 4000
)

// safe neutralizes text that came from an agent, a service or /proc before a
// human sees it (DESIGN.md): escapes, bidi overrides and the like become
// visible, and long strings are cut visibly.
func safe(s string) string { return grant.SafeText(s, maxFieldDisplay) }

func shortKey(k string) string {
	if len(k) > 20 {
		return k[:14] + "…" + k[len(k)-4:]
	}
	return k
}

func (c *conn) whoLine(agent string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "agent %q: user %s (uid %d), pid %d", safe(agent), safe(c.id.User), c.id.UID, c.id.PID)
	if c.id.Exe != "" {
		fmt.Fprintf(&b, ", %s", safe(c.id.Exe))
	}
	if c.id.Unit != "" {
		fmt.Fprintf(&b, ", unit %s", safe(c.id.Unit))
	}
	return b.String()
}

func (s *Server) relTime(unix int64) string {
	d := time.Unix(unix, 0).Sub(s.now()).Round(time.Second)
	return fmt.Sprintf("%s UTC (in %s)", time.Unix(unix, 0).UTC().Format("2006-01-02 15:04:05"), d)
}

// renderGrant is what the human is shown for a GRANT waiting for approval:
// the daemon's own words for the caveats it would sign, never the agent's.
func (c *conn) renderGrant(id, agent, holder string, d policies.Decision) protocol.PendingView {
	cavs := caveatsFromRequest(d.Grant)
	var b strings.Builder
	fmt.Fprintf(&b, "Request %s: a grant\n", id)
	fmt.Fprintf(&b, "Asked by %s\n", c.whoLine(agent))
	fmt.Fprintf(&b, "For key %s\n", holder)
	b.WriteString("It would allow:\n")
	for _, cv := range cavs {
		fmt.Fprintf(&b, "  - %s\n", safe(cv.Describe()))
	}
	if d.Grant.Svc == nil {
		b.WriteString("  - at every service\n")
	}
	if d.Grant.Verbs == nil {
		b.WriteString("  - every verb\n")
	}
	if d.Grant.Can == nil {
		b.WriteString("  - every capability\n")
	}
	fmt.Fprintf(&b, "Until %s\n", c.s.relTime(d.Grant.Exp))
	for _, n := range d.Narrowed {
		fmt.Fprintf(&b, "Narrowed by the policy: %s\n", safe(n))
	}
	fmt.Fprintf(&b, "Policy rule %q asks you to decide.\n", safe(d.Rule))
	if c.role().Weak {
		b.WriteString("Note: this agent's user may also approve, so an approval from that user is weak.\n")
	}
	return protocol.PendingView{
		ID: id, Kind: "grant", Caller: c.view(), Agent: agent, Holder: holder, Rule: d.Rule,
		Title: safe(fmt.Sprintf("%s asks for a grant", agent)),
		Text:  grant.SafeLines(b.String(), maxTextDisplay),
	}
}

// renderConsent shows the proposal whose hash the daemon recomputed, in the
// daemon's Lens rendering: effects, cost, risk, undo and expiry, not the
// service's summary alone (§6.6). Everything comes from p, the one parse of
// the proposal that the hash and the policy used (property 9); "data" is not
// shown, since the hash does not cover it and an agent could add words of
// its own there ("this is a refund").
func (c *conn) renderConsent(id, agent, holder, service string, p *grant.Proposal, d policies.ConsentDecision) protocol.PendingView {
	var b strings.Builder
	fmt.Fprintf(&b, "Request %s: consent to ONE action at %s\n", id, safe(service))
	fmt.Fprintf(&b, "Asked by %s\n", c.whoLine(agent))
	// Each service-written field is neutralized before it is placed, so a
	// newline inside a summary cannot forge a line of the rendering.
	lens, err := p.Display(maxFieldDisplay)
	if err != nil {
		lens = fmt.Sprintf("[%s] %s (the proposal could not be rendered: %s)", safe(p.ID), safe(p.Summary), safe(err.Error()))
	}
	b.WriteString(lens)
	if !strings.HasSuffix(lens, "\n") {
		b.WriteString("\n")
	}
	cost := "free"
	if p.Cost != nil {
		cost = safe(grant.FormatMoney(p.Cost.Amount, p.Cost.Currency))
	}
	fmt.Fprintf(&b, "The proposal expires %s.\n", c.s.relTime(p.Expires))
	fmt.Fprintf(&b, "The consent lets key %s COMMIT exactly this proposal (capability %s, hash %s), nothing else.\n",
		shortKey(holder), safe(p.Capability), safe(p.ContentHash()))
	fmt.Fprintf(&b, "Policy rule %q asks you to decide.\n", safe(d.Rule))
	if c.role().Weak {
		b.WriteString("Note: this agent's user may also approve, so an approval from that user is weak.\n")
	}
	return protocol.PendingView{
		ID: id, Kind: "consent", Caller: c.view(), Agent: agent, Holder: holder, Rule: d.Rule,
		Title: safe(fmt.Sprintf("%s asks for consent: %s", agent, cost)),
		Text:  grant.SafeLines(b.String(), maxTextDisplay),
	}
}
