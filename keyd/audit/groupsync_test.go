package audit

import (
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestGroupCommitAnswersAfterSync pins what the group commit keeps however
// it is organised: no appender is answered before its group's fdatasync has
// returned, and when that sync fails every appender of the group gets the
// error and none of its records is in the log. Many appenders race: the
// first group's sync is held until all the others are queued behind it, so
// that they form the second group, whose sync fails.
func TestGroupCommitAnswersAfterSync(t *testing.T) {
	const appenders = 32
	var (
		armed    atomic.Bool
		calls    atomic.Int32
		returned atomic.Bool // the held sync has returned
		release  = make(chan struct{})
	)
	orig := commitSync
	commitSync = func(fd int) error {
		if !armed.Load() {
			return orig(fd)
		}
		switch calls.Add(1) {
		case 1:
			<-release
			err := orig(fd)
			returned.Store(true)
			return err
		case 2:
			return syscall.EIO
		}
		return orig(fd)
	}
	t.Cleanup(func() { commitSync = orig })

	path := filepath.Join(t.TempDir(), "audit.log")
	l := openWith(t, Options{Signer: testKey("daemon"), Preallocate: 16 << 10}, path)
	waitAhead(t, l)
	head := l.Head()
	rec := auditTestRecords(1)[0]
	armed.Store(true)

	type answer struct {
		seq   uint64
		err   error
		early bool // answered with success before the held sync returned
	}
	answers := make(chan answer, appenders)
	var wg sync.WaitGroup
	first := make(chan struct{})
	start := func() {
		defer wg.Done()
		seq, err := l.Append(rec)
		answers <- answer{seq, err, err == nil && !returned.Load()}
	}
	wg.Add(1)
	go func() { close(first); start() }()
	<-first
	// The first record's sync is held: wait for it to be reached.
	deadline := time.Now().Add(10 * time.Second)
	for calls.Load() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the first group's sync was never reached")
		}
		time.Sleep(time.Millisecond)
	}
	for i := 1; i < appenders; i++ {
		wg.Add(1)
		go start()
	}
	for {
		l.pmu.Lock()
		n := len(l.pending)
		l.pmu.Unlock()
		if n == appenders-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d appenders queued behind the held sync", n, appenders-1)
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case a := <-answers:
		t.Fatalf("an appender was answered (seq %d, %v) while its group's sync was held", a.seq, a.err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	wg.Wait()
	close(answers)
	var ok, failed int
	for a := range answers {
		if a.early {
			t.Errorf("seq %d was answered before its group's sync returned", a.seq)
		}
		switch {
		case a.err == nil:
			ok++
			if a.seq != head.Seq+1 {
				t.Errorf("the held group's record has seq %d, want %d", a.seq, head.Seq+1)
			}
		case errors.Is(a.err, syscall.EIO) && errors.Is(a.err, ErrUnavailable):
			failed++
			if a.seq != 0 {
				t.Errorf("a failed record was given seq %d", a.seq)
			}
		default:
			t.Errorf("append: %v, want success or EIO", a.err)
		}
	}
	if ok != 1 || failed != appenders-1 {
		t.Errorf("%d appenders succeeded and %d got the failed sync's error; want 1 and %d (the whole second group)", ok, failed, appenders-1)
	}
	if calls.Load() != 2 {
		t.Errorf("%d group syncs for two groups", calls.Load())
	}
	// Nothing of the failed group is in the log: the next record follows
	// the held group's.
	seq, err := l.Append(rec)
	if err != nil {
		t.Fatalf("append after the failed sync: %v", err)
	}
	if seq != head.Seq+2 {
		t.Errorf("the record after the failed group has seq %d, want %d", seq, head.Seq+2)
	}
	mustClose(t, l)
	if h := auditTestVerifyFile(t, path); h.Seq <= seq {
		t.Errorf("log ends at seq %d, want past %d", h.Seq, seq)
	}
}
