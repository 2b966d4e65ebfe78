package policies

import (
	"fmt"

	"github.com/parley-keyd/parley-keyd/grant"
)

// Action is what a rule decides for a request.
type Action string

// The three actions of a rule. Consent is only ever Ask or Deny.
const (
	Auto Action = "auto" // issue now, without asking
	Ask  Action = "ask"  // a human approves first
	Deny Action = "deny" // refuse
)

// Channel is a way for the human to approve a request.
type Channel string

// The approval channels a policy can name.
const (
	Terminal Channel = "terminal"
	Desktop  Channel = "desktop"
	Phone    Channel = "phone"
)

// allChannels is the order in which channels are listed everywhere.
var allChannels = []Channel{Terminal, Desktop, Phone}

// Caller is the identity of a connection as the kernel and the handshake
// established it. Nothing in it comes from what the agent says about itself.
type Caller struct {
	UID, GID  uint32
	User      string   // OS user name of UID; may be ""
	Groups    []string // names of the primary and supplementary groups
	GroupIDs  []uint32 // ids of the supplementary groups
	Exe, Unit string   // executable path and systemd unit; may be ""
	HolderKey string   // "ed25519:…", the holder key the caller proved
}

// Decision is the policy's answer to one request.
type Decision struct {
	Action Action
	Agent  string // the matched agent, "" when none
	Rule   string // the deciding rule, "" when none decided (then Action is Deny)
	// Grant is what would be issued (Grant.Caveats are its caveats). Its
	// Exp is always set and later than the now Decide was given, and it is
	// never wider than the request nor than the rule. It is meaningful
	// only when Action is Auto or Ask.
	Grant grant.Request
	// Narrowed says, one sentence each, where the grant is narrower than
	// what the request named (a clamp rule cut it down).
	Narrowed []string
	// Added says, one sentence each, which of the rule's limits the grant
	// carries that the request did not name (a default lifetime, a per,
	// spend or risk ceiling). These never make a rule fall through.
	Added    []string
	Channels []Channel // for Ask: who may approve, in a fixed order
	Strong   bool      // for Ask: a strong channel is required
	// Escalated names earlier ask rules that overlap the request and so
	// turned what the deciding rule would have issued at once into Ask.
	Escalated []string
	// Reason is one sentence for the human or the agent: why it was
	// refused and how to ask for less, or why it needs approval.
	Reason string
	// Remember, for Ask, is the longest a human may have this approval
	// remembered, in seconds: the least remember of every ask rule that
	// applies (0 when one of them does not allow it). RememberExp is the
	// lifetime of each grant issued under it: the least of theirs.
	Remember, RememberExp int64
}

// ConsentFacts are the checked facts of a proposal for which an agent asks
// a consent grant (§6.6). The daemon fills them from the proposal whose hash
// it recomputed, never from the agent's words.
type ConsentFacts struct {
	Service, Capability string
	Cost                *grant.Money // nil = free
	Risk                string       // low, medium, high; anything else counts as high
	Expires, Now        int64        // unix seconds
}

// ConsentDecision is the policy's answer for one consent: Ask or Deny,
// never Auto, because a consent is never issued without a human.
type ConsentDecision struct {
	Action      Action
	Agent, Rule string
	Channels    []Channel
	Strong      bool
	Expires     int64 // the proposal's expiry, capped by the rule's max_exp
	Reason      string
}

// ParseError is an error in a policy file. Line is 1-based.
type ParseError struct {
	File string
	Line int
	Msg  string
}

// Error returns "FILE: line N: message".
func (e *ParseError) Error() string {
	return fmt.Sprintf("%s: line %d: %s", e.File, e.Line, e.Msg)
}

// Policy is a parsed, checked policy file. It is immutable and safe for
// concurrent use.
type Policy struct {
	file     string
	agents   []*agent
	rules    []*rule
	consents []*consentRule
}

// agent names a class of callers.
type agent struct {
	name    string
	line    int
	any     bool
	users   []string
	uids    []uint32
	groups  []string
	gids    []uint32
	exes    []string // patterns
	units   []string // patterns
	keys    []string
	rate    int // requests per minute
	pending int // approvals waiting at once
	bounds  Bounds
}

// Bounds cap how much one request of an agent may name, so that every
// request a human is asked about can be shown whole (DESIGN.md property 8):
// a request beyond them is refused, and the agent is told which bound.
type Bounds struct {
	Services int // entries of a svc caveat
	Patterns int // entries of a can caveat
	Effects  int // effects of a proposal a consent is asked for
}

// scope is what a rule or consent rule is about: services, verbs and
// capability patterns. A nil list means all.
type scope struct {
	svc   []string
	verbs []string
	can   []string
}

// rule is one [[rule]] of the policy.
type rule struct {
	name       string
	line       int
	agents     []string // agent names, or ["*"]
	action     Action
	scope      scope
	maxExp     int64 // seconds; 0 = no cap but the ceiling
	defaultExp int64 // seconds; 0 = built-in default
	per, spend *grant.Money
	risk       string
	channels   []Channel
	strong     bool
	clamp      bool
	// remember is the longest a human may have the daemon keep approving
	// a request this rule asks about (0: never), rememberExp the lifetime
	// of each grant issued meanwhile (issue 24).
	remember, rememberExp int64
}

// consentRule is one [[consent]] of the policy.
type consentRule struct {
	name            string
	line            int
	agents          []string
	action          Action // Ask or Deny
	svc             []string
	can             []string
	denyAboveCost   *grant.Money
	denyAboveRisk   string
	strongAboveCost *grant.Money
	strongAboveRisk string
	strong          bool
	channels        []Channel
	maxExp          int64
}

// Fixed limits of the policy language.
const (
	// Ceiling is the longest lifetime any grant or consent may have,
	// whatever a rule says: a rule without max_exp is capped by it, and a
	// max_exp above it does not parse.
	Ceiling = 30 * 24 * 3600
	// DefaultLifetime is the lifetime of a grant whose request names no
	// expiry under a rule without default_exp (cut to the rule's max_exp).
	DefaultLifetime = 15 * 60
	// DefaultRememberExp is the lifetime of each grant issued under a
	// remembered approval when the rule sets no remember_exp (cut to its
	// max_exp and remember).
	DefaultRememberExp = 10 * 60
	// DefaultRate is an agent's requests per minute when it sets no rate.
	DefaultRate = 30
	// DefaultPending is an agent's approvals waiting at once when it sets
	// no pending.
	DefaultPending = 3
	// DefaultMaxServices, DefaultMaxPatterns and DefaultMaxEffects are an
	// agent's Bounds when it sets none; MaxListBound caps what an agent may
	// set for any of them.
	DefaultMaxServices = 8
	DefaultMaxPatterns = 32
	DefaultMaxEffects  = 32
	MaxListBound       = maxRequestList
)

// Bounds returns the bounds of agent's requests; zero bounds, which refuse
// every list, for an agent the policy does not define.
func (p *Policy) Bounds(agent string) Bounds {
	if a := p.agentNamed(agent); a != nil {
		return a.bounds
	}
	return Bounds{}
}

// appliesTo reports whether a rule's agent list names agent.
func appliesTo(names []string, agentName string) bool {
	for _, n := range names {
		if n == "*" || n == agentName {
			return true
		}
	}
	return false
}
