package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
)

func appendMany(t testing.TB, l *Log, n, par int) {
	t.Helper()
	rec := auditTestRecords(1)[0]
	var wg sync.WaitGroup
	errs := make(chan error, par)
	for g := range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += par {
				if _, err := l.Append(rec); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestRotation: segments start by size; each begins with a checkpoint that
// covers the one before; Verify runs across them, on one alone, and on one
// given its predecessor's checkpoint; a segment removed from the middle is
// named.
func TestRotation(t *testing.T) {
	for _, pre := range []int64{0, 4 << 10} {
		t.Run(fmt.Sprintf("preallocate=%d", pre), func(t *testing.T) { testRotation(t, pre) })
	}
}

func testRotation(t *testing.T, pre int64) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	o := signedOptions(newTestClock())
	o.Preallocate = pre
	o.SegmentSize = 8 << 10
	o.CheckpointEvery = 10
	l := openWith(t, o, path)
	for _, rec := range auditTestRecords(120) {
		auditTestAppend(t, l, rec)
	}
	mustClose(t, l)
	segs, err := Segments(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) < 5 {
		t.Fatalf("%d segments, want several", len(segs))
	}
	pub := testPub("daemon")
	rep, err := Verify(path, VerifyOptions{Key: pub})
	if err != nil {
		t.Fatal(err)
	}
	if rep.First != 1 || len(rep.Files) != len(segs) || !rep.Stopped {
		t.Errorf("report %+v", rep)
	}
	for i, s := range segs {
		fi, _ := os.Stat(s.Path)
		if !s.Active && (fi.Mode().Perm() != 0o400 || fi.Size() < o.SegmentSize) {
			t.Errorf("closed segment %s: mode %v, size %d", s.Path, fi.Mode().Perm(), fi.Size())
		}
		one, err := Verify(s.Path, VerifyOptions{Key: pub, Segment: true})
		if err != nil {
			t.Fatalf("segment %s alone: %v", s.Path, err)
		}
		if i == 0 {
			continue
		}
		if !s.Active && one.First != s.First {
			t.Errorf("segment %s starts at %d", s.Path, one.First)
		}
		// Its first record is the checkpoint of the one before.
		var first Record
		json.Unmarshal([]byte(fileLines(t, s.Path)[0]), &first)
		if first.Checkpoint == nil || first.Checkpoint.Reason != checkpoint.ReasonRotate {
			t.Fatalf("segment %s begins with %+v", s.Path, first)
		}
		if _, err := Verify(s.Path, VerifyOptions{Key: pub, Segment: true, After: first.Checkpoint}); err != nil {
			t.Errorf("segment %s after its checkpoint: %v", s.Path, err)
		}
		other := *first.Checkpoint
		other.Seq--
		signCheckpoint(&other, testKey("daemon"))
		if _, err := Verify(s.Path, VerifyOptions{Key: pub, Segment: true, After: &other}); err == nil {
			t.Errorf("segment %s verified after a checkpoint it does not follow", s.Path)
		}
	}
	// A segment removed from the middle.
	if err := os.Remove(segs[2].Path); err != nil {
		t.Fatal(err)
	}
	_, err = Verify(path, VerifyOptions{Key: pub})
	var ae *Error
	if !errors.As(err, &ae) || ae.File != filepath.Base(segs[3].Path) || ae.Line != 1 || !strings.Contains(ae.Detail, fmt.Sprintf("want %d", segs[2].First)) {
		t.Errorf("verify with a segment missing: %v", err)
	}
}

func TestRotationByAge(t *testing.T) {
	clock := newTestClock()
	path := filepath.Join(t.TempDir(), "audit.log")
	o := signedOptions(clock)
	o.SegmentAge = 24 * time.Hour
	l := openWith(t, o, path)
	defer mustClose(t, l)
	auditTestAppend(t, l, Record{Kind: KindStart})
	clock.Advance(25 * time.Hour)
	auditTestAppend(t, l, Record{Kind: KindIssue})
	barrier(t, l)
	if segs, _ := Segments(path); len(segs) != 2 {
		t.Fatalf("segments after a day: %v", segs)
	}
	// The new segment is young; a record does not start another.
	auditTestAppend(t, l, Record{Kind: KindIssue})
	barrier(t, l)
	if segs, _ := Segments(path); len(segs) != 2 {
		t.Fatalf("segments: %v", segs)
	}
}

// TestRetentionWaitsForWitness: an old closed segment goes only once every
// witness has a checkpoint after it.
func TestRetentionWaitsForWitness(t *testing.T) {
	clock := newTestClock()
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	wdir := filepath.Join(t.TempDir(), "not-yet")
	o := signedOptions(clock)
	o.SegmentSize = 4 << 10
	o.Retain = time.Hour
	o.Witnesses = []Witness{FileWitness{Path: filepath.Join(wdir, "checkpoints")}}
	l := openWith(t, o, path)
	defer mustClose(t, l)
	for _, rec := range auditTestRecords(40) {
		auditTestAppend(t, l, rec)
	}
	barrier(t, l)
	segs, _ := Segments(path)
	if len(segs) < 3 {
		t.Fatalf("segments: %d", len(segs))
	}
	old := time.Now().Add(-2 * time.Hour)
	for _, s := range segs[:len(segs)-1] {
		os.Chtimes(s.Path, old, old)
	}
	// The witness cannot take checkpoints (its folder is missing): nothing
	// is removed, however old.
	clock.Advance(2 * time.Hour)
	l.do(func() error { l.retain(); return nil })
	barrier(t, l)
	if after, _ := Segments(path); len(after) < len(segs) {
		t.Fatalf("segments removed while no witness had a checkpoint after them: %d → %d", len(segs), len(after))
	}
	os.Mkdir(wdir, 0o700)
	if _, err := l.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the witness to take the checkpoint", func() bool { return l.wit.out(l) > 0 })
	l.do(func() error { l.retain(); return nil })
	barrier(t, l)
	after, _ := Segments(path)
	if len(after) != 1 || !after[0].Active {
		t.Fatalf("after the witness has a later checkpoint: %v", after)
	}
	rep, err := Verify(path, VerifyOptions{Key: testPub("daemon")})
	if err != nil {
		t.Fatalf("verify after retention: %v", err)
	}
	if rep.First <= 1 {
		t.Errorf("report starts at %d", rep.First)
	}
}

// TestInterruptedRotation: a crash after the active segment got its closed
// name and before the new segment took the path leaves one file under both
// names; Open goes on with it.
func TestInterruptedRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	l := openWith(t, signedOptions(newTestClock()), path)
	auditTestAppend(t, l, Record{Kind: KindStart})
	mustClose(t, l)
	if err := os.Link(path, SegmentName(path, 1)); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, ".audit.log.new"), []byte("half a segment"), 0o600)
	l = openWith(t, signedOptions(newTestClock()), path)
	auditTestAppend(t, l, Record{Kind: KindIssue})
	mustClose(t, l)
	if segs, _ := Segments(path); len(segs) != 1 {
		t.Errorf("segments: %v", segs)
	}
	if _, err := Verify(path, VerifyOptions{Key: testPub("daemon")}); err != nil {
		t.Error(err)
	}
}

