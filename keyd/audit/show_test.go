package audit

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// showFixture writes 60 issue records over three segments, a minute apart.
func showFixture(t *testing.T) (string, *testClock) {
	clock := newTestClock()
	path := filepath.Join(t.TempDir(), "audit.log")
	o := signedOptions(clock)
	o.SegmentSize = 6 << 10
	l := openWith(t, o, path)
	for i, rec := range auditTestRecords(60) {
		rec.GrantID = fmt.Sprintf("g-%d", i%7)
		auditTestAppend(t, l, rec)
		clock.Advance(time.Minute)
	}
	mustClose(t, l)
	if segs, _ := Segments(path); len(segs) < 3 {
		t.Fatalf("fixture has %d segments", len(segs))
	}
	return path, clock
}

func TestReadFilters(t *testing.T) {
	path, _ := showFixture(t)
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		f    Filter
		want func(r *Record) bool
	}{
		{"ok/all", Filter{}, func(r *Record) bool { return true }},
		{"ok/grant", Filter{GrantID: "g-3"}, func(r *Record) bool { return r.GrantID == "g-3" }},
		{"ok/since-until", Filter{Since: start.Add(10 * time.Minute), Until: start.Add(20 * time.Minute)}, func(r *Record) bool {
			tm, _ := time.Parse(time.RFC3339Nano, r.Time)
			return !tm.Before(start.Add(10*time.Minute)) && !tm.After(start.Add(20*time.Minute))
		}},
		{"ok/from-seq", Filter{FromSeq: 40}, func(r *Record) bool { return r.Seq >= 40 }},
	}
	var all []Record
	Read(path, Filter{}, func(_ []byte, r *Record) error { all = append(all, *r); return nil })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []uint64
			if err := Read(path, tt.f, func(_ []byte, r *Record) error { got = append(got, r.Seq); return nil }); err != nil {
				t.Fatal(err)
			}
			var want []uint64
			for i := range all {
				if tt.want(&all[i]) {
					want = append(want, all[i].Seq)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) || len(got) == 0 {
				t.Errorf("got %v\nwant %v", got, want)
			}
		})
	}
}

// TestShowLogJSON: --json prints each record as stored, so hashes can be
// checked from the output.
func TestShowLogJSON(t *testing.T) {
	path, _ := showFixture(t)
	var out bytes.Buffer
	if err := ShowLog(context.Background(), path, &out, ShowOptions{JSON: true}); err != nil {
		t.Fatal(err)
	}
	var stored []string
	segs, _ := Segments(path)
	for _, s := range segs {
		stored = append(stored, fileLines(t, s.Path)...)
	}
	if out.String() != strings.Join(stored, "") {
		t.Error("JSON output differs from the stored lines")
	}
	out.Reset()
	ShowLog(context.Background(), path, &out, ShowOptions{Filter: Filter{GrantID: "g-2"}})
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if !strings.Contains(line, " grant=g-2 ") || !strings.HasPrefix(line, "#") {
			t.Errorf("text line %q", line)
		}
	}
}

// TestFollow: Follow prints what is there, then records as they come,
// across a new segment.
func TestFollow(t *testing.T) {
	clock := newTestClock()
	path := filepath.Join(t.TempDir(), "audit.log")
	o := signedOptions(clock)
	o.SegmentSize = 4 << 10
	l := openWith(t, o, path)
	auditTestAppend(t, l, Record{Kind: KindStart})
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var seen []string
	done := make(chan error)
	go func() {
		done <- Follow(ctx, path, Filter{}, 5*time.Millisecond, func(_ []byte, r *Record) error {
			mu.Lock()
			seen = append(seen, r.RequestID)
			mu.Unlock()
			return nil
		})
	}()
	for i := range 40 {
		auditTestAppend(t, l, Record{Kind: KindIssue, RequestID: fmt.Sprintf("f%d", i)})
	}
	waitFor(t, "all records", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(strings.Join(seen, ","), "f39")
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	var ids []string
	for _, id := range seen {
		if strings.HasPrefix(id, "f") {
			ids = append(ids, id)
		}
	}
	for i, id := range ids {
		if id != fmt.Sprintf("f%d", i) {
			t.Fatalf("followed %v", ids)
		}
	}
	if segs, _ := Segments(path); len(segs) < 2 {
		t.Errorf("only %d segment: the follow did not cross a rotation", len(segs))
	}
}
