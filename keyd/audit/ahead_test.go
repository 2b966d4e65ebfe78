package audit

import (
	"path/filepath"
	"testing"
)

// waitAhead returns once the writer goroutine has taken any request to
// preallocate that a commit left (and, being one goroutine, has done it
// before anything it runs next).
func waitAhead(t *testing.T, l *Log) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		barrier(t, l)
		if len(l.grow) == 0 {
			return
		}
	}
	t.Fatal("the writer never took the request to preallocate")
}

// TestReserveGrownAhead: records in sequence, as one client sends them,
// never wait for zeros to be written ahead and fsynced: the writer
// goroutine grows the reserve after the commit that left it under half,
// between requests, so that no commit on a request's path changes the
// file's size or allocation (issue 25). Without it every 26th record or so
// of a grant's size paid a 16 KiB write and an fsync that commits a new
// size, several times an fdatasync.
func TestReserveGrownAhead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	o := Options{Signer: testKey("daemon"), Preallocate: 16 << 10}
	l := openWith(t, o, path)
	rec := auditTestRecords(1)[0]
	waitAhead(t, l)
	before := l.inline.Load()
	for i := 0; i < 300; i++ { // about 150 KiB: nine reserves
		if _, err := l.Append(rec); err != nil {
			t.Fatal(err)
		}
		waitAhead(t, l)
	}
	if n := l.inline.Load() - before; n > 0 {
		t.Errorf("%d of 300 records in sequence waited for the reserve to be written: it was not grown ahead", n)
	}
	var end, off int64
	l.do(func() error { end, off = l.end, l.off; return nil })
	if end-off < o.Preallocate/2 || end-off > o.Preallocate*3/2 {
		t.Errorf("reserve after the records: %d bytes, want between %d and %d", end-off, o.Preallocate/2, o.Preallocate*3/2)
	}
	mustClose(t, l)
	auditTestVerifyFile(t, path)
}
