package audit

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"
)

func lastRecord(t *testing.T, path string) Record {
	t.Helper()
	lines := fileLines(t, path)
	var rec Record
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestRecordBounds: no caller-supplied value makes a record without bound
// (issue 10: a refusal's reason of 17 KB went into one record whole). A
// long value is cut, visibly, with its size and hash kept.
func TestRecordBounds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l := auditTestOpen(t, path)
	defer l.Close()
	reason := strings.Repeat("the policy says no. ", 850) // 17 000 bytes
	auditTestAppend(t, l, Record{Kind: KindDeny, Message: reason})
	rec := lastRecord(t, path)
	if len(rec.Message) > maxMessage || !strings.HasSuffix(rec.Message, CutMarker) || !strings.HasPrefix(reason, strings.TrimSuffix(rec.Message, CutMarker)) {
		t.Errorf("message of %d bytes kept as %d bytes ending %q", len(reason), len(rec.Message), rec.Message[len(rec.Message)-20:])
	}
	if c := rec.Cut["message"]; c.Size != len(reason) || c.SHA256 != chainHash([]byte(reason)) {
		t.Errorf("cut %+v, want size %d and the hash of the original", rec.Cut, len(reason))
	}

	// The worst a caller can do: every field at its bound, made of
	// characters JSON writes six bytes long, and caveats at theirs.
	ctl := func(n int) string { return strings.Repeat("\x01", n) }
	cav := json.RawMessage(`["` + strings.Repeat("a", maxCaveats*2) + `"]`)
	worst := Record{Kind: KindError, RequestID: ctl(1000), Holder: ctl(1000), Decision: ctl(1000), GrantID: ctl(1000),
		Message: ctl(100000), Caller: &Caller{User: ctl(1000), Exe: ctl(100000), Unit: ctl(10000)},
		DecidedBy: &Decider{Rule: ctl(1000), Approver: ctl(1000), Channel: ctl(1000), Strength: ctl(1000)},
		Requested: cav, Issued: cav}
	seq := auditTestAppend(t, l, worst)
	line := fileLines(t, path)[seq-1]
	if len(line) > MaxRecord {
		t.Errorf("worst record is %d bytes, more than MaxRecord %d", len(line), MaxRecord)
	}
	rec = lastRecord(t, path)
	if len(rec.Cut) != 14 {
		t.Errorf("%d fields marked cut, want 14: %v", len(rec.Cut), rec.Cut)
	}
	var s string
	if err := json.Unmarshal(rec.Requested, &s); err != nil || !strings.HasSuffix(s, CutMarker) {
		t.Errorf("cut caveats are %.40s…, want a string ending with the cut marker", rec.Requested)
	}
	if _, err := VerifyChain(openFile(t, path)); err != nil {
		t.Error(err)
	}
	// A cut never splits a character.
	if got := cutString("a"+strings.Repeat("é", 10), 2+len(CutMarker)); !utf8.ValidString(got) || got != "a"+CutMarker {
		t.Errorf("cutString = %q", got)
	}
}

// TestAppendFolded: a flood of identical refusals from one caller becomes
// one record at once and one counted record per window, and the count is
// exact; other callers, other reasons and grants are not folded into them.
func TestAppendFolded(t *testing.T) {
	clock := newTestClock()
	path := filepath.Join(t.TempDir(), "audit.log")
	o := signedOptions(clock)
	o.FoldWindow = time.Hour // the test clock moves a millisecond a reading
	l := openWith(t, o, path)
	deny := func(uid uint32, i int) Record {
		return Record{Kind: KindDeny, RequestID: fmt.Sprintf("r%d", i), Caller: &Caller{UID: uid, PID: int32(i), User: "bot"},
			Decision: "deny", DecidedBy: &Decider{Rule: "no-shop"}, Message: "no rule allows shop.order"}
	}
	written, folded := 0, 0
	for i := range 1000 {
		seq, f, err := l.AppendFolded(deny(1000, i))
		if err != nil {
			t.Fatal(err)
		}
		if f {
			folded++
		} else if seq > 0 {
			written++
		}
	}
	if written != 1 || folded != 999 {
		t.Fatalf("1000 refusals: %d written, %d folded; want 1 and 999", written, folded)
	}
	// Another caller is not folded into the first one's run.
	if _, f, _ := l.AppendFolded(deny(1001, 0)); f {
		t.Error("a refusal of another caller was folded")
	}
	// Grants are never folded.
	for range 3 {
		if _, f, _ := l.AppendFolded(Record{Kind: KindIssue, GrantID: "g"}); f {
			t.Error("a grant was folded")
		}
	}
	clock.Advance(2 * time.Hour)
	waitFor(t, "the counted record", func() bool {
		return strings.Contains(strings.Join(fileLines(t, path), ""), `"folded":{"count":999`)
	})
	// After the window, the next one starts a run of its own.
	if _, f, _ := l.AppendFolded(deny(1000, 2000)); f {
		t.Error("a refusal after the window was folded")
	}
	for i := range 5 {
		l.AppendFolded(deny(1000, 3000+i))
	}
	mustClose(t, l) // writes the count of the open run
	var counted []Folded
	readFrom(openFile(t, path), path, 0, &Filter{}, func(_ []byte, r *Record) error {
		if r.Folded != nil {
			counted = append(counted, *r.Folded)
			if r.Message != "no rule allows shop.order" || r.Caller.UID != 1000 || r.RequestID != "" {
				t.Errorf("counted record %+v", r)
			}
		}
		return nil
	})
	if len(counted) != 2 || counted[0].Count != 999 || counted[1].Count != 5 || len(counted[0].RequestIDs) != maxFoldIDs {
		t.Fatalf("counted records %+v, want 999 then 5", counted)
	}
	if counted[0].First > counted[0].Last || counted[0].RequestIDs[0] != "r1" {
		t.Errorf("counted record %+v", counted[0])
	}
	if !strings.Contains(FormatRecord(&Record{Kind: KindDeny, Folded: &counted[0]}), "repeated=999") {
		t.Error("show does not say how many")
	}
}

