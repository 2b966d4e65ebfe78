package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// scan is Open's check of a whole file that has no checkpoints: it returns
// the head and the offset after the last good line; a torn tail is not an
// error here.
func scan(r *bytes.Reader) (Head, int64, error) {
	v := verifier{lineKnown: true}
	var read int64
	res, err := scanFrom(r, "", 0, r.Size(), &v, &read)
	if err != nil {
		return Head{}, 0, err
	}
	return v.head(), res.good, nil
}

// testKey is the checkpoint key of the tests: a fixed seed, so that logs
// written with testClock are the same bytes in every run.
func testKey(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("parley-keyd audit test key " + name))
	return ed25519.NewKeyFromSeed(seed[:])
}

func testPub(name string) ed25519.PublicKey { return testKey(name).Public().(ed25519.PublicKey) }

// testClock is a clock that moves only when told, by a millisecond on each
// reading unless frozen, so that records have distinct, predictable times.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock {
	return &testClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// zeroReader gives log ids of zero bytes.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

var _ io.Reader = zeroReader{}

// signedOptions are Options with the test key and a test clock, and
// checkpoints only when a test asks (every 1e6 records, every hour).
func signedOptions(clock *testClock) Options {
	return Options{
		Signer:             testKey("daemon"),
		Now:                clock.Now,
		Rand:               zeroReader{},
		CheckpointEvery:    1e6,
		CheckpointInterval: time.Hour,
	}
}

func openWith(t testing.TB, o Options, path string) *Log {
	t.Helper()
	l, err := o.Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

func mustClose(t testing.TB, l *Log) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// fileLines reads a file as lines, each with its newline.
func fileLines(t testing.TB, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

func writeLines(t testing.TB, path string, lines []string) {
	t.Helper()
	fi, err := os.Stat(path)
	mode := os.FileMode(0o600)
	if err == nil {
		mode = fi.Mode().Perm()
		os.Chmod(path, 0o600)
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, mode)
}

// copyDir copies the regular files of src into a new folder.
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := e.Info()
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, fi.Mode().Perm()|0o200); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(dst, e.Name()), fi.Mode().Perm())
	}
	return dst
}

// barrier returns once the writer goroutine has finished what it started
// before: the commit of an Append that returned, and the checkpoints and
// segments that commit made due.
func barrier(t testing.TB, l *Log) {
	t.Helper()
	if err := l.do(func() error { return nil }); err != nil {
		t.Fatal(err)
	}
}
