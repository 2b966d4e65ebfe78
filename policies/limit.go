package policies

import (
	"sync"
	"time"
)

// Limiter enforces each agent's requests per minute. It spreads a minute's
// allowance evenly (a token bucket that holds at most one minute of
// requests, kept as a theoretical arrival time), so an agent can burst up to
// its rate and then proceeds at one request every minute/rate. It is safe
// for concurrent use; the zero value is not, use NewLimiter.
type Limiter struct {
	mu  sync.Mutex
	tat map[string]time.Time // per agent: when its bucket is full again
}

// maxLimiterEntries bounds the limiter's memory across policy reloads that
// rename agents.
const maxLimiterEntries = 4096

// NewLimiter returns a limiter with every agent's bucket full.
func NewLimiter() *Limiter {
	return &Limiter{tat: map[string]time.Time{}}
}

// Allow takes one request of agent from its bucket under policy p at time
// now. When the bucket is empty it returns false and how long to wait until
// one request fits (always more than zero). An agent that p does not define
// is refused with a retry of a minute.
func (l *Limiter) Allow(p *Policy, agent string, now time.Time) (ok bool, retry time.Duration) {
	a := p.agentNamed(agent)
	if a == nil {
		return false, time.Minute
	}
	interval := time.Minute / time.Duration(a.rate)
	burst := time.Duration(a.rate-1) * interval
	l.mu.Lock()
	defer l.mu.Unlock()
	tat, seen := l.tat[agent]
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
	l.tat[agent] = tat.Add(interval)
	return true, 0
}

// MaxPending returns how many approvals agent may have waiting at once; 0
// for an agent the policy does not define.
func (p *Policy) MaxPending(agent string) int {
	if a := p.agentNamed(agent); a != nil {
		return a.pending
	}
	return 0
}

// Rate returns agent's requests per minute; 0 for an agent the policy does
// not define.
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
