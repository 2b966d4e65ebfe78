package policies

import (
	"sync"
	"time"
)

// Limiter enforces each caller's requests per minute. A caller is one OS
// user matched by one agent: an agent that matches many users (any = true,
// a group) gives each of them the agent's rate, so that one user cannot
// use up another's. It spreads a minute's allowance evenly (a token bucket
// that holds at most one minute of requests, kept as a theoretical arrival
// time), so a caller can burst up to its rate and then proceeds at one
// request every minute/rate. It is safe for concurrent use; the zero value
// is not, use NewLimiter.
type Limiter struct {
	mu  sync.Mutex
	tat map[limitKey]time.Time // per caller: when its bucket is full again
}

// limitKey names a caller: an agent of the policy and a uid it matched.
type limitKey struct {
	agent string
	uid   uint32
}

// maxLimiterEntries bounds the limiter's memory across policy reloads that
// rename agents.
const maxLimiterEntries = 4096

// NewLimiter returns a limiter with every caller's bucket full.
func NewLimiter() *Limiter {
	return &Limiter{tat: map[limitKey]time.Time{}}
}

// Allow takes one request of the caller (agent, uid) from its bucket under
// policy p at time now. When the bucket is empty it returns false and how
// long to wait until one request fits (always more than zero). An agent
// that p does not define is refused with a retry of a minute.
func (l *Limiter) Allow(p *Policy, agent string, uid uint32, now time.Time) (ok bool, retry time.Duration) {
	a := p.agentNamed(agent)
	if a == nil {
		return false, time.Minute
	}
	return l.Take(agent, uid, a.rate, now)
}

// Take takes one request of the caller (name, uid) from a bucket of rate
// requests a minute at time now, as Allow does for an agent of a policy.
// It is for callers a policy names no agent for (the daemon picks their
// name and rate); an agent's name never collides with one that is not
// an agent name (one that is empty or holds a colon). A rate below 1
// counts as 1.
func (l *Limiter) Take(name string, uid uint32, rate int, now time.Time) (ok bool, retry time.Duration) {
	rate = max(rate, 1)
	interval := time.Minute / time.Duration(rate)
	burst := time.Duration(rate-1) * interval
	key := limitKey{name, uid}
	l.mu.Lock()
	defer l.mu.Unlock()
	tat, seen := l.tat[key]
	if !seen || tat.Before(now) {
		tat = now
	}
	if earliest := tat.Add(-burst); now.Before(earliest) {
		return false, earliest.Sub(now)
	}
	if !seen && len(l.tat) >= maxLimiterEntries {
		// Drop buckets that are full anyway: forgetting them changes nothing.
		for k, t := range l.tat {
			if !t.After(now) {
				delete(l.tat, k)
			}
		}
	}
	l.tat[key] = tat.Add(interval)
	return true, 0
}

// MaxPending returns how many approvals each user matched by agent may have
// waiting at once; 0 for an agent the policy does not define.
func (p *Policy) MaxPending(agent string) int {
	if a := p.agentNamed(agent); a != nil {
		return a.pending
	}
	return 0
}

// Rate returns the requests per minute of each user matched by agent; 0 for
// an agent the policy does not define.
func (p *Policy) Rate(agent string) int {
	if a := p.agentNamed(agent); a != nil {
		return a.rate
	}
	return 0
}

func (p *Policy) agentNamed(name string) *agent {
	for _, a := range p.agents {
		if a.name == name {
			return a
		}
	}
	return nil
}
