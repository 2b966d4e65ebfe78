// Package policies decides, from the principal's policy file, what an agent
// may get from parley-keyd without asking, what needs a human's approval and
// what is refused.
//
// The package is pure: [Parse] takes bytes, deciding takes the time as an
// argument, and nothing here reads files, clocks or the network. A [Policy]
// is immutable and safe for concurrent use. The only state is the rate
// [Limiter], which the daemon keeps.
//
// # Guarantees
//
//   - Parse is strict and fails closed: an unknown key, a value of the wrong
//     type, an empty list, an unknown agent name or a malformed limit is an
//     error, and every error is a [*ParseError] that names the file and a
//     line.
//   - A caller that matches no agent, and a request that no rule covers, is
//     refused. A policy without rules refuses everything.
//   - [Policy.Decide] never returns a grant wider than the request or than
//     the rule that decided it, on any caveat of §6.3, and every grant it
//     returns has an expiry after the now it is given and within the rule's
//     max_exp (or the [Ceiling]). Where the grant is narrower than what the
//     request named, Decision.Narrowed says so, one sentence per cut.
//   - [Policy.DecideConsent] returns Ask or Deny, never Auto.
//
// # Requests and absent caveats
//
// A [grant.Request], as [grant.ParseRequest] reads it, holds the caveats an
// agent asks for. Absence is read as follows, on each side:
//
//   - svc, verbs, can: a request that names none asks for all services,
//     verbs or capabilities. Only a rule that names none covers it; a rule
//     that names some has to clamp to cover it. A rule that names none puts
//     no limit there, and the grant carries what the request named.
//   - exp: a request without one gets the rule's default_exp (else 15
//     minutes, cut to max_exp). That is not "exceeding" the rule. A request
//     beyond max_exp (or, without max_exp, the 30-day Ceiling) exceeds it.
//   - nbf: carried over unchanged; a not-before at or after the expiry the
//     rule would set makes the rule unable to issue.
//   - per, spend, risk: a request that names none leaves the choice to the
//     policy, so the rule's limit is added to the grant. Adding a limit only
//     narrows, so it never counts as exceeding. A named limit above the
//     rule's exceeds it; one in another currency cannot be compared and
//     neither fits nor clamps.
//
// These asymmetries are deliberate: svc, verbs and can say what a grant is
// for, and silently handing an agent a grant for less than it named would
// surprise it; per, spend, risk and exp are ceilings that every grant must
// carry in some amount, and the policy is the one to choose them.
//
// # Rules
//
// Rules are tried in file order; a rule is considered only when it names
// the caller's agent (or "*") and its svc, verbs and can overlap the
// request's.
//
//   - A deny rule refuses every request that reaches into its scope, even in
//     part: a request for "*" is refused by a deny rule for "bank.*".
//   - An auto or ask rule decides when the request lies within all its
//     limits. When it does not, the rule either lets the request go on to
//     the next rule (on_exceed = "next", the default) or, with
//     on_exceed = "clamp", decides a grant cut down to its limits, saying
//     what was cut. A cut that is impossible (no common service, verb or
//     capability, another currency, a not-before after the expiry) goes on
//     to the next rule.
//   - An ask rule that overlaps the request but does not decide it still
//     binds: whatever later rule decides, the decision is Ask, on channels
//     both rules allow and strong if either requires it (Decision.Escalated
//     names such rules). So a broad auto rule cannot hand out without asking
//     what an earlier, narrower ask rule reserved for a human. When the rules
//     share no channel, the request is refused.
//
// Consent rules ([[consent]]) are tried in order too; the first whose
// agents, svc and can match the proposal's service and capability decides.
//
// # Rate limits
//
// Each agent has a rate (requests per minute, enforced by [Limiter] as a
// bucket of one minute's requests) and a number of approvals that may wait
// at once ([Policy.MaxPending]; the daemon counts them).
//
// The file format, with examples, is documented in docs/policy.md; the
// policy `parley-keyd init` writes is [DefaultFile].
package policies
