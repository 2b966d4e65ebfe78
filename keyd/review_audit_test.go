package keyd

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// readChars is what this process has read through read(2) and friends so
// far (rchar in /proc/self/io): files and sockets alike.
func readChars(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Skipf("no /proc/self/io: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "rchar: "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Skip("no rchar in /proc/self/io")
	return 0
}

// TestAttackAuditTailReadsWholeSegment: an approver (which may be an agent
// running as the human's own user: a weak approver) follows the log with
// AUDIT {from: head+1}, the query a follower sends again and again. Each
// one makes the daemon read and JSON-decode the whole active segment (up
// to 64 MiB by default) to return nothing: an amplification a dual-role
// agent can send 64 at a time per connection, with no rate limit, to starve
// every other caller (property 7). The cost of an AUDIT should follow what
// it returns, not the size of the log.
func TestAttackAuditTailReadsWholeSegment(t *testing.T) {
	// The scrub reads the whole log in this process too: not during
	// the measurement.
	h := newHarness(t, func(c *Config, o *Options) { o.AuditOptions.ScrubDelay = time.Hour })
	log := h.srv.AuditLog()
	// About 12 MiB of records, written by 16 writers so that group commit
	// keeps it quick.
	msg := strings.Repeat("x", 2000)
	requested := []byte(`"` + strings.Repeat("y", 10000) + `"`)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if _, err := log.Append(audit.Record{Kind: audit.KindRequest, Verb: "HELLO", Message: msg, Requested: requested}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	fi, err := os.Stat(log.Path())
	if err != nil {
		t.Fatal(err)
	}
	head := log.Head().Seq
	c := h.client()
	if _, err := c.Hello(ctxT(t)); err != nil { // dial and identify first
		t.Fatal(err)
	}
	// The follower's two queries: past the head (nothing new yet), and
	// from the head (the one new record).
	for _, q := range []struct {
		from uint64
		want int
	}{{head + 100, 0}, {head, 1}} {
		before := readChars(t)
		page, err := c.Audit(ctxT(t), protocol.AuditQuery{From: q.from})
		if err != nil {
			t.Fatal(err)
		}
		read := readChars(t) - before
		// Every request leaves a record, so the page may hold a few more.
		if len(page.Records) < q.want || len(page.Records) > q.want+4 {
			t.Fatalf("from %d: page holds %d records, want about %d", q.from, len(page.Records), q.want)
		}
		t.Logf("active segment %d bytes; AUDIT from %d (head %d) read %d bytes", fi.Size(), q.from, head, read)
		if read > 1<<20 {
			t.Errorf("an AUDIT from %d that returned %d records made the daemon read %d bytes (the active segment is %d)", q.from, len(page.Records), read, fi.Size())
		}
	}
}
