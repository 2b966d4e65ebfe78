package grant

import (
	"fmt"
	"strings"
)

// MaxGrants bounds the grants of one request that Verify examines. Each
// grant may cost 16 signature checks (one a block); the cap stops one request from
// costing a service an unbounded number of them.
const MaxGrants = 8

// Context describes the request a grant must authorize (§6.3, §6.4).
type Context struct {
	// Service is the service's own id (§4.1), Verb the request verb.
	Service, Verb string
	// Capability is the requested capability; for UNDO, the capability of
	// the receipt being undone (§6.3).
	Capability string
	// Now is the current time in unix seconds.
	Now int64
	// ProofKey is the key of the request's proof, which the caller has
	// already checked with VerifyProof (§6.5).
	ProofKey string
	// Proposal is the proposal of a COMMIT, as ParseProposal read it; it
	// is required for COMMIT and ignored otherwise. Caveats look at its
	// cost, its risk and its hash: the one ParseProposal computed from its
	// content, or, for a Proposal made otherwise, its own hash field,
	// which is only as good as whoever wrote it.
	Proposal *Proposal
	// Spent maps block ids to the spend already attributed to them, in
	// minor units (§6.3 spend). A block missing from it has spent nothing.
	Spent map[string]int64
	// Cache, when not nil, remembers the block signatures Verify has
	// checked, so that a grant seen before costs no Ed25519 work. Only
	// signatures are skipped: everything else is checked on every call.
	// See BlockCache.
	Cache *BlockCache
}

// Result says which grant authorized a request.
type Result struct {
	// Grant is the index, in the tokens passed to Verify, of the grant
	// that authorized the request.
	Grant   int
	GrantID string
	Holder  string
	Issuer  string
	// SpendBlocks holds the ids of the grant's blocks that carry a spend
	// caveat. For a COMMIT the service must reserve the cost against every
	// one of them, atomically with the check (§6.3).
	SpendBlocks []string
}

// Verify decides whether one of the presented grant tokens authorizes the
// request described by ctx (§6.4, §6.6). It returns a Result only when a
// single grant passes every step on its own: the token decodes; its root
// issuer is in trusted; its holder equals ctx.ProofKey; every signature and
// prev link holds; and every caveat of every block is satisfied.
//
// Otherwise the error is an *Error. For each grant the verdict is
// unauthorized (bad token, signature, link, issuer or holder), forbidden
// (a caveat that no consent can lift: Need holds those caveats; unknown and
// malformed caveats are among them, §6.3) or consent_required (a COMMIT
// blocked only by per, spend or risk). Over several grants the most useful
// verdict wins: consent_required, then forbidden (the one with the fewest
// blocking caveats), then unauthorized.
//
// A COMMIT needs ctx.Proposal; its absence, a risk that is not a level, a
// negative cost or a negative Spent entry is an invalid_params error.
//
// With ctx.Cache set, a block signature that the cache holds (the same
// signer key, signed bytes and signature, checked before) is not verified
// again; every other step runs on every call. The answer is the same with or
// without a cache.
//
// Every key of the chain passes CheckPublicKey when the token decodes, so
// an entry of trusted that CheckPublicKey refuses (a small-order key, for
// which anyone could sign a root grant) matches no issuer: it trusts
// nothing.
func Verify(tokens []string, trusted []string, ctx Context) (*Result, error) {
	if len(tokens) == 0 {
		return nil, newError(codeUnauthorized, "no grant presented")
	}
	if len(tokens) > MaxGrants {
		return nil, newError(codeUnauthorized, fmt.Sprintf("more than %d grants presented", MaxGrants))
	}
	if err := checkContext(&ctx); err != nil {
		return nil, err
	}
	var best *Error
	bestRank := 0
	for i, s := range tokens {
		res, e := verifyOne(s, trusted, &ctx)
		if e == nil {
			res.Grant = i
			return res, nil
		}
		if len(tokens) > 1 {
			e.Message = fmt.Sprintf("grant %d: %s", i, e.Message)
		}
		r := rank(e.Code)
		if r > bestRank || (r == bestRank && e.Code == codeForbidden && len(e.Need) < len(best.Need)) {
			best, bestRank = e, r
		}
	}
	return nil, best
}

func rank(c string) int {
	switch c {
	case codeConsentRequired:
		return 3
	case codeForbidden:
		return 2
	}
	return 1
}

func checkContext(ctx *Context) error {
	bad := func(msg string) error { return newError(codeInvalidParams, msg) }
	if ctx.Verb == "COMMIT" && ctx.Proposal == nil {
		return bad("a COMMIT is verified against its proposal, and none was given")
	}
	if p := ctx.Proposal; p != nil {
		if _, ok := riskRank(p.Risk); !ok {
			return bad(fmt.Sprintf("proposal risk %q is not low, medium or high", p.Risk))
		}
		if p.Cost != nil && (p.Cost.Amount < 0 || p.Cost.Amount > maxSafeInt) {
			return bad("proposal cost out of range")
		}
	}
	for _, v := range ctx.Spent {
		if v < 0 {
			return bad("negative spend attributed to a block")
		}
	}
	return nil
}

