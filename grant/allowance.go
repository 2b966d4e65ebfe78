package grant

import (
	"slices"
	"strings"
)

// allowance is what the caveats of a chain allow together. A request
// passes a chain only when every caveat of every block holds (§6.3), so
// the lists intersect and the limits take their tightest value. Caveats
// that are unknown or malformed allow nothing at all (they are never
// satisfied); allowance leaves them out.
type allowance struct {
	// Svc and Verbs are the services and verbs that every svc (verbs)
	// caveat lists, in the order of the first; nil when no block has one.
	Svc, Verbs []string
	// Can holds the patterns of each can caveat, in chain order: a
	// capability must match a pattern of every one.
	Can [][]string
	// Exp is the earliest exp, when HasExp; Nbf the latest nbf, when
	// HasNbf.
	Exp, Nbf       int64
	HasExp, HasNbf bool
	// Per and Spend hold every per (spend) limit, in chain order.
	Per, Spend []Money
	// Risk is the lowest risk ceiling, "" when no block has one.
	Risk string
	// Only holds the hash of every only caveat, in chain order.
	Only []string
}

// allowance returns what the caveats of t allow together.
func (t *Token) allowance() allowance {
	var a allowance
	var svc, verbs [][]string
	for i := range t.Blocks {
		for _, c := range t.Blocks[i].Caveats {
			switch c.Name {
			case kindSvc, kindVerbs, kindCan:
				ss, err := c.readStrings()
				if err != nil {
					continue
				}
				switch c.Name {
				case kindSvc:
					svc = append(svc, ss)
				case kindVerbs:
					verbs = append(verbs, ss)
				default:
					a.Can = append(a.Can, ss)
				}
			case kindExp:
				if n, err := c.readInt(); err == nil && (!a.HasExp || n < a.Exp) {
					a.Exp, a.HasExp = n, true
				}
			case kindNbf:
				if n, err := c.readInt(); err == nil && (!a.HasNbf || n > a.Nbf) {
					a.Nbf, a.HasNbf = n, true
				}
			case kindPer, kindSpend:
				if m, err := c.readMoney(); err == nil {
					if c.Name == kindPer {
						a.Per = append(a.Per, m)
					} else {
						a.Spend = append(a.Spend, m)
					}
				}
			case kindRisk:
				if s, err := c.readText(); err == nil {
					if r, ok := riskRank(s); ok {
						if cur, _ := riskRank(a.Risk); a.Risk == "" || r < cur {
							a.Risk = s
						}
					}
				}
			case kindOnly:
				if s, err := c.readText(); err == nil {
					a.Only = append(a.Only, s)
				}
			}
		}
	}
	a.Svc, a.Verbs = intersect(svc), intersect(verbs)
	return a
}

// intersect returns the entries common to all lists, in the order of the
// first, or nil for no list.
func intersect(lists [][]string) []string {
	if len(lists) == 0 {
		return nil
	}
	out := []string{}
	for _, s := range lists[0] {
		in := true
		for _, l := range lists[1:] {
			if !slices.Contains(l, s) {
				in = false
				break
			}
		}
		if in && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// Narrowing says what a caveat added to a chain would change (see
// Token.Narrowing).
type Narrowing struct {
	// Narrows reports whether the chain would allow less with the caveat.
	Narrows bool
	// Outside lists the entries of a svc or verbs caveat that the chain
	// does not allow anyway.
	Outside []string
	// By is, when Narrows is false, the restriction of the chain that
	// already allows no more than the caveat (for svc and verbs, one
	// caveat with the intersection of the chain's lists). It is the zero
	// Caveat when an nbf narrows nothing because its time has passed.
	By Caveat
	// Excludes reports that the chain with the caveat allows no request
	// the caveat applies to: an only caveat beside another only hash. By
	// then holds the chain's only caveat.
	Excludes bool
}

// Narrowing returns what adding c to t would change at now (§6.3): whether
// it narrows anything, the svc or verbs entries it names that t does not
// allow anyway, and which restriction of t already covers it when it
// narrows nothing. A caveat that is unknown or malformed narrows
// everything: it is never satisfied. Caveats of t that are unknown or
// malformed are left out: they allow nothing, which Caveat.Check tells.
// It checks no signature: call CheckChain for that.
func (t *Token) Narrowing(c Caveat, now int64) Narrowing { return t.allowance().narrowing(c, now) }

// narrowing is Narrowing for a chain that allows a.
func (a allowance) narrowing(c Caveat, now int64) Narrowing {
	n := Narrowing{Narrows: true}
	if c.Check() != nil {
		return n
	}
	switch c.Name {
	case kindSvc, kindVerbs:
		news, _ := c.readStrings()
		allowed := a.Svc
		if c.Name == kindVerbs {
			allowed = a.Verbs
		}
		if allowed == nil {
			return n
		}
		for _, s := range news {
			if !slices.Contains(allowed, s) && !slices.Contains(n.Outside, s) {
				n.Outside = append(n.Outside, s)
			}
		}
		if subset(allowed, news) {
			n.Narrows, n.By = false, Caveat{Name: c.Name, Value: stringsValue(allowed)}
		}
	case kindCan:
		news, _ := c.readStrings()
		for _, p := range a.Can {
			if coversAll(news, p) {
				return Narrowing{By: Can(p...)}
			}
		}
	case kindExp:
		if v, _ := c.readInt(); a.HasExp && v >= a.Exp {
			n.Narrows, n.By = false, Exp(a.Exp)
		}
	case kindNbf:
		v, _ := c.readInt()
		switch {
		case a.HasNbf && v <= a.Nbf:
			n.Narrows, n.By = false, Nbf(a.Nbf)
		case v <= now:
			n.Narrows = false
		}
	case kindPer, kindSpend:
		m, _ := c.readMoney()
		limits, mk := a.Per, Per
		if c.Name == kindSpend {
			limits, mk = a.Spend, Spend
		}
		for _, p := range limits {
			if p.Currency == m.Currency && p.Amount <= m.Amount {
				return Narrowing{By: mk(p)}
			}
		}
	case kindRisk:
		s, _ := c.readText()
		r, _ := riskRank(s)
		if cur, ok := riskRank(a.Risk); ok && cur <= r {
			n.Narrows, n.By = false, Risk(a.Risk)
		}
	case kindOnly:
		s, _ := c.readText()
		switch {
		case slices.Contains(a.Only, s):
			n.Narrows, n.By = false, Only(s)
		case len(a.Only) > 0:
			n.Excludes, n.By = true, Only(a.Only[0])
		}
	}
	return n
}

// subset reports whether every entry of a is in b.
func subset(a, b []string) bool {
	for _, s := range a {
		if !slices.Contains(b, s) {
			return false
		}
	}
	return true
}

// coversAll reports whether every capability that some pattern of old
// matches is matched by a pattern of news (§6.3, errata 1).
func coversAll(news, old []string) bool {
	for _, q := range old {
		covered := false
		for _, p := range news {
			if prefix, ok := strings.CutSuffix(p, "*"); ok {
				covered = strings.HasPrefix(q, prefix)
			} else {
				covered = p == q
			}
			if covered {
				break
			}
		}
		if !covered {
			return false
		}
	}
	return true
}
