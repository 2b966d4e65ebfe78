package protocol

import (
	"encoding/json"
	"strings"

	"github.com/parley-keyd/parley-keyd/grant"
)

// PendingView is a waiting request as the daemon rendered it for a human. It
// holds no match code: the human reads the code in the requesting terminal and
// confirms it here, so that a request racing an expected one cannot ride on
// its approval (DESIGN.md, number matching).
type PendingView struct {
	ID     string     `json:"id"`
	Kind   string     `json:"kind"` // "grant" or "consent"
	Caller CallerView `json:"caller"`
	Agent  string     `json:"agent,omitempty"`
	Holder string     `json:"holder"`
	Title  string     `json:"title"` // one line: "calendar-agent asks for a grant"
	// Summary is one line that says how much the request asks for: the
	// counts of services, verbs and patterns, or of effects, and the
	// money, risk, undo and expiry. A channel that cannot show Text whole
	// (a notification) shows Title and Summary and sends the human to a
	// channel that can; it never offers a part of Text for approval.
	Summary string `json:"summary"`
	// Text is the whole rendering, already made safe for display: one line
	// per service, pattern or effect, nothing cut. Lines counts its lines.
	Text  string `json:"text" display:"lines"`
	Lines int    `json:"lines"`
	// Scope is what the request would be signed with, as data: the caveats,
	// and for a consent the proposal whose hash the daemon checked. Its
	// strings are the agent's and the service's, not made safe for display.
	Scope    Scope    `json:"scope"`
	Rule     string   `json:"rule,omitempty"`
	Channels []string `json:"channels"` // where it may be approved
	Strong   bool     `json:"strong"`   // only a strong channel may approve it
	// Choices are three codes, one of them the real match code, in random
	// order: for approvers that offer buttons (the desktop notification).
	Choices []string `json:"choices"`
	// Link is the request's page on the phone, when the phone may approve
	// it and the phone page is on.
	Link    string `json:"link,omitempty"`
	Created int64  `json:"created"`
	Expires int64  `json:"expires"`
	// Remember are the lengths a human may choose to keep approving this
	// request (APPROVE's "remember"), shortest first, the last the rule's
	// remember: present only for a GRANT whose rule allows remembering and
	// whose Text is whole. An approver offers these and no other.
	Remember []string `json:"remember,omitempty"`
}

// The most a desktop notification shows of a request, in lines and
// characters of its Text: servers cut or scroll longer bodies, so a longer
// request is not offered for approval there, and the daemon refuses to
// remember an approval from the desktop of one (FitsNotification).
const (
	NotifyLines = 14
	NotifyChars = 1200
)

// FitsNotification reports whether v's Text can be shown whole in a
// desktop notification. A view without a line count is counted here.
func FitsNotification(v PendingView) bool {
	lines := v.Lines
	if lines == 0 {
		lines = strings.Count(v.Text, "\n") + 1
	}
	return lines <= NotifyLines && len(v.Text) <= NotifyChars
}

// CallerView is who asked, as the kernel and /proc told the daemon.
type CallerView struct {
	User string `json:"user"`
	UID  uint32 `json:"uid"`
	PID  int32  `json:"pid"`
	Exe  string `json:"exe,omitempty"`
	Unit string `json:"unit,omitempty"`
}

// Scope is what a waiting request would be signed with.
type Scope struct {
	// Caveats are the caveats the grant would carry, as the daemon would
	// sign them (for a consent: the five of §6.6).
	Caveats []grant.Caveat `json:"caveats"`
	// Service is, for a consent, the service the proposal came from.
	Service string `json:"service,omitempty"`
	// Proposal is, for a consent, the proposal: every member its hash
	// covers (§5.1: all but "hash" and "data"), as canonical JSON, exactly
	// as the service sent them (a "from": null, a member the daemon does
	// not know), and "hash". So an approver may re-hash it and compare.
	Proposal json.RawMessage `json:"proposal,omitempty" display:"exact"`
}

// ScopeProposal returns the Scope.Proposal of p: canonical(p without hash
// and data), the bytes its hash covers, with "hash" added.
func ScopeProposal(p *grant.Proposal) json.RawMessage {
	hashed, hash := p.Hashed()
	h, _ := json.Marshal(hash)
	out := append([]byte(`{"hash":`), h...)
	if len(hashed) > 2 { // not "{}"
		out = append(out, ',')
	}
	return append(out, hashed[1:]...)
}
