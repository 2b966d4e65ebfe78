package audit

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// downSigner is the principal key behind a key service that can go down:
// while down is set, Sign fails as a transit signer does.
type downSigner struct {
	k    ed25519.PrivateKey
	down atomic.Bool
	n    atomic.Int64 // Sign calls
}

var errKeyServiceDown = errors.New("transit key service unavailable: connection refused")

func (s *downSigner) Public() crypto.PublicKey { return s.k.Public() }
func (s *downSigner) Sign(r io.Reader, msg []byte, o crypto.SignerOpts) ([]byte, error) {
	s.n.Add(1)
	if s.down.Load() {
		return nil, errKeyServiceDown
	}
	return s.k.Sign(r, msg, o)
}

func deferredOptions(s crypto.Signer) Options {
	return Options{Signer: s, Deferred: true, StartRetry: 20 * time.Millisecond,
		CheckpointEvery: 1e6, CheckpointInterval: time.Hour}
}

func waitStarted(t *testing.T, l *Log) {
	t.Helper()
	select {
	case <-l.Started():
	case <-time.After(10 * time.Second):
		t.Fatal("the open checkpoint was not written within 10 s of the signer coming back")
	}
}

// Issue 21 item 7: a start that fails (its socket could not be bound) wrote
// an open checkpoint all the same. A deferred log writes nothing until
// Start, and a log closed before Start ends as it was.
func TestDeferredOpenWritesNothingBeforeStart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	key := &downSigner{k: testKey("daemon")}
	l := openWith(t, Options{Signer: key}, path)
	if _, err := l.Append(Record{Kind: KindStart, Message: "first run"}); err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
	before, _ := os.ReadFile(path)

	for range 3 {
		l = openWith(t, deferredOptions(key), path)
		_, err := l.Append(Record{Kind: KindRequest, Verb: "HELLO"})
		var w *WaitingError
		if !errors.As(err, &w) || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Append before Start: %v, want a *WaitingError that is ErrUnavailable", err)
		}
		if _, err := l.Checkpoint(); !errors.As(err, &w) {
			t.Fatalf("Checkpoint before Start: %v", err)
		}
		if err := l.Reopen(); !errors.As(err, &w) {
			t.Fatalf("Reopen before Start: %v", err)
		}
		l.Close()
		after, _ := os.ReadFile(path)
		if !bytes.Equal(before, after) {
			t.Fatalf("a deferred log closed before Start changed the file:\nbefore %s\nafter  %s", before, after)
		}
	}
	// The log is as the first run left it: stopped cleanly.
	l = openWith(t, Options{Signer: key}, path)
	mustClose(t, l)
	for _, line := range fileLines(t, path) {
		if strings.Contains(line, `"recovered"`) {
			t.Fatalf("a run that never started left a trace: %s", line)
		}
	}
	if _, err := Verify(path, VerifyOptions{Key: testPub("daemon")}); err != nil {
		t.Fatal(err)
	}

	// A log that does not exist is not created before Start.
	fresh := filepath.Join(t.TempDir(), "audit.log")
	l = openWith(t, deferredOptions(key), fresh)
	l.Close()
	if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a deferred log closed before Start created %s: %v", fresh, err)
	}
}

