package audit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// appenders runs n goroutines that append records until stopped, and
// remembers the seq and request id of every append that succeeded.
type appenders struct {
	l       *Log
	stop    atomic.Bool
	wg      sync.WaitGroup
	mu      sync.Mutex
	acked   map[uint64]string
	errs    []error
	lastErr error // guarded by mu
	fails   atomic.Int64
}

func startAppenders(l *Log, n int) *appenders {
	a := &appenders{l: l, acked: map[uint64]string{}}
	for g := range n {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			for i := 0; !a.stop.Load(); i++ {
				id := fmt.Sprintf("r-%d-%d", g, i)
				seq, err := l.Append(Record{Kind: KindIssue, RequestID: id, GrantID: "g"})
				a.mu.Lock()
				if err == nil {
					a.acked[seq] = id
				} else {
					a.fails.Add(1)
					a.lastErr = err
					if !errors.Is(err, ErrUnavailable) {
						a.errs = append(a.errs, err)
					}
				}
				a.mu.Unlock()
				if err != nil {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	return a
}

func (a *appenders) ackedCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.acked)
}

func (a *appenders) halt(t *testing.T) {
	a.stop.Store(true)
	a.wg.Wait()
	for _, err := range a.errs {
		t.Errorf("append failed with an error that is not ErrUnavailable: %v", err)
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// allRecords reads every record of every segment of the log at path, by
// seq.
func allRecords(t *testing.T, path string) map[uint64]Record {
	t.Helper()
	out := map[uint64]Record{}
	segs, _ := Segments(path)
	for _, s := range segs {
		p := s.Path
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		readFrom(f, p, 0, &Filter{}, func(_ []byte, r *Record) error {
			out[r.Seq] = *r
			return nil
		})
		f.Close()
	}
	return out
}

// TestVanishUnderWriter moves, deletes, truncates, replaces or appends to
// the log under 32 goroutines that keep appending (issue 12: a log renamed
// or deleted under the daemon went unnoticed, and one run left 3 716 grants
// with no record in any file). Every append that succeeded must have its
// record in a file the log names; once the change is there, appends fail
// with a *VanishedError until Reopen; after Reopen they succeed again in a
// new segment that says what happened.
func TestVanishUnderWriter(t *testing.T) {
	tests := []struct {
		name string
		act  func(t *testing.T, path string)
		// lossless: every acknowledged record is in the log's files after
		// Reopen, and Verify passes across them.
		lossless bool
		// what the refusals say, alternatives separated by "|"; the
		// first is what the recovered record says (Reopen looks at the
		// path once the change is complete).
		what string
	}{
		{"renamed", func(t *testing.T, path string) {
			if err := os.Rename(path, path+".1"); err != nil {
				t.Fatal(err)
			}
		}, true, "was renamed or moved away"},
		{"deleted", func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}, true, "was deleted"},
		{"renamed-and-recreated", func(t *testing.T, path string) {
			// logrotate's default: move, then create an empty file.
			if err := os.Rename(path, path+".1"); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}, true, "another file is at its path|was renamed or moved away"},
		// (An append between the rename and the new file finds no file
		// at the path, and that is the refusal it keeps giving.)
		{"copytruncate", func(t *testing.T, path string) {
			// logrotate's copytruncate: records written between the copy
			// and the truncation are lost; that is why docs/audit.md
			// forbids it. What the log guarantees: nothing more is written
			// to the truncated file until Reopen.
			in, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			out, _ := os.Create(path + ".1")
			io.Copy(out, in)
			in.Close()
			out.Close()
			if err := os.Truncate(path, 0); err != nil {
				t.Fatal(err)
			}
		}, false, "was truncated"},
		{"appended-by-another-process", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString(`{"seq":999999,"prev":"x","time":"2030-01-01T00:00:00Z","kind":"issue"}` + "\n")
			f.Close()
		}, false, "did not write"},
	}
	for _, tt := range tests {
		for _, pre := range []int64{0, 32 << 10} {
			t.Run(fmt.Sprintf("%s/preallocate=%d", tt.name, pre), func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, "audit.log")
				o := signedOptions(newTestClock())
				o.CheckpointEvery = 100
				o.Preallocate = pre
				l := openWith(t, o, path)
				a := startAppenders(l, 32)
				waitFor(t, "300 appends", func() bool { return a.ackedCount() >= 300 })
				tt.act(t, path)
				before := a.ackedCount()
				waitFor(t, "appends to fail", func() bool { return a.fails.Load() > 50 })
				var ve *VanishedError
				a.mu.Lock()
				err := a.lastErr
				a.mu.Unlock()
				says := func(what string) bool {
					for _, w := range strings.Split(tt.what, "|") {
						if strings.Contains(what, w) {
							return true
						}
					}
					return false
				}
				if !errors.As(err, &ve) || !errors.Is(err, ErrUnavailable) || !says(ve.What) {
					t.Fatalf("appends fail with %v, want a *VanishedError saying %q", err, tt.what)
				}
				// Refused for as long as nobody resolves it: no append succeeds.
				stalled := a.ackedCount()
				time.Sleep(50 * time.Millisecond)
				if n := a.ackedCount(); n != stalled {
					t.Fatalf("%d appends succeeded while the log was gone", n-stalled)
				}
				t.Logf("%d appends before the change, %d until refused", before, stalled)

				if err := l.Reopen(); err != nil {
					t.Fatalf("Reopen: %v", err)
				}
				waitFor(t, "appends after Reopen", func() bool { return a.ackedCount() > stalled+100 })
				a.halt(t)
				mustClose(t, l)

				recs := allRecords(t, path)
				missing := 0
				for seq, id := range a.acked {
					r, ok := recs[seq]
					if !ok {
						missing++
					} else if r.RequestID != id {
						t.Errorf("record %d was acknowledged as %s, but the log holds %s there", seq, id, r.RequestID)
					}
				}
				var note *Record
				for _, r := range recs {
					if r.Kind == KindRecovered && strings.Contains(r.Message, strings.Split(tt.what, "|")[0]) {
						note = &r
					}
				}
				if note == nil {
					for _, r := range recs {
						if r.Kind == KindRecovered {
							t.Logf("recovered: %s", r.Message)
						}
					}
					t.Errorf("no recovered record says %q", strings.Split(tt.what, "|")[0])
				}
				if tt.lossless {
					if missing > 0 {
						t.Errorf("%d of %d acknowledged records are in no file of the log", missing, len(a.acked))
					}
					if _, err := Verify(path, VerifyOptions{Key: testPub("daemon")}); err != nil {
						t.Errorf("verify across segments: %v", err)
					}
				} else {
					// The new segment stands on its own, and its first record
					// covers the last record written before the change.
					rep, err := Verify(path, VerifyOptions{Key: testPub("daemon"), Segment: true})
					if err != nil {
						t.Fatalf("verify the new segment: %v", err)
					}
					if rep.First != uint64(stalled)+0 && rep.First < uint64(stalled) {
						t.Errorf("new segment starts at %d", rep.First)
					}
					inCopy := 0
					if f, err := os.Open(path + ".1"); err == nil {
						readFrom(f, path, 0, &Filter{}, func(_ []byte, r *Record) error {
							if id, ok := a.acked[r.Seq]; ok && id == r.RequestID {
								if _, inLog := recs[r.Seq]; !inLog {
									inCopy++
								}
							}
							return nil
						})
						f.Close()
					}
					t.Logf("%d of %d acknowledged records are not in the log's files (%s), %d of them in logrotate's copy", missing, len(a.acked), tt.name, inCopy)
					_, err = Verify(path, VerifyOptions{Key: testPub("daemon")})
					if err == nil {
						t.Errorf("verify across segments passes, but records were removed or added under the daemon")
					} else {
						t.Logf("verify across segments: %v", err)
					}
				}
			})
		}
	}
}

