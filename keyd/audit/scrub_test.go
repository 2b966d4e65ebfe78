package audit

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// scrubOptions are signedOptions with small segments and a fast scrub.
func scrubOptions(interval time.Duration) Options {
	o := signedOptions(newTestClock())
	o.SegmentSize = 4 << 10
	o.CheckpointEvery = 5
	o.ScrubInterval = interval
	o.ScrubRate = 1 << 30
	return o
}

// scrubLog writes a log of several segments with checkpoints in each.
func scrubLog(t *testing.T, l *Log) {
	t.Helper()
	for _, rec := range auditTestRecords(40) {
		auditTestAppend(t, l, rec)
	}
	barrier(t, l)
	segs, err := Segments(l.Path())
	if err != nil || len(segs) < 4 {
		t.Fatalf("%d segments, %v; the test needs closed ones", len(segs), err)
	}
}

// waitDamage waits up to a minute for the scrub to find damage.
func waitDamage(t *testing.T, l *Log) *Damage {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if d := l.Damage(); d != nil {
			return d
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the scrub found no damage within a minute")
	return nil
}

// waitScrubs waits until n scrubs have ended.
func waitScrubs(t *testing.T, l *Log, n uint64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if runs, _ := l.ScrubRuns(); runs >= n {
			return
		}
		if d := l.Damage(); d != nil {
			t.Fatalf("damage in a log nobody touched: %v", d)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("fewer than %d scrubs within a minute", n)
}

// tamperKinds are the ways of changing records before the last checkpoint
// that the fast start does not read (issue 22), each applied to the lines
// of a closed segment, with the reason the scrub must give.
var tamperKinds = []struct {
	name   string
	edit   func(t testing.TB, lines []string) []string
	reason Reason
}{
	{"edited", func(t testing.TB, lines []string) []string {
		i := indexOf(t, lines, `"grant_id":"g-`, 0)
		lines[i] = strings.Replace(lines[i], `"user":"agent"`, `"user":"agenx"`, 1)
		return lines
	}, ReasonChain},
	{"deleted", func(t testing.TB, lines []string) []string {
		i := indexOf(t, lines, `"grant_id":"g-`, 1)
		return append(lines[:i:i], lines[i+1:]...)
	}, ReasonSeq},
	{"reordered", func(t testing.TB, lines []string) []string {
		i := indexOf(t, lines, `"grant_id":"g-`, 1)
		lines[i], lines[i+1] = lines[i+1], lines[i]
		return lines
	}, ReasonSeq},
	{"duplicated", func(t testing.TB, lines []string) []string {
		i := indexOf(t, lines, `"grant_id":"g-`, 1)
		return append(lines[:i+1:i+1], lines[i:]...)
	}, ReasonSeq},
	{"forged-record-interleaved", func(t testing.TB, lines []string) []string {
		i := indexOf(t, lines, `"grant_id":"g-`, 1)
		var rec Record
		json.Unmarshal([]byte(lines[i]), &rec)
		rec.GrantID, rec.Message = "forged", "interleaved"
		b, _ := json.Marshal(&rec)
		return append(lines[:i+1:i+1], append([]string{string(b) + "\n"}, lines[i+1:]...)...)
	}, ReasonSeq},
	{"edited-chain-recomputed", func(t testing.TB, lines []string) []string {
		i := indexOf(t, lines, `"grant_id":"g-`, 0)
		lines[i] = strings.Replace(lines[i], `"user":"agent"`, `"user":"agenx"`, 1)
		return recomputeFrom(t, lines, i+1)
	}, ReasonCheckpoint},
	{"edited-signed-with-another-key", func(t testing.TB, lines []string) []string {
		i := indexOf(t, lines, `"grant_id":"g-`, 0)
		lines[i] = strings.Replace(lines[i], `"user":"agent"`, `"user":"agenx"`, 1)
		return forgeFrom(t, lines, i+1)
	}, ReasonForeignKey},
}

// recomputeFrom is recompute for the lines of a segment that does not
// begin at seq 1: seqs are kept as they run, prevs recomputed.
func recomputeFrom(t testing.TB, lines []string, from int) []string {
	t.Helper()
	var first Record
	json.Unmarshal([]byte(lines[0]), &first)
	shifted := make([]string, int(first.Seq)-1)
	out := recompute(t, append(shifted, lines...), int(first.Seq)-1+from)
	return out[first.Seq-1:]
}

func forgeFrom(t testing.TB, lines []string, from int) []string {
	t.Helper()
	var first Record
	json.Unmarshal([]byte(lines[0]), &first)
	shifted := make([]string, int(first.Seq)-1)
	out := forge(t, append(shifted, lines...), int(first.Seq)-1+from, testKey("attacker"))
	return out[first.Seq-1:]
}

// tamperSegment applies edit to the second closed segment.
func tamperSegment(t testing.TB, path string, edit func(testing.TB, []string) []string) {
	t.Helper()
	tamperSegmentN(t, path, 1, edit)
}

func tamperSegmentN(t testing.TB, path string, n int, edit func(testing.TB, []string) []string) {
	t.Helper()
	segs, err := Segments(path)
	if err != nil || len(segs) < 3 {
		t.Fatalf("segments: %v", err)
	}
	// Replaced whole, as sed -i does: a reader sees the old file or the new.
	p := segs[n].Path
	tmp := filepath.Join(filepath.Dir(p), "tampered.tmp")
	writeLines(t, tmp, edit(t, fileLines(t, p)))
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

// TestScrubFindsTamperingWhileRunning tampers with a closed segment of a
// running log in each way, and waits for the scrub to find it: the log is
// damaged, with the stable reason, and the damage file says so.
func TestScrubFindsTamperingWhileRunning(t *testing.T) {
	for _, tk := range tamperKinds {
		t.Run(tk.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.log")
			l := openWith(t, scrubOptions(20*time.Millisecond), path)
			defer l.Close()
			scrubLog(t, l)
			runs, _ := l.ScrubRuns()
			waitScrubs(t, l, runs+1)
			if d := l.Damage(); d != nil {
				t.Fatalf("damage before tampering: %v", d)
			}
			tamperSegment(t, path, tk.edit)
			d := waitDamage(t, l)
			if d.Reason != tk.reason {
				t.Errorf("reason %s, want %s (%v)", d.Reason, tk.reason, d)
			}
			got, err := ReadDamage(path)
			if err != nil || !got.Same(d) {
				t.Errorf("damage file: %v, %v; want %v", got, err, d)
			}
			// Verify, which status and audit verify run, gives the same.
			_, err = Verify(path, VerifyOptions{Key: testPub("daemon")})
			var ae *Error
			if !errors.As(err, &ae) || ae.Reason != tk.reason || ae.Seq != d.Seq {
				t.Errorf("Verify: %v; want reason %s at record %d", err, tk.reason, d.Seq)
			}
		})
	}
}

// TestScrubFindsTamperingAfterStop tampers with a stopped log, opens it
// (the fast start does not see it) and waits for the scrub behind it.
func TestScrubFindsTamperingAfterStop(t *testing.T) {
	for _, tk := range tamperKinds {
		t.Run(tk.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.log")
			o := scrubOptions(time.Hour)
			l := openWith(t, o, path)
			scrubLog(t, l)
			mustClose(t, l)
			tamperSegment(t, path, tk.edit)
			start := time.Now()
			l = openWith(t, o, path)
			defer l.Close()
			d := waitDamage(t, l)
			t.Logf("found %v after %s", d, time.Since(start))
			if d.Reason != tk.reason {
				t.Errorf("reason %s, want %s", d.Reason, tk.reason)
			}
		})
	}
}

// TestScrubDamageSurvivesRestartUntilAcknowledged: damage found stays
// found across a restart (the damage file), even before the next scrub;
// an acknowledgement that names other damage is refused; one that names it
// starts a new segment whose checkpoint is followed by the acknowledged
// record, and after it the log verifies and scrubs clean again.
func TestScrubDamageSurvivesRestartUntilAcknowledged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	o := scrubOptions(time.Hour)
	l := openWith(t, o, path)
	scrubLog(t, l)
	tamperSegment(t, path, tamperKinds[0].edit)
	l.ScrubNow()
	d := waitDamage(t, l)
	mustClose(t, l)

	// No scrub at all this time: the damage file alone keeps it.
	o2 := o
	o2.ScrubInterval = 0
	l = openWith(t, o2, path)
	if got := l.Damage(); !got.Same(d) {
		t.Fatalf("after a restart: damage %v, want %v", got, d)
	}
	mustClose(t, l)

	ack := func(l *Log, a Acknowledgement) AcknowledgeResult {
		t.Helper()
		os.Remove(AcknowledgeResultPath(path))
		b, _ := json.Marshal(a)
		if err := os.WriteFile(AcknowledgePath(path), b, 0o600); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if b, err := os.ReadFile(AcknowledgeResultPath(path)); err == nil {
				var r AcknowledgeResult
				if err := json.Unmarshal(b, &r); err != nil {
					t.Fatal(err)
				}
				return r
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatal("no answer to the acknowledgement")
		return AcknowledgeResult{}
	}
	l = openWith(t, o, path)
	defer l.Close()
	ch, stop := l.SubscribeDamage()
	defer stop()
	other := *d
	other.Seq++
	if r := ack(l, Acknowledgement{Damage: other, Reason: "restored from backup", By: "root (uid 0)"}); r.OK || l.Damage() == nil {
		t.Fatalf("an acknowledgement of other damage was taken: %+v", r)
	}
	r := ack(l, Acknowledgement{Damage: *d, Reason: "edited by the test; kept a copy", By: "root (uid 0)"})
	if !r.OK || l.Damage() != nil {
		t.Fatalf("acknowledgement: %+v, damage %v", r, l.Damage())
	}
	select {
	case got := <-ch:
		if got != nil {
			t.Errorf("subscribers got %v, want nil (acknowledged)", got)
		}
	case <-time.After(10 * time.Second):
		t.Error("subscribers were not told of the acknowledgement")
	}
	if _, err := os.Stat(DamagePath(path)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("damage file left: %v", err)
	}
	lines := fileLines(t, path)
	var first, second Record
	json.Unmarshal([]byte(lines[0]), &first)
	json.Unmarshal([]byte(lines[1]), &second)
	if first.Kind != KindCheckpoint || second.Kind != KindAcknowledged || second.Seq != r.Seq || !second.Damage.Same(d) ||
		!strings.Contains(second.Message, "edited by the test") || second.Decision != string(d.Reason) {
		t.Fatalf("the new segment begins\n%s%s", lines[0], lines[1])
	}
	rep, err := Verify(path, VerifyOptions{Key: testPub("daemon")})
	if err != nil || len(rep.Acknowledged) != 1 {
		t.Fatalf("Verify after the acknowledgement: %v, %+v", err, rep)
	}
	runs, _ := l.ScrubRuns()
	l.ScrubNow()
	waitScrubs(t, l, runs+1)
	if d := l.Damage(); d != nil {
		t.Fatalf("the scrub after the acknowledgement: %v", d)
	}
	// New damage before the acknowledged one is not covered by it.
	tamperSegmentN(t, path, 0, func(t testing.TB, lines []string) []string {
		lines[2] = strings.Replace(lines[2], `"pid":`, `"pid":1`, 1)
		return lines
	})
	l.ScrubNow()
	if d2 := waitDamage(t, l); d2.Same(d) {
		t.Fatalf("new damage taken for the acknowledged one: %v", d2)
	}
}

// TestScrubRate: the scrub reads no faster than its rate.
func TestScrubRate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	o := scrubOptions(0)
	l := openWith(t, o, path)
	defer l.Close()
	scrubLog(t, l)
	var size int64
	segs, _ := Segments(path)
	for _, s := range segs {
		fi, _ := os.Stat(s.Path)
		size += fi.Size()
	}
	l.o.ScrubRate = size * 4 // a quarter of a second for the whole log
	start := time.Now()
	rep, err := l.Scrub(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 200*time.Millisecond || rep.BytesRead < size-MaxRecord {
		t.Errorf("read %d of %d bytes in %s at %d bytes/s", rep.BytesRead, size, took, l.o.ScrubRate)
	}
}

// FuzzVerifyAcknowledged runs Verify on a log whose damage was acknowledged,
// with the segment that begins with the acknowledgement damaged: Verify
// must not panic, and goes past damage only for an acknowledged record
// that names it.
func FuzzVerifyAcknowledged(f *testing.F) {
	first := settleFirst
	settleFirst = 0
	f.Cleanup(func() { settleFirst = first })
	dir := f.TempDir()
	path := filepath.Join(dir, "audit.log")
	l := openWith(f, scrubOptions(0), path)
	for _, rec := range auditTestRecords(40) {
		auditTestAppend(f, l, rec)
	}
	tamperSegment(f, path, tamperKinds[0].edit)
	_, err := Verify(path, VerifyOptions{Key: testPub("daemon")})
	var ae *Error
	if !errors.As(err, &ae) {
		f.Fatalf("the seed log is not damaged: %v", err)
	}
	d := DamageOf(ae)
	if _, err := l.acknowledge(&d, "seed", "root (uid 0)"); err != nil {
		f.Fatal(err)
	}
	mustClose(f, l)
	seed, _ := os.ReadFile(path)
	f.Add(seed)
	f.Add(seed[:len(seed)/2])
	f.Add([]byte(strings.Replace(string(seed), `"line":`, `"line":1`, 1)))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := copyDir(t, filepath.Dir(path))
		p := filepath.Join(dir, "audit.log")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		rep, err := Verify(p, VerifyOptions{Key: testPub("daemon")})
		if err != nil {
			return
		}
		for _, r := range rep.Acknowledged {
			if r.Kind != KindAcknowledged || !r.Damage.Same(&d) {
				t.Fatalf("went past damage %v on %+v", d, r)
			}
		}
	})
}

// BenchmarkScrub verifies a log of 5 000 records, as the scrub does
// without its rate bound: what it costs a byte (docs/performance.md).
func BenchmarkScrub(b *testing.B) {
	path := filepath.Join(b.TempDir(), "audit.log")
	o := signedOptions(newTestClock())
	o.CheckpointEvery = 1000
	l := openWith(b, o, path)
	for _, rec := range auditTestRecords(5000) {
		auditTestAppend(b, l, rec)
	}
	mustClose(b, l)
	b.ResetTimer()
	var read int64
	for range b.N {
		rep, err := Verify(path, VerifyOptions{Key: testPub("daemon")})
		if err != nil {
			b.Fatal(err)
		}
		read = rep.BytesRead
	}
	b.SetBytes(read)
}