// TestAppendFoldedForRoom: runs of a longer window still start when
// refusals each unlike the last have filled the table of runs.
func TestAppendFoldedForRoom(t *testing.T) {
	clock := newTestClock()
	path := filepath.Join(t.TempDir(), "audit.log")
	o := signedOptions(clock)
	o.FoldWindow = time.Hour
	l := openWith(t, o, path)
	// Appended from many goroutines at once, they share their fsyncs.
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < maxFoldRuns; i += 64 {
				l.AppendFolded(Record{Kind: KindDeny, Caller: &Caller{UID: 1}, Message: fmt.Sprintf("unlike %d", i)})
			}
		}()
	}
	wg.Wait()
	over := Record{Kind: KindRequest, Verb: "HELLO", Caller: &Caller{UID: 2}, Decision: "limit"}
	if _, f, err := l.AppendFoldedFor(over, 2*time.Hour); err != nil || f {
		t.Fatalf("the first past the rate: folded %v, %v", f, err)
	}
	for i := range 10 {
		if _, f, err := l.AppendFoldedFor(over, 2*time.Hour); err != nil || !f {
			t.Fatalf("repeat %d past the rate with the table full: folded %v, %v", i, f, err)
		}
	}
	mustClose(t, l)
}

// TestAppendFoldedConcurrent: repeats that come while the first of their
// run is being written fold into it; none is written on its own.
func TestAppendFoldedConcurrent(t *testing.T) {
	clock := newTestClock()
	path := filepath.Join(t.TempDir(), "audit.log")
	o := signedOptions(clock)
	o.FoldWindow = time.Hour
	l := openWith(t, o, path)
	var written, folded atomic.Int64
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				rec := Record{Kind: KindRequest, Verb: "EXPLAIN", RequestID: fmt.Sprintf("r%d_%d", g, i), Caller: &Caller{UID: 1000}, Decision: "limit"}
				_, f, err := l.AppendFolded(rec)
				switch {
				case err != nil:
					t.Error(err)
				case f:
					folded.Add(1)
				default:
					written.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if written.Load() != 1 || folded.Load() != 64*20-1 {
		t.Errorf("%d concurrent repeats: %d written, %d folded; want 1 written", 64*20, written.Load(), folded.Load())
	}
	mustClose(t, l)
}

// TestAppendFoldedFor: a run given a window of its own counts repeats for
// that long, past the log's fold window, and its count is written when
// that window ends.
func TestAppendFoldedFor(t *testing.T) {
	clock := newTestClock()
	path := filepath.Join(t.TempDir(), "audit.log")
	o := signedOptions(clock)
	o.FoldWindow = time.Second
	l := openWith(t, o, path)
	rec := Record{Kind: KindRequest, Verb: "HELLO", Caller: &Caller{UID: 1000}, Decision: "limit", Message: "past the rate"}
	if _, f, err := l.AppendFoldedFor(rec, time.Hour); err != nil || f {
		t.Fatalf("the first of a run: folded %v, %v", f, err)
	}
	clock.Advance(10 * time.Minute) // many fold windows of the log, one of the run's
	for i := range 100 {
		if _, f, err := l.AppendFoldedFor(rec, time.Hour); err != nil || !f {
			t.Fatalf("repeat %d: folded %v, %v", i, f, err)
		}
	}
	if strings.Contains(strings.Join(fileLines(t, path), ""), `"folded"`) {
		t.Error("the count was written before its window ended")
	}
	clock.Advance(time.Hour)
	waitFor(t, "the counted record", func() bool {
		return strings.Contains(strings.Join(fileLines(t, path), ""), `"folded":{"count":100`)
	})
	mustClose(t, l)
}

// BenchmarkAppendFolded: a folded refusal costs no write.
func BenchmarkAppendFolded(b *testing.B) {
	l := auditTestOpen(b, filepath.Join(b.TempDir(), "audit.log"))
	defer l.Close()
	rec := Record{Kind: KindDeny, Caller: &Caller{UID: 1000}, Message: "no"}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l.AppendFolded(rec)
	}
	b.ReportMetric(float64(l.syncs.Load())/float64(b.N), "fsyncs/op")
}

// TestAppendFoldedKeepsCut: the record AppendFolded writes at once names
// what its bounds cut, like one from Append.
func TestAppendFoldedKeepsCut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l := auditTestOpen(t, path)
	defer l.Close()
	long := strings.Repeat("x", 5000)
	if _, f, err := l.AppendFolded(Record{Kind: KindDeny, Message: long}); err != nil || f {
		t.Fatal(err, f)
	}
	if c := lastRecord(t, path).Cut["message"]; c.Size != 5000 || c.SHA256 != chainHash([]byte(long)) {
		t.Errorf("cut %+v", c)
	}
}
