// Package lens renders Parley replies and values as the deterministic Lens
// text of §9 and shows them safely to a human.
//
// Reply, Proposal and Value give the byte-exact Lens text that the spec's
// conformance vectors pin; EffectLine renders one effect; FormatMoney,
// FormatDuration and FormatTime write amounts, durations and times as Lens
// does (§9.2); Estimate counts tokens as in §8. DescribeCaveat and
// Describe say in words what a grant allows.
//
// Everything an agent or a service wrote is untrusted. SafeText and
// SafeLines neutralize such text (control characters, bidi overrides,
// zero-width characters, terminal escapes) before a human sees it;
// DisplayReply and DisplayProposal render with every untrusted field so
// neutralized, and Display shows a proposal that grant.ParseProposal read,
// from the bytes its hash covers. EscapeJSONText makes raw JSON safe to
// print without changing its value.
//
// The package is pure: no I/O, no clock and no global state but constant
// tables.
package lens
