package audit

import (
	"path/filepath"
	"testing"
	"time"
)

// TestVerifyWhileWriting runs Verify again and again on a log that 16
// goroutines keep writing, in both of the log's ways of writing. A reader
// of a file written in place can see a record half copied (the kernel does
// not make a read atomic with a write): the NUL bytes it overwrites, then
// its end and newline. Verify must take such a read for the write it is,
// not for damage, as `parley-keyd audit verify` does beside a running
// daemon; and it must still find the damage that stays (TestTamperDetected).
func TestVerifyWhileWriting(t *testing.T) {
	for _, pre := range []int64{0, 16 << 10} {
		t.Run(map[bool]string{true: "preallocated", false: "appending"}[pre > 0], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.log")
			o := signedOptions(newTestClock())
			o.CheckpointEvery = 500
			o.Preallocate = pre
			l := openWith(t, o, path)
			a := startAppenders(l, 16)
			waitFor(t, "the first records", func() bool { return a.ackedCount() >= 100 })
			deadline := time.Now().Add(3 * time.Second)
			runs := 0
			for ; time.Now().Before(deadline) || runs < 20; runs++ {
				if _, err := Verify(path, VerifyOptions{Key: testPub("daemon")}); err != nil {
					a.halt(t)
					t.Fatalf("verify %d, while the log is written: %v", runs+1, err)
				}
			}
			a.halt(t)
			mustClose(t, l)
			t.Logf("%d verifies over %d records", runs, a.ackedCount())
		})
	}
}
