package audit

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestReadersRefuseAPipe: root's audit show and audit verify read the log
// as the daemon's user, after a check of the folder that refuses a named
// pipe; but that user may swap a pipe in right after the check (an inotify
// watch on the folder tells it when). Opening a pipe for reading waits for
// a writer for ever, and the command, which catches SIGINT for --follow,
// hung with it. Every reader of a log file opens it without waiting and
// refuses anything but a regular file.
func TestReadersRefuseAPipe(t *testing.T) {
	for _, which := range []string{"active", "closed"} {
		dir := t.TempDir()
		path := filepath.Join(dir, "audit.log")
		l, err := Options{Preallocate: 4 << 10}.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		l.Append(Record{Kind: KindStart})
		l.Close()
		pipe := path
		if which == "closed" {
			pipe = SegmentName(path, 1)
		}
		os.Remove(pipe)
		if err := syscall.Mkfifo(pipe, 0o600); err != nil {
			t.Fatal(err)
		}
		for name, read := range map[string]func() error{
			"Read":   func() error { return Read(path, Filter{}, func([]byte, *Record) error { return nil }) },
			"Verify": func() error { _, err := Verify(path, VerifyOptions{}); return err },
			"Follow": func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				return Follow(ctx, path, Filter{}, 0, func([]byte, *Record) error { return nil })
			},
		} {
			done := make(chan error, 1)
			go func() { done <- read() }()
			select {
			case err := <-done:
				if err == nil && name != "Follow" {
					t.Errorf("%s, %s segment a pipe: no error", which, name)
				}
			case <-time.After(10 * time.Second):
				// Unblock the reader so the test can end.
				if w, err := os.OpenFile(pipe, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					w.Close()
				}
				t.Fatalf("%s segment a pipe: %s waited for a writer", which, name)
			}
		}
	}
}
