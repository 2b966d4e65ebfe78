package grant

import (
	"fmt"
	"slices"
	"strings"

	"github.com/parley-keyd/parley-keyd/grant/internal/jsontext"
)

// The verbs of §4, in the spec's order.
const (
	verbHello  = "HELLO"
	verbAsk    = "ASK"
	verbIntent = "INTENT"
	verbCommit = "COMMIT"
	verbUndo   = "UNDO"
	verbExpand = "EXPAND"
)

// parleyVerbs is the one list of the verbs of §4; everything else derives
// from it.
var parleyVerbs = [...]string{verbHello, verbAsk, verbIntent, verbCommit, verbUndo, verbExpand}

// ParleyVerbs returns the six verbs of §4 in the spec's order: the names a
// verbs caveat may list. HELLO comes first; the five after it are the verbs
// whose requests carry grants and proofs (§3, §6.5), so a verbs caveat that
// lists only HELLO authorizes nothing.
func ParleyVerbs() []string { return slices.Clone(parleyVerbs[:]) }

// isParleyVerb reports whether v is a verb of §4, exactly as the spec
// writes it: verbs are upper case.
func isParleyVerb(v string) bool { return slices.Contains(parleyVerbs[:], v) }

// MaxRequestCaveats bounds the caveats of one request for a new grant. A
// longer list is an attempt to make checking and policy matching
// expensive; every caveat kind may appear once, so 16 is ample.
const MaxRequestCaveats = 16

// Request is what the caveats of a request for a new root grant ask for
// (for example a GRANT to parley-keyd): the restriction of each kind, or
// its zero value when the request leaves that kind open.
type Request struct {
	Svc, Verbs, Can []string // nil when not asked
	Exp, Nbf        int64    // unix seconds; 0 when not asked
	Per, Spend      *Money   // nil when not asked
	Risk            string   // "" when not asked
}

// requestReason says why ParseRequest refuses a caveat list. Only this
// package's tests tell them apart: the daemon answers each with
// invalid_params and the error's one sentence.
type requestReason int

const (
	// tooManyCaveats: more than MaxRequestCaveats caveats.
	tooManyCaveats requestReason = iota + 1
	// unknownCaveat: a caveat of a kind §6.3 does not define, which could
	// mean anything to a service (fail closed).
	unknownCaveat
	// malformedCaveat: a value Caveat.Check refuses.
	malformedCaveat
	// repeatedCaveat: a kind asked for twice.
	repeatedCaveat
	// emptyList: a svc, verbs or can caveat with no entry, which would
	// allow nothing.
	emptyList
	// notAVerb: a verbs entry that is not a verb of §4.
	notAVerb
	// badPattern: a can entry that is not a name, a prefix ending in *, or *.
	badPattern
	// expiryPassed: an exp that is not after now.
	expiryPassed
	// nbfNotBeforeExp: an nbf at or after the exp.
	nbfNotBeforeExp
	// negativeAmount: a per or spend below zero.
	negativeAmount
	// onlyNotAsked: an only caveat, which belongs in a consent grant
	// (§6.6), never in a request.
	onlyNotAsked
)

// requestError is a refusal of ParseRequest: why, which caveat, and one
// sentence for the requester.
type requestError struct {
	Reason  requestReason
	Caveat  string // the caveat kind at fault, as sent; "" for the list
	Message string
}

func (e *requestError) Error() string { return e.Message }

