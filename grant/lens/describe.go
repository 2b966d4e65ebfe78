package lens

import (
	"fmt"
	"strings"

	"github.com/parley-keyd/parley-keyd/grant"
)

// This file says in words what a grant allows, for a human: the words of
// each caveat and, for each block, who signed it and who holds it.

// DescribeCaveat returns a caveat in words for a human, such as "only at
// service shop.example". The words contain text from the token: neutralize
// it before showing it on a terminal.
func DescribeCaveat(c grant.Caveat) string {
	words, known := caveatWords(c)
	switch {
	case !known:
		return fmt.Sprintf("unknown caveat %q (never satisfied)", c.Name)
	case c.Check() != nil:
		return fmt.Sprintf("malformed %s caveat (never satisfied): %s", c.Name, c.Value)
	}
	return words
}

// caveatWords returns the words of a caveat of each kind of §6.3, and false
// for any other kind. The words are only right for a value Check accepts.
func caveatWords(c grant.Caveat) (string, bool) {
	switch c.Name {
	case "svc":
		ss, _ := grant.CaveatValue[[]string](c)
		return "only at " + plural(len(ss), "service", "services") + listWords(ss), true
	case "verbs":
		ss, _ := grant.CaveatValue[[]string](c)
		return "only " + plural(len(ss), "the verb", "the verbs") + listWords(ss), true
	case "can":
		ss, _ := grant.CaveatValue[[]string](c)
		return "only " + plural(len(ss), "capability", "capabilities") + listWords(ss), true
	case "exp":
		n, _ := grant.CaveatValue[int64](c)
		return "expires at " + FormatTime(n), true
	case "nbf":
		n, _ := grant.CaveatValue[int64](c)
		return "not before " + FormatTime(n), true
	case "per":
		m, _ := grant.CaveatValue[grant.Money](c)
		return "commits cost at most " + m.String() + " each", true
	case "spend":
		m, _ := grant.CaveatValue[grant.Money](c)
		return "commits cost at most " + m.String() + " in total", true
	case "risk":
		s, _ := grant.CaveatValue[string](c)
		return "commits only of proposals with risk " + s + " or lower", true
	case "only":
		s, _ := grant.CaveatValue[string](c)
		return "commits only the proposal with hash " + s, true
	}
	return "", false
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func listWords(ss []string) string {
	if len(ss) == 0 {
		return " (none: never satisfied)"
	}
	return " " + strings.Join(ss, ", ")
}

// BlockInfo describes one block of a grant for a human (see Describe).
type BlockInfo struct {
	Index   int
	ID      string
	Signer  string         // iss for the root, the previous block's sub otherwise
	Holder  string         // sub
	Caveats []grant.Caveat // as signed
	Words   []string       // DescribeCaveat of each caveat
	Iat     int64
	// Expires is the earliest exp of this block, when HasExpiry.
	Expires   int64
	HasExpiry bool
	// Expired reports now ≥ Expires.
	Expired bool
}

// Describe returns, for each block, who signed it, who holds it, its
// caveats in words and its expiry relative to now. It checks nothing: call
// Token.CheckChain to know whether the signatures hold. Text in the result comes
// from the token; neutralize it before display.
func Describe(t *grant.Token, now int64) []BlockInfo {
	out := make([]BlockInfo, len(t.Blocks))
	for i := range t.Blocks {
		b := &t.Blocks[i]
		info := BlockInfo{
			Index:   i,
			ID:      b.ID(),
			Holder:  b.Sub,
			Caveats: b.Caveats,
			Iat:     b.Iat,
		}
		if i == 0 {
			info.Signer = b.Iss
		} else {
			info.Signer = t.Blocks[i-1].Sub
		}
		for _, c := range b.Caveats {
			info.Words = append(info.Words, DescribeCaveat(c))
		}
		info.Expires, info.HasExpiry = blockExpiry(b)
		info.Expired = info.HasExpiry && now >= info.Expires
		out[i] = info
	}
	return out
}

// blockExpiry returns the earliest exp of one block, as Token.Expiry does
// over all of them.
func blockExpiry(b *grant.Block) (int64, bool) {
	var min int64
	found := false
	for _, c := range b.Caveats {
		if c.Name != "exp" {
			continue
		}
		if e, err := grant.CaveatValue[int64](c); err == nil && (!found || e < min) {
			min, found = e, true
		}
	}
	return min, found
}
