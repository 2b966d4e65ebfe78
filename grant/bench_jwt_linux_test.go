//go:build linux

package grant

import (
	"crypto/ed25519"
	"fmt"
	"runtime"
	"testing"
	"time"
)

// BenchmarkVerifyCompare is BenchmarkVerifyCache in thread CPU time, with
// the five ways of checking the same chain alternating in every iteration
// (see BenchmarkVerifyOverhead for why): Verify without a cache (cold), with
// a cache that misses, with a cache that holds the grant (warm), the JWT
// chain of the same shape, and the bare ed25519.Verify calls. It reports
// each as <name>-cpu-ns/op. internal/testkit/bench runs it for make bench.
func BenchmarkVerifyCompare(b *testing.B) {
	for _, n := range []int{1, 3, 8} {
		v := newVerifyBench(b, n)
		b.Run(fmt.Sprintf("blocks=%d", n), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			warm, miss := v.ctx, v.ctx
			warm.Cache, miss.Cache = newBlockCache(0), newBlockCache(n)
			if _, err := Verify(v.tokens, v.trusted, warm); err != nil {
				b.Fatal(err)
			}
			var cpu [5]time.Duration
			i := 0
			step := func(k int, f func() error) {
				t0 := threadCPU(b)
				if err := f(); err != nil {
					b.Fatal(err)
				}
				cpu[k] += threadCPU(b) - t0
			}
			for b.Loop() {
				step(0, func() error { _, err := Verify(v.tokens, v.trusted, v.ctx); return err })
				step(1, func() error { _, err := Verify(v.others[i%len(v.others)], v.trusted, miss); return err })
				step(2, func() error { _, err := Verify(v.tokens, v.trusted, warm); return err })
				step(3, func() error { return verifyJWTChain(v.jwt, v.trusted, &v.ctx) })
				step(4, func() error {
					for j := range v.keys {
						if !ed25519.Verify(v.keys[j], v.msgs[j], v.sigs[j]) {
							return fmt.Errorf("bad signature")
						}
					}
					return nil
				})
				i++
			}
			for k, name := range []string{"cold", "miss", "warm", "jwt", "ed25519"} {
				b.ReportMetric(float64(cpu[k])/float64(b.N), name+"-cpu-ns/op")
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}