// Issue 20 item 4: with its key service down the daemon exited ("sign
// checkpoint: transit key service unavailable"). A deferred log waits for
// its signer, refusing appends meanwhile, and writes its open checkpoint
// and the start record once the signer answers.
func TestDeferredStartWaitsForTheSigner(t *testing.T) {
	for _, existing := range []bool{true, false} {
		name := "new-log"
		if existing {
			name = "existing-log"
		}
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.log")
			key := &downSigner{k: testKey("daemon")}
			if existing {
				l := openWith(t, Options{Signer: key}, path)
				l.Append(Record{Kind: KindStart})
				mustClose(t, l)
			}
			key.down.Store(true)
			l := openWith(t, deferredOptions(key), path)
			defer l.Close()
			err := l.Start(Record{Kind: KindStart, Message: "pid 1, socket s"})
			var w *WaitingError
			if !errors.As(err, &w) || !errors.Is(err, errKeyServiceDown) {
				t.Fatalf("Start with the signer down: %v", err)
			}
			if _, err := l.Append(Record{Kind: KindIssue}); !errors.As(err, &w) || !strings.Contains(err.Error(), "connection refused") {
				t.Fatalf("Append while waiting: %v", err)
			}
			// It keeps trying by itself.
			calls := key.n.Load()
			deadline := time.Now().Add(10 * time.Second)
			for key.n.Load() < calls+2 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if key.n.Load() < calls+2 {
				t.Fatal("the log did not try its open checkpoint again")
			}
			key.down.Store(false)
			waitStarted(t, l)
			if _, err := l.Append(Record{Kind: KindIssue, GrantID: "g1"}); err != nil {
				t.Fatalf("Append once started: %v", err)
			}
			mustClose(t, l)
			var kinds []string
			for _, line := range fileLines(t, path) {
				var r Record
				json.Unmarshal([]byte(line), &r)
				kinds = append(kinds, r.Kind)
			}
			want := "checkpoint start issue checkpoint"
			if existing {
				want = "checkpoint start checkpoint checkpoint start issue checkpoint"
			}
			if got := strings.Join(kinds, " "); got != want {
				t.Fatalf("records %q, want %q", got, want)
			}
			if _, err := Verify(path, VerifyOptions{Key: testPub("daemon")}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Issue 20 item 4: after SIGTERM with the key service down, the stop
// checkpoint was silently missing. Now the log's last record says that it
// could not be signed, and why; the next start records the gap and the log
// verifies.
func TestUnsignedStopCheckpointIsRecorded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	key := &downSigner{k: testKey("daemon")}
	l := openWith(t, Options{Signer: key}, path)
	l.Append(Record{Kind: KindStart})
	l.Append(Record{Kind: KindIssue, GrantID: "g1"})
	key.down.Store(true)
	if err := l.Close(); err == nil {
		t.Fatal("Close reported no error although the stop checkpoint was not signed")
	}
	last := lastRecord(t, path)
	if last.Kind != KindUnsigned || !strings.Contains(last.Message, "stop checkpoint could not be signed") ||
		!strings.Contains(last.Message, "connection refused") || !strings.Contains(last.Message, "Records 2–4") {
		t.Fatalf("last record %+v", last)
	}
	key.down.Store(false)
	l = openWith(t, Options{Signer: key}, path)
	mustClose(t, l)
	found := false
	for _, line := range fileLines(t, path) {
		found = found || strings.Contains(line, "ended without its stop checkpoint")
	}
	if !found {
		t.Fatal("the next start did not record the missing stop checkpoint")
	}
	if _, err := Verify(path, VerifyOptions{Key: testPub("daemon")}); err != nil {
		t.Fatal(err)
	}
}

// A deferred log that does not exist yet still keeps a second daemon out
// until it is made: its temporary file is held locked from Open.
func TestDeferredNewLogIsHeld(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	key := &downSigner{k: testKey("daemon")}
	key.down.Store(true)
	l := openWith(t, deferredOptions(key), path)
	if _, err := deferredOptions(key).Open(path); !errors.Is(err, ErrInUse) {
		t.Fatalf("a second Open of a log being made: %v, want ErrInUse", err)
	}
	l.Start(Record{Kind: KindStart})
	key.down.Store(false)
	waitStarted(t, l)
	if _, err := deferredOptions(key).Open(path); !errors.Is(err, ErrInUse) {
		t.Fatalf("a second Open of a log just made: %v, want ErrInUse", err)
	}
	mustClose(t, l)

	// Closed before Start: nothing is left behind, and the next Open can
	// make the log.
	fresh := filepath.Join(t.TempDir(), "audit.log")
	l = openWith(t, deferredOptions(key), fresh)
	l.Close()
	if ents, _ := os.ReadDir(filepath.Dir(fresh)); len(ents) != 0 {
		t.Fatalf("files left by a log closed before Start: %v", ents)
	}
	l = openWith(t, deferredOptions(key), fresh)
	if err := l.Start(Record{Kind: KindStart}); err != nil {
		t.Fatal(err)
	}
	mustClose(t, l)
}

// The scrub checks a deferred log once its open checkpoint is written: a
// new log has no file before, which is no damage.
func TestDeferredLogIsScrubbedOnceStarted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	key := &downSigner{k: testKey("daemon")}
	key.down.Store(true)
	o := deferredOptions(key)
	o.ScrubDelay, o.ScrubInterval = time.Millisecond, time.Hour
	l := openWith(t, o, path)
	defer l.Close()
	l.Start(Record{Kind: KindStart})
	// Several attempts at the open checkpoint: far past the scrub's delay.
	deadline := time.Now().Add(10 * time.Second)
	for key.n.Load() < 6 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if runs, _ := l.ScrubRuns(); runs != 0 || l.Damage() != nil {
		t.Fatalf("scrubbed before the open checkpoint: %d runs, damage %v", runs, l.Damage())
	}
	key.down.Store(false)
	waitStarted(t, l)
	for runs, _ := l.ScrubRuns(); runs == 0 && time.Now().Before(deadline); runs, _ = l.ScrubRuns() {
		time.Sleep(5 * time.Millisecond)
	}
	if runs, _ := l.ScrubRuns(); runs == 0 || l.Damage() != nil {
		t.Fatalf("after the open checkpoint: %d scrubs, damage %v", runs, l.Damage())
	}
}