// ParseRequest checks the caveats of a request for a new root grant and
// returns what they ask for. It refuses, with an error of one sentence
// for the requester that names the caveat at fault: more than
// MaxRequestCaveats caveats; a kind §6.3 does not define (naming the kind
// it resembles when only the case differs, "Can" for "can"); a malformed
// value; a kind asked twice; an empty svc, verbs or can list; a verb that
// §4 does not define; a can pattern that is not a name, a prefix ending in
// * or *; an exp not after now; an nbf not before the exp; a negative per
// or spend; and any only caveat.
func ParseRequest(caveats []Caveat, now int64) (*Request, error) {
	bad := func(reason requestReason, caveat, format string, args ...any) (*Request, error) {
		return nil, &requestError{Reason: reason, Caveat: caveat, Message: fmt.Sprintf(format, args...)}
	}
	if len(caveats) > MaxRequestCaveats {
		return bad(tooManyCaveats, "", "a request may carry at most %d caveats", MaxRequestCaveats)
	}
	r := &Request{}
	seen := map[string]bool{}
	for _, c := range caveats {
		if !c.known() {
			if known, ok := knownCaveatLike(c.Name); ok {
				return bad(unknownCaveat, c.Name, "unknown caveat %s: caveat names are matched exactly; did you mean %q?", jsontext.QuoteName(c.Name), known)
			}
			return bad(unknownCaveat, c.Name, "unknown caveat %s", jsontext.QuoteName(c.Name))
		}
		if err := c.Check(); err != nil {
			return bad(malformedCaveat, c.Name, "caveat %q is malformed: %v", c.Name, err)
		}
		if seen[c.Name] {
			return bad(repeatedCaveat, c.Name, "caveat %q appears twice; ask for it once", c.Name)
		}
		seen[c.Name] = true
		switch c.Name {
		case kindSvc, kindVerbs, kindCan:
			list, _ := c.readStrings()
			if len(list) == 0 {
				return bad(emptyList, c.Name, "caveat %q has an empty list, which would allow nothing", c.Name)
			}
			switch c.Name {
			case kindSvc:
				r.Svc = list
			case kindVerbs:
				for _, v := range list {
					if !isParleyVerb(v) {
						return bad(notAVerb, c.Name, "verb %s is not a Parley verb (%s)", jsontext.QuoteName(v), strings.Join(parleyVerbs[:], ", "))
					}
				}
				r.Verbs = list
			case kindCan:
				for _, p := range list {
					if !ValidPattern(p) {
						return bad(badPattern, c.Name, "capability pattern %s must be a name, a prefix ending in *, or *", jsontext.QuoteName(p))
					}
				}
				r.Can = list
			}
		case kindExp:
			r.Exp, _ = c.readInt()
			if r.Exp <= now {
				return bad(expiryPassed, c.Name, "the expiry %d is not in the future", r.Exp)
			}
		case kindNbf:
			r.Nbf, _ = c.readInt()
		case kindPer, kindSpend:
			m, _ := c.readMoney()
			if m.Amount < 0 {
				return bad(negativeAmount, c.Name, "caveat %q has a negative amount", c.Name)
			}
			if c.Name == kindPer {
				r.Per = &m
			} else {
				r.Spend = &m
			}
		case kindRisk:
			r.Risk, _ = c.readText()
		case kindOnly:
			return bad(onlyNotAsked, c.Name, "an \"only\" caveat belongs in a consent grant")
		}
	}
	if r.Nbf != 0 && r.Exp != 0 && r.Nbf >= r.Exp {
		return bad(nbfNotBeforeExp, kindNbf, "nbf must be before exp")
	}
	return r, nil
}

// Caveats returns the caveats that say what r restricts, in a fixed order:
// svc, verbs, can, nbf, exp, per, spend, risk, each only when r restricts
// it. For a grant a policy decided (whose Exp is set), these are the
// caveats it is issued with.
func (r Request) Caveats() []Caveat {
	var out []Caveat
	if r.Svc != nil {
		out = append(out, Svc(r.Svc...))
	}
	if r.Verbs != nil {
		out = append(out, Verbs(r.Verbs...))
	}
	if r.Can != nil {
		out = append(out, Can(r.Can...))
	}
	if r.Nbf != 0 {
		out = append(out, Nbf(r.Nbf))
	}
	if r.Exp != 0 {
		out = append(out, Exp(r.Exp))
	}
	if r.Per != nil {
		out = append(out, Per(*r.Per))
	}
	if r.Spend != nil {
		out = append(out, Spend(*r.Spend))
	}
	if r.Risk != "" {
		out = append(out, Risk(r.Risk))
	}
	return out
}

// ValidPattern reports whether p is a can pattern of §6.3 (errata 1): an
// exact name, a prefix followed by one final *, or * alone.
func ValidPattern(p string) bool {
	if p == "" {
		return false
	}
	i := strings.IndexByte(p, '*')
	return i < 0 || i == len(p)-1
}

// knownCaveatLike returns the caveat kind that name differs from only in
// case, if any.
func knownCaveatLike(name string) (string, bool) {
	for _, k := range []string{kindSvc, kindVerbs, kindCan, kindExp, kindNbf, kindPer, kindSpend, kindRisk, kindOnly} {
		if jsontext.FoldName(k) == jsontext.FoldName(name) || strings.EqualFold(k, name) {
			return k, true
		}
	}
	return "", false
}
