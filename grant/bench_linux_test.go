//go:build linux

package grant

import (
	"crypto/ed25519"
	"fmt"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU returns the CPU time the calling OS thread has used.
func threadCPU(b *testing.B) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ts.Nano())
}

// BenchmarkVerifyOverhead measures the overhead of Verify over the bare
// ed25519.Verify calls of the same chain in thread CPU time, alternating the
// two in every iteration. Unlike wall time, thread CPU time does not count
// the time spent waiting for a CPU, so the ratio holds on a busy machine.
// It reports grant-cpu-ns/op, ed25519-cpu-ns/op and overhead-%.
func BenchmarkVerifyOverhead(b *testing.B) {
	for _, n := range []int{1, 3, 8} {
		tok, holder, keys, msgs, sigs := benchChain(b, n)
		ctx := Context{
			Service: "shop.example", Verb: "COMMIT", Capability: "shop.order", Now: testNow, ProofKey: holder,
			Proposal: &Proposal{Hash: "H", Cost: &Money{1000, "USD"}, Risk: riskLow},
			Spent:    map[string]int64{"x": 1},
		}
		tokens, trusted := []string{tok}, []string{principalPub}
		b.Run(fmt.Sprintf("blocks=%d", n), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var grantCPU, edCPU time.Duration
			for b.Loop() {
				t0 := threadCPU(b)
				if _, err := Verify(tokens, trusted, ctx); err != nil {
					b.Fatal(err)
				}
				t1 := threadCPU(b)
				for i := range keys {
					if !ed25519.Verify(keys[i], msgs[i], sigs[i]) {
						b.Fatal("bad signature")
					}
				}
				t2 := threadCPU(b)
				grantCPU += t1 - t0
				edCPU += t2 - t1
			}
			g, e := float64(grantCPU)/float64(b.N), float64(edCPU)/float64(b.N)
			b.ReportMetric(g, "grant-cpu-ns/op")
			b.ReportMetric(e, "ed25519-cpu-ns/op")
			b.ReportMetric(100*(g-e)/e, "overhead-%")
		})
	}
}