func verifyOne(s string, trusted []string, ctx *Context) (*Result, *Error) {
	t, err := Decode(s)
	if err != nil {
		return nil, newError(codeUnauthorized, err.Error())
	}
	iss := t.Issuer()
	trustedIss := false
	for _, k := range trusted {
		if k == iss {
			trustedIss = true
			break
		}
	}
	if !trustedIss {
		return nil, newError(codeUnauthorized, "grant is not issued by a trusted principal")
	}
	// Without this a stolen token would be usable by anyone (§6.5).
	if ctx.ProofKey == "" || t.Holder() != ctx.ProofKey {
		return nil, newError(codeUnauthorized, "the proof key does not hold the grant")
	}
	ids, e := t.checkChain(ctx.Cache)
	if e != nil {
		return nil, e
	}
	var hard, soft []Caveat
	var spendBlocks []string
	for i := range t.Blocks {
		counted := false
		for _, c := range t.Blocks[i].Caveats {
			if c.Name == kindSpend && !counted {
				counted = true
				spendBlocks = append(spendBlocks, ids[i])
			}
			switch evalCaveat(c, ctx, ids[i]) {
			case failHard:
				hard = append(hard, c)
			case failSoft:
				soft = append(soft, c)
			}
		}
	}
	switch {
	case len(hard) > 0:
		names := make([]string, len(hard))
		for i, c := range hard {
			names[i] = c.Name
		}
		return nil, &Error{
			Code:    codeForbidden,
			Message: "the grant does not cover this request (" + strings.Join(names, ", ") + ")",
			Need:    hard,
		}
	case len(soft) > 0:
		names := make([]string, len(soft))
		for i, c := range soft {
			names[i] = c.Name
		}
		return nil, &Error{
			Code:      codeConsentRequired,
			Message:   "the commit needs the principal's consent (" + strings.Join(names, ", ") + ")",
			Principal: iss,
		}
	}
	return &Result{GrantID: ids[0], Holder: t.Holder(), Issuer: iss, SpendBlocks: spendBlocks}, nil
}

type outcome int

const (
	pass outcome = iota
	failSoft
	failHard
)

// evalCaveat evaluates one caveat (§6.3). blockID is the id of the block
// that holds it, needed for spend. A value is checked for form before the
// verb is looked at, so a malformed caveat fails whatever the verb.
func evalCaveat(c Caveat, ctx *Context, blockID string) outcome {
	commit := ctx.Verb == "COMMIT"
	switch c.Name {
	case kindSvc, kindVerbs, kindCan:
		list, err := c.readStrings()
		if err != nil {
			return failHard
		}
		for _, s := range list {
			switch c.Name {
			case kindSvc:
				if s == ctx.Service {
					return pass
				}
			case kindVerbs:
				if s == ctx.Verb {
					return pass
				}
			default:
				if matchPattern(s, ctx.Capability) {
					return pass
				}
			}
		}
		return failHard
	case kindExp, kindNbf:
		n, err := c.readInt()
		switch {
		case err != nil:
			return failHard
		case c.Name == kindExp && ctx.Now < n, c.Name == kindNbf && ctx.Now >= n:
			return pass
		}
		return failHard
	case kindPer:
		max, err := c.readMoney()
		switch {
		case err != nil:
			return failHard
		case !commit:
			return pass
		}
		cost := ctx.Proposal.Cost
		if cost == nil || (cost.Currency == max.Currency && cost.Amount <= max.Amount) {
			return pass
		}
		return failSoft
	case kindSpend:
		max, err := c.readMoney()
		switch {
		case err != nil:
			return failHard
		case !commit:
			return pass
		}
		var amount int64
		if cost := ctx.Proposal.Cost; cost != nil {
			if cost.Currency != max.Currency {
				return failSoft
			}
			amount = cost.Amount
		}
		// Spent is never negative and max is at most 2^53−1, so
		// max−spent cannot overflow once spent ≤ max.
		spent := ctx.Spent[blockID]
		if spent > max.Amount || amount > max.Amount-spent {
			return failSoft
		}
		return pass
	case kindRisk:
		level, err := c.readText()
		if err != nil {
			return failHard
		}
		ceiling, ok := riskRank(level)
		switch {
		case !ok:
			return failHard
		case !commit:
			return pass
		}
		if r, _ := riskRank(ctx.Proposal.Risk); r <= ceiling {
			return pass
		}
		return failSoft
	case kindOnly:
		h, err := c.readText()
		switch {
		case err != nil:
			return failHard
		case !commit, h == ctx.Proposal.caveatHash():
			return pass
		}
		return failHard
	}
	// Fail closed: a caveat this verifier does not know might restrict
	// what it cannot see (§6.3, §11).
	return failHard
}