// TestVanishedResolvesWhenBack: a log renamed and renamed back before the
// next append is the same file with the same length; appends go on.
func TestVanishedResolvesWhenBack(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	l := openWith(t, signedOptions(newTestClock()), path)
	defer mustClose(t, l)
	auditTestAppend(t, l, Record{Kind: KindStart})
	os.Rename(path, path+".x")
	if _, err := l.Append(Record{Kind: KindIssue}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("append to a renamed log: %v", err)
	}
	os.Rename(path+".x", path)
	auditTestAppend(t, l, Record{Kind: KindIssue})
	if err := l.Reopen(); err != nil {
		t.Fatalf("Reopen of a log in place: %v", err)
	}
	if segs, _ := Segments(path); len(segs) != 1 {
		t.Errorf("Reopen of a log in place made segments: %v", segs)
	}
}

// TestReopenRefusesForeignFile: Reopen does not replace a file with content
// that someone else put at the log's path.
func TestReopenRefusesForeignFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	l := openWith(t, signedOptions(newTestClock()), path)
	defer l.Close()
	auditTestAppend(t, l, Record{Kind: KindStart})
	os.Rename(path, path+".1")
	os.WriteFile(path, []byte("not yours\n"), 0o600)
	if err := l.Reopen(); err == nil || !strings.Contains(err.Error(), "another file of 10 bytes") {
		t.Fatalf("Reopen: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "not yours\n" {
		t.Errorf("the foreign file was changed: %q", b)
	}
}
