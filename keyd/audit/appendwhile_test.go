package audit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// TestAppendWhileBetweenWriteAndSync: the caller's work runs once its
// record is in the file and before the fsync that makes it durable, on
// both write paths (preallocated in place, and appended), and the record
// is durable when AppendWhile returns.
func TestAppendWhileBetweenWriteAndSync(t *testing.T) {
	for _, pre := range []int64{16 << 10, 0} {
		t.Run(fmt.Sprintf("preallocate=%d", pre), func(t *testing.T) {
			var armed, ran, syncedBefore atomic.Bool
			orig, origAppend := commitSync, appendSync
			commitSync = func(fd int) error {
				if armed.Load() && !ran.Load() {
					syncedBefore.Store(true)
				}
				return orig(fd)
			}
			appendSync = func(f *os.File) error {
				if armed.Load() && !ran.Load() {
					syncedBefore.Store(true)
				}
				return origAppend(f)
			}
			t.Cleanup(func() { commitSync, appendSync = orig, origAppend })
			path := filepath.Join(t.TempDir(), "audit.log")
			l := openWith(t, Options{Signer: testKey("daemon"), Preallocate: pre}, path)
			if pre > 0 {
				waitAhead(t, l)
			}
			waitIdle(t, l)
			rec := auditTestRecords(1)[0]
			rec.RequestID = "r_while"
			var inFile bool
			calls := 0
			armed.Store(true)
			seq, err := l.AppendWhile(rec, func() {
				calls++
				b, err := os.ReadFile(path)
				inFile = err == nil && bytes.Contains(b, []byte(`"r_while"`))
				ran.Store(true)
			})
			armed.Store(false)
			if err != nil {
				t.Fatal(err)
			}
			if calls != 1 || !inFile {
				t.Fatalf("during ran %d times; saw its record in the file: %v", calls, inFile)
			}
			if syncedBefore.Load() {
				t.Error("the record's fsync ran before during")
			}
			mustClose(t, l)
			if h := auditTestVerifyFile(t, path); h.Seq < seq {
				t.Errorf("log ends at seq %d, want at least %d", h.Seq, seq)
			}
		})
	}
}

// waitIdle waits until l has nothing queued and nothing being committed
// (the open checkpoint, the zeros written ahead), so that the next append
// commits at once.
func waitIdle(t *testing.T, l *Log) {
	t.Helper()
	waitFor(t, "the log to go idle", l.idle)
}

// TestAppendWhileBusyRunsFirst: on a log that is committing, during runs
// before the record is queued, so that the record joins a later group as a
// plain Append's would, rather than a smaller group of its own.
func TestAppendWhileBusyRunsFirst(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l := openWith(t, Options{Signer: testKey("daemon")}, path)
	waitIdle(t, l)
	l.wmu.Lock() // a commit in progress
	rec := auditTestRecords(1)[0]
	rec.RequestID = "r_busy"
	var queued bool
	done := make(chan error, 1)
	go func() {
		_, err := l.AppendWhile(rec, func() {
			l.pmu.Lock()
			queued = len(l.pending) > 0
			l.pmu.Unlock()
		})
		done <- err
	}()
	// The appender queues its record after during; once it is queued,
	// the commit in progress ends and tells it to lead.
	waitFor(t, "the record to be queued", func() bool {
		l.pmu.Lock()
		defer l.pmu.Unlock()
		return len(l.pending) == 1
	})
	l.unlockWriter()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if queued {
		t.Error("during ran with the record already queued on a busy log")
	}
	mustClose(t, l)
}

// TestAppendWhileRunsOnce: whatever happens to the record (committed by
// its own appender or by another, a failed sync, a closed log), during runs
// exactly once, on the appender's goroutine, before AppendWhile returns.
func TestAppendWhileRunsOnce(t *testing.T) {
	t.Run("concurrent", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "audit.log")
		l := openWith(t, Options{Signer: testKey("daemon"), Preallocate: 16 << 10}, path)
		const appenders = 64
		var wg sync.WaitGroup
		errs := make(chan error, appenders)
		for i := range appenders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec := auditTestRecords(1)[0]
				rec.RequestID = fmt.Sprintf("r_%d", i)
				n := 0
				_, err := l.AppendWhile(rec, func() { n++ })
				if err != nil || n != 1 {
					errs <- fmt.Errorf("appender %d: during ran %d times, %v", i, n, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		mustClose(t, l)
		if h := auditTestVerifyFile(t, path); h.Seq < appenders {
			t.Errorf("log ends at seq %d, want at least %d", h.Seq, appenders)
		}
	})
	t.Run("failed-sync", func(t *testing.T) {
		var armed atomic.Bool
		orig := commitSync
		commitSync = func(fd int) error {
			if armed.Load() {
				return syscall.EIO
			}
			return orig(fd)
		}
		t.Cleanup(func() { commitSync = orig })
		l := openWith(t, Options{Signer: testKey("daemon"), Preallocate: 16 << 10}, filepath.Join(t.TempDir(), "audit.log"))
		waitAhead(t, l)
		armed.Store(true)
		n := 0
		_, err := l.AppendWhile(auditTestRecords(1)[0], func() { n++ })
		armed.Store(false)
		if !errors.Is(err, syscall.EIO) || n != 1 {
			t.Fatalf("during ran %d times; append: %v, want EIO", n, err)
		}
		mustClose(t, l)
	})
	t.Run("closed", func(t *testing.T) {
		l := openWith(t, Options{}, filepath.Join(t.TempDir(), "audit.log"))
		mustClose(t, l)
		n := 0
		if _, err := l.AppendWhile(auditTestRecords(1)[0], func() { n++ }); !errors.Is(err, ErrClosed) || n != 1 {
			t.Fatalf("during ran %d times; append: %v, want ErrClosed", n, err)
		}
	})
}
