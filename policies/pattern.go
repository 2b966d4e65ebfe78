package policies

import "strings"

// Capability patterns (§6.3, errata 1): an exact name, or a prefix followed
// by "*", which matches every name that starts with the prefix. "*" is the
// empty prefix and matches all. A "*" anywhere but at the end is not a
// pattern this package accepts.

// match reports whether pattern p matches the capability name c.
func match(p, c string) bool {
	if pre, ok := strings.CutSuffix(p, "*"); ok {
		return strings.HasPrefix(c, pre)
	}
	return p == c
}

// contains reports whether every name that q matches is also matched by p:
// q ⊆ p. "calendar.find" ⊆ "calendar.*" ⊆ "*", and "calendar.*" is not
// contained in "calendar.find".
func contains(p, q string) bool {
	pp, pStar := strings.CutSuffix(p, "*")
	if !pStar {
		return p == q // an exact name contains only itself
	}
	qq, _ := strings.CutSuffix(q, "*")
	return strings.HasPrefix(qq, pp)
}

// intersect returns the pattern that matches exactly the names both p and q
// match, and false when no name matches both. The intersection of two
// patterns is always one of them or empty.
func intersect(p, q string) (string, bool) {
	switch {
	case contains(p, q):
		return q, true
	case contains(q, p):
		return p, true
	}
	return "", false
}

// overlaps reports whether some name matches both p and q.
func overlaps(p, q string) bool {
	_, ok := intersect(p, q)
	return ok
}

// coveredBy reports whether every pattern of want is contained in some
// pattern of allowed. A nil list means "*".
func coveredBy(want, allowed []string) bool {
	if allowed == nil {
		return true
	}
	if want == nil {
		want = []string{"*"}
	}
	for _, q := range want {
		ok := false
		for _, p := range allowed {
			if contains(p, q) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// intersectPatterns returns the patterns that match exactly what both lists
// match, without duplicates and with no pattern contained in another, in the
// order of want. A nil list means "*"; the result is nil only when both are.
func intersectPatterns(want, allowed []string) []string {
	if want == nil && allowed == nil {
		return nil
	}
	if want == nil {
		want = []string{"*"}
	}
	if allowed == nil {
		allowed = []string{"*"}
	}
	var out []string
	for _, q := range want {
		for _, p := range allowed {
			if r, ok := intersect(p, q); ok {
				out = append(out, r)
			}
		}
	}
	return minimalPatterns(out)
}

// minimalPatterns drops duplicates and patterns contained in another one,
// keeping the first occurrence's position.
func minimalPatterns(ps []string) []string {
	var out []string
	for i, p := range ps {
		redundant := false
		for j, q := range ps {
			if i == j {
				continue
			}
			// p is redundant when q strictly contains it, or when they are
			// equal and q comes first.
			if contains(q, p) && (p != q || j < i) {
				redundant = true
				break
			}
		}
		if !redundant {
			out = append(out, p)
		}
	}
	return out
}

// overlapPatterns reports whether some name matches a pattern of each list.
// A nil list means "*".
func overlapPatterns(a, b []string) bool {
	if a == nil || b == nil {
		return (a == nil || len(a) > 0) && (b == nil || len(b) > 0)
	}
	for _, p := range a {
		for _, q := range b {
			if overlaps(p, q) {
				return true
			}
		}
	}
	return false
}

// Sets of plain names (services, verbs): nil means all.

func subset(want, allowed []string) bool {
	if allowed == nil {
		return true
	}
	if want == nil {
		return false
	}
	for _, w := range want {
		if !has(allowed, w) {
			return false
		}
	}
	return true
}

func has[T comparable](list []T, x T) bool {
	for _, y := range list {
		if y == x {
			return true
		}
	}
	return false
}

// intersectNames returns the names in both lists, in the order of want. A
// nil list means all; the result is nil only when both are nil.
func intersectNames(want, allowed []string) []string {
	switch {
	case want == nil && allowed == nil:
		return nil
	case want == nil:
		return append([]string{}, allowed...)
	case allowed == nil:
		return append([]string{}, want...)
	}
	out := []string{}
	for _, w := range want {
		if has(allowed, w) && !has(out, w) {
			out = append(out, w)
		}
	}
	return out
}

func overlapNames(a, b []string) bool {
	if a == nil || b == nil {
		return (a == nil || len(a) > 0) && (b == nil || len(b) > 0)
	}
	for _, x := range a {
		if has(b, x) {
			return true
		}
	}
	return false
}
