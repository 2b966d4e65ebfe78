//go:build linux

package grant

import (
	"bytes"
	"crypto/ed25519"
	"runtime"
	"testing"
	"time"
)

// BenchmarkSignCheck measures the defences against faulty signatures that
// sign.go weighs, in thread CPU time, alternating in every iteration: a
// bare signature (no defence), a signature verified after signing (what
// sign does), and two signatures compared (the cheaper defence it does not
// use). The message is a grant payload of benchChain's root. It reports
// <name>-cpu-ns/op.
func BenchmarkSignCheck(b *testing.B) {
	_, _, _, msgs, _ := benchChain(b, 1)
	msg := msgs[0]
	key := keyPrincipal
	pubKey := pub(key)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cpu [4]time.Duration
	step := func(k int, f func() bool) {
		t0 := threadCPU(b)
		if !f() {
			b.Fatal("check failed")
		}
		cpu[k] += threadCPU(b) - t0
	}
	proofKey := keyAgent
	for b.Loop() {
		step(0, func() bool { return len(ed25519.Sign(key, msg)) == ed25519.SignatureSize })
		step(1, func() bool { return ed25519.Verify(pubKey, msg, ed25519.Sign(key, msg)) })
		step(2, func() bool { return bytes.Equal(ed25519.Sign(key, msg), ed25519.Sign(key, msg)) })
		step(3, func() bool {
			_, err := MakeProof(proofKey, principalPub, "GRANT", "Nq2RyRu0ZzEaS-4NGGJTxOkKkMPIvPI-ROg7WEBbI6o", testNow)
			return err == nil
		})
	}
	for k, name := range []string{"sign", "sign+verify", "sign-twice", "makeproof"} {
		b.ReportMetric(float64(cpu[k])/float64(b.N), name+"-cpu-ns/op")
	}
}
