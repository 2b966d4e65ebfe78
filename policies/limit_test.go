package policies

import (
	"sync"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	p := mustParse(t, `
[[agent]]
name = "slow"
uid = [1]
rate = 2

[[agent]]
name = "fast"
uid = [2]
rate = 60
`)
	t0 := time.Unix(now, 0)
	type step struct {
		agent string
		uid   uint32
		at    time.Duration // after t0
		ok    bool
		retry time.Duration
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"ok/burst-up-to-rate", []step{{"slow", 1, 0, true, 0}, {"slow", 1, 0, true, 0}}},
		{"fail/beyond-burst", []step{{"slow", 1, 0, true, 0}, {"slow", 1, 0, true, 0}, {"slow", 1, 0, false, 30 * time.Second}}},
		{"fail/retry-counts-down", []step{{"slow", 1, 0, true, 0}, {"slow", 1, 0, true, 0}, {"slow", 1, 10 * time.Second, false, 20 * time.Second}}},
		{"ok/refills-one-per-interval", []step{{"slow", 1, 0, true, 0}, {"slow", 1, 0, true, 0}, {"slow", 1, 30 * time.Second, true, 0}, {"slow", 1, 30 * time.Second, false, 30 * time.Second}}},
		{"ok/full-again-after-a-minute", []step{{"slow", 1, 0, true, 0}, {"slow", 1, 0, true, 0}, {"slow", 1, time.Hour, true, 0}, {"slow", 1, time.Hour, true, 0}, {"slow", 1, time.Hour, false, 30 * time.Second}}},
		{"ok/agents-have-own-buckets", []step{{"slow", 1, 0, true, 0}, {"slow", 1, 0, true, 0}, {"fast", 2, 0, true, 0}, {"slow", 1, 0, false, 30 * time.Second}}},
		{"ok/clock-going-back-refuses-no-more", []step{{"slow", 1, time.Minute, true, 0}, {"slow", 1, time.Minute, true, 0}, {"slow", 1, 0, false, 90 * time.Second}}},
		{"fail/unknown-agent", []step{{"nobody", 1, 0, false, time.Minute}}},
		{"ok/users-of-one-agent-have-own-buckets", []step{{"slow", 1, 0, true, 0}, {"slow", 1, 0, true, 0}, {"slow", 3, 0, true, 0}, {"slow", 3, 0, true, 0},
			{"slow", 1, 0, false, 30 * time.Second}, {"slow", 3, 0, false, 30 * time.Second}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := NewLimiter()
			for i, s := range tt.steps {
				ok, retry := l.Allow(p, s.agent, s.uid, t0.Add(s.at))
				if ok != s.ok || retry != s.retry {
					t.Errorf("step %d: Allow(%q, +%v) = %v, %v; want %v, %v", i, s.agent, s.at, ok, retry, s.ok, s.retry)
				}
			}
		})
	}
}

func TestLimiterRate(t *testing.T) {
	p := mustParse(t, "[[agent]]\nname = \"a\"\nuid = [1]\nrate = 60\n")
	l := NewLimiter()
	t0 := time.Unix(now, 0)
	allowed := 0
	// Ten minutes at one attempt every 100ms: one minute's burst, then one a second.
	for i := range 6000 {
		if ok, retry := l.Allow(p, "a", 1, t0.Add(time.Duration(i)*100*time.Millisecond)); ok {
			allowed++
		} else if retry <= 0 || retry > time.Second {
			t.Fatalf("retry %v out of (0, 1s]", retry)
		}
	}
	if want := 60 + 599; allowed < want-1 || allowed > want+1 {
		t.Errorf("allowed %d requests in ten minutes at rate 60, want about %d", allowed, want)
	}
}

func TestLimiterConcurrent(t *testing.T) {
	p := mustParse(t, "[[agent]]\nname = \"a\"\nuid = [1]\nrate = 50\n")
	l := NewLimiter()
	at := time.Unix(now, 0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if ok, _ := l.Allow(p, "a", 1, at); ok {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if allowed != 50 {
		t.Errorf("allowed %d of 160 simultaneous requests, want exactly the rate, 50", allowed)
	}
}

// TestLimiterTake: a bucket the daemon names (no agent of the policy) has
// the rate it is given, and shares nothing with an agent's bucket of the
// same uid.
func TestLimiterTake(t *testing.T) {
	p := mustParse(t, "[[agent]]\nname = \"a\"\nuid = [1]\nrate = 2\n")
	l := NewLimiter()
	t0 := time.Unix(now, 0)
	for i := range 3 {
		if ok, _ := l.Take("", 1, 3, t0); !ok {
			t.Fatalf("take %d of a bucket of 3 refused", i+1)
		}
	}
	if ok, retry := l.Take("", 1, 3, t0); ok || retry != 20*time.Second {
		t.Errorf("a fourth take of 3 a minute = %v, %v; want false, 20s", ok, retry)
	}
	if ok, _ := l.Allow(p, "a", 1, t0); !ok {
		t.Error("agent a's bucket is taken by the daemon's bucket of the same uid")
	}
	if ok, _ := l.Take("", 1, 0, t0.Add(time.Minute)); !ok {
		t.Error("a rate of 0 refused after a minute; it counts as 1")
	}
}
