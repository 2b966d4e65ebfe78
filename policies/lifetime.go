package policies

// LongestGrant returns the longest lifetime, in seconds, that a grant the
// policy issues can have: the largest max_exp of its auto and ask rules and
// of its consent rules, where a rule without max_exp counts the Ceiling. It
// is 0 when the policy issues nothing. A principal key rotated with an
// overlap shorter than this would leave grants alive that services no
// longer trust.
func (p *Policy) LongestGrant() int64 {
	var longest int64
	for _, u := range p.rules {
		if u.action == Deny {
			continue
		}
		maxLife, _ := u.lifetimes()
		longest = max(longest, maxLife)
	}
	for _, c := range p.consents {
		if c.action == Deny {
			continue
		}
		life := c.maxExp
		if life == 0 {
			life = Ceiling
		}
		longest = max(longest, life)
	}
	return longest
}