// TestActiveSegmentMissing: closed segments without the active one mean
// the active one was deleted; Open must not start a new chain there.
func TestActiveSegmentMissing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	o := signedOptions(newTestClock())
	o.SegmentSize = 2 << 10
	l := openWith(t, o, path)
	for _, rec := range auditTestRecords(10) {
		auditTestAppend(t, l, rec)
	}
	mustClose(t, l)
	os.Remove(path)
	if l, err := o.Open(path); err == nil || !strings.Contains(err.Error(), "closed segments of it remain") {
		if l != nil {
			l.Close()
		}
		t.Fatalf("Open without the active segment: %v", err)
	}
	if _, err := Verify(path, VerifyOptions{Key: testPub("daemon")}); err == nil {
		t.Error("verify without the active segment passed")
	}
}

// TestLegacyLog: a log written before checkpoints is read whole once, gets
// a checkpoint, and goes on in a new segment; the next Open reads only that.
func TestLegacyLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	l := auditTestOpen(t, path) // no signer: the old format
	for _, rec := range auditTestRecords(50) {
		auditTestAppend(t, l, rec)
	}
	mustClose(t, l)
	l = openWith(t, signedOptions(newTestClock()), path)
	auditTestAppend(t, l, Record{Kind: KindStart})
	mustClose(t, l)
	segs, _ := Segments(path)
	if len(segs) != 2 || segs[0].First != 1 {
		t.Fatalf("segments after migration: %v", segs)
	}
	rep, err := Verify(path, VerifyOptions{Key: testPub("daemon")})
	if err != nil {
		t.Fatal(err)
	}
	if rep.First != 1 || rep.Head.Seq < 53 {
		t.Errorf("report %+v", rep)
	}
	l = openWith(t, signedOptions(newTestClock()), path)
	if l.openRead > 8<<10 {
		t.Errorf("Open read %d bytes of a migrated log", l.openRead)
	}
	mustClose(t, l)
}

// TestOpenReadsOnlyTheTail: Open's cost does not grow with the log. It
// reads the last checkpoint and what follows; the bytes read at 1 000 and
// at 20 000 records are within the same bound (issue 12: start-up read
// the whole log, about 1 µs a record).
func TestOpenReadsOnlyTheTail(t *testing.T) {
	read := map[int]int64{}
	for _, n := range []int{1000, 20000} {
		path := filepath.Join(t.TempDir(), "audit.log")
		o := Options{Signer: testKey("daemon"), CheckpointEvery: 1000}
		l := openWith(t, o, path)
		appendMany(t, l, n, 256)
		l.Close()
		// Kill -9 style: a tail after the last checkpoint.
		l = openWith(t, Options{Signer: testKey("daemon"), CheckpointEvery: 1e9}, path)
		appendMany(t, l, 700, 64)
		l.do(func() error { return errors.New("stop") }) // nothing; the writer is idle
		l.quiet.Store(true)
		l.closeQuiet()

		l = openWith(t, o, path)
		read[n] = l.openRead
		mustClose(t, l)
		fi, _ := os.Stat(path)
		t.Logf("%d records (%d bytes): Open read %d bytes", n, fi.Size(), read[n])
	}
	// The 700 records after the last checkpoint, read backwards to find
	// it and forwards to check them, about 520 bytes each, and a chunk
	// of 64 KiB either way.
	const bound = 2*700*550 + 2*64<<10
	for n, r := range read {
		if r > bound {
			t.Errorf("Open of %d records read %d bytes, more than %d", n, r, bound)
		}
	}
	if d := read[20000] - read[1000]; d > 16<<10 || d < -16<<10 {
		t.Errorf("Open read %d bytes more at 20 000 records than at 1 000", d)
	}
}

// TestUnsignedOpenOfSignedLog: a writer without the signer must not append
// to a signed log (its records would follow the stop checkpoint).
func TestUnsignedOpenOfSignedLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l := openWith(t, signedOptions(newTestClock()), path)
	mustClose(t, l)
	if l, err := Open(path); err == nil || !strings.Contains(err.Error(), "only a writer with its signer") {
		if l != nil {
			l.Close()
		}
		t.Fatalf("Open without a signer: %v", err)
	}
}
