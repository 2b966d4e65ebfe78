package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Open opens the audit log at path with the zero Options: no checkpoints,
// no segments, no witnesses.
func Open(path string) (*Log, error) { return Options{}.Open(path) }

func auditTestOpen(t testing.TB, path string) *Log {
	t.Helper()
	l, err := Open(path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

func auditTestAppend(t testing.TB, l *Log, rec Record) uint64 {
	t.Helper()
	seq, err := l.Append(rec)
	if err != nil {
		t.Fatalf("Append(%s): %v", rec.Kind, err)
	}
	return seq
}

func auditTestRecords(n int) []Record {
	var recs []Record
	for i := range n {
		recs = append(recs, Record{
			Kind:      KindIssue,
			RequestID: fmt.Sprintf("req-%d", i+1),
			Caller:    &Caller{UID: 1000, GID: 1000, PID: int32(4000 + i), User: "agent", Exe: "/usr/bin/agent", Unit: "agent.service"},
			Holder:    "ed25519:3Ue1sJbM4YyOIX7oWo9e_ZlPCbLDBYyFU0ePhTy7jqo",
			Requested: json.RawMessage(`[{"can":["calendar.*"]},{"exp":1900000000}]`),
			Issued:    json.RawMessage(`[{"can":["calendar.*"]},{"exp":1800000000}]`),
			Decision:  "allow",
			DecidedBy: &Decider{Rule: "calendar-read"},
			GrantID:   fmt.Sprintf("g-%d", i+1),
			Expiry:    1800000000,
		})
	}
	return recs
}

func auditTestVerifyFile(t testing.TB, path string) Head {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := VerifyChain(f)
	if err != nil {
		t.Fatalf("VerifyChain: %v", err)
	}
	return h
}

func TestAuditRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l := auditTestOpen(t, path)
	want := auditTestRecords(3)
	want = append(want, Record{Kind: KindStop, Message: "bye"})
	for i, rec := range want {
		if seq := auditTestAppend(t, l, rec); seq != uint64(i+1) {
			t.Fatalf("record %d got seq %d", i+1, seq)
		}
	}
	head := l.Head()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(Record{Kind: KindStart}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: got %v, want ErrClosed", err)
	}

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %04o, want 0600", fi.Mode().Perm())
	}
	if got := auditTestVerifyFile(t, path); got != head || got.Seq != 4 {
		t.Errorf("verify head %+v, log head %+v, want seq 4", got, head)
	}

	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	var got []Record
	prev := ""
	for i, line := range lines {
		var rec Record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Prev != prev {
			t.Errorf("line %d prev %q, want %q", i+1, rec.Prev, prev)
		}
		if _, err := time.Parse(time.RFC3339Nano, rec.Time); err != nil || !strings.HasSuffix(rec.Time, "Z") {
			t.Errorf("line %d time %q is not RFC 3339 UTC", i+1, rec.Time)
		}
		prev = lineHash([]byte(line))
		got = append(got, rec)
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(Record{}, "Seq", "Prev", "Time")); diff != "" {
		t.Errorf("records differ (-want +got):\n%s", diff)
	}

	// Reopening continues the chain.
	l = auditTestOpen(t, path)
	if l.Head() != head {
		t.Errorf("reopened head %+v, want %+v", l.Head(), head)
	}
	if seq := auditTestAppend(t, l, Record{Kind: KindStart}); seq != 5 {
		t.Errorf("first append after reopen got seq %d, want 5", seq)
	}
	l.Close()
	if h := auditTestVerifyFile(t, path); h.Seq != 5 {
		t.Errorf("verify after reopen: %d records, want 5", h.Seq)
	}
}

func TestAuditAppendRefusals(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l := auditTestOpen(t, path)
	defer l.Close()
	tests := []struct {
		name string
		rec  Record
	}{
		{"fail/empty-kind", Record{}},
		{"fail/unknown-kind", Record{Kind: "approve-everything"}},
		{"fail/invalid-raw-json", Record{Kind: KindIssue, Issued: json.RawMessage(`[{"can":`)}},
		{"fail/checkpoint-kind", Record{Kind: KindCheckpoint}},
		{"fail/recovered-kind", Record{Kind: KindRecovered}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if seq, err := l.Append(tt.rec); err == nil {
				t.Fatalf("Append succeeded with seq %d", seq)
			}
		})
	}
	// A refused record takes no seq and leaves the log valid.
	if seq := auditTestAppend(t, l, Record{Kind: KindStart}); seq != 1 {
		t.Errorf("seq after refusals %d, want 1", seq)
	}
	auditTestVerifyFile(t, path)
}

// seqSet collects the seqs that concurrent appends returned, and refuses one
// returned twice.
type seqSet struct {
	mu   sync.Mutex
	seen map[uint64]bool
}

func (s *seqSet) add(seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[seq] {
		return fmt.Errorf("seq %d returned twice", seq)
	}
	if s.seen == nil {
		s.seen = map[uint64]bool{}
	}
	s.seen[seq] = true
	return nil
}

func (s *seqSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

func TestAuditConcurrentGroupCommit(t *testing.T) {
	const goroutines, each = 200, 5
	path := filepath.Join(t.TempDir(), "audit.log")
	l := auditTestOpen(t, path)
	var (
		seen seqSet
		wg   sync.WaitGroup
		errs = make(chan error, goroutines)
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				seq, err := l.Append(Record{Kind: KindIssue, RequestID: fmt.Sprintf("%d-%d", g, i)})
				if err == nil {
					err = seen.add(seq)
				}
				if err != nil {
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
	syncs := l.syncs.Load()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	const total = goroutines * each
	if seen.len() != total {
		t.Fatalf("%d distinct seqs, want %d", seen.len(), total)
	}
	if h := auditTestVerifyFile(t, path); h.Seq != total {
		t.Fatalf("verify: %d records, want %d", h.Seq, total)
	}
	t.Logf("%d appends committed with %d fsyncs", total, syncs)
	if syncs >= total {
		t.Errorf("%d fsyncs for %d appends: no group commit", syncs, total)
	}
}

func TestVerifyAuditTampering(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l := auditTestOpen(t, path)
	for _, rec := range auditTestRecords(6) {
		auditTestAppend(t, l, rec)
	}
	head := l.Head()
	l.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	orig := strings.SplitAfter(string(data), "\n")
	orig = orig[:len(orig)-1] // the empty string after the last newline

	// forged is a well-formed record claiming seq 3 that chains onto line 2.
	forged := func() string {
		rec := Record{Seq: 3, Prev: lineHash([]byte(strings.TrimSuffix(orig[1], "\n"))), Time: "2030-01-01T00:00:00Z", Kind: KindIssue, GrantID: "forged"}
		b, _ := json.Marshal(rec)
		return string(b) + "\n"
	}

	tests := []struct {
		name     string
		edit     func(lines []string) []string
		wantLine int    // 0: verify passes
		wantHead bool   // when verify passes: whether the head still matches
		reason   string // part of the reason
	}{
		{"ok/untouched", func(l []string) []string { return l }, 0, true, ""},
		{"fail/remove-middle", func(l []string) []string { return append(l[:2:2], l[3:]...) }, 3, false, "seq is 4, want 3"},
		{"fail/remove-first", func(l []string) []string { return l[1:] }, 1, false, "seq is 2, want 1"},
		{"fail/edit", func(l []string) []string {
			l[2] = strings.Replace(l[2], `"grant_id":"g-3"`, `"grant_id":"g-x"`, 1)
			return l
		}, 4, false, "prev does not match the hash of line 3"},
		{"fail/edit-seq-kept-prev-recomputed", func(l []string) []string {
			l[2] = strings.Replace(l[2], `"decision":"allow"`, `"decision":"deny!"`, 1)
			return l
		}, 4, false, "prev does not match"},
		{"fail/reorder", func(l []string) []string { l[2], l[3] = l[3], l[2]; return l }, 3, false, "seq is 4, want 3"},
		{"fail/insert", func(l []string) []string {
			return append(l[:2:2], append([]string{forged()}, l[2:]...)...)
		}, 4, false, "seq is 3, want 4"},
		{"fail/duplicate", func(l []string) []string {
			return append(l[:3:3], l[2:]...)
		}, 4, false, "seq is 3, want 4"},
		{"fail/replace-first-prev", func(l []string) []string {
			l[0] = strings.Replace(l[0], `"prev":""`, `"prev":"x"`, 1)
			return l
		}, 1, false, "first record has a non-empty prev"},
		{"fail/garbage-line", func(l []string) []string { l[4] = "{not json\n"; return l }, 5, false, "not a valid record"},
		{"fail/torn-tail", func(l []string) []string { l[5] = l[5][:20]; return l }, 6, false, "incomplete last line"},
		// The chain cannot see a cut tail or an edited last record; the
		// head kept outside the log can.
		{"ok/cut-tail-head-differs", func(l []string) []string { return l[:5] }, 0, false, ""},
		{"ok/edit-last-head-differs", func(l []string) []string {
			l[5] = strings.Replace(l[5], `"grant_id":"g-6"`, `"grant_id":"g-x"`, 1)
			return l
		}, 0, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines := tt.edit(append([]string(nil), orig...))
			h, err := VerifyChain(strings.NewReader(strings.Join(lines, "")))
			if tt.wantLine == 0 {
				if err != nil {
					t.Fatalf("verify: %v", err)
				}
				if (h == head) != tt.wantHead {
					t.Errorf("head %+v vs original %+v: match=%v, want %v", h, head, h == head, tt.wantHead)
				}
				return
			}
			var ae *Error
			if !errors.As(err, &ae) {
				t.Fatalf("verify: got %v, want *Error", err)
			}
			if ae.Line != tt.wantLine || !strings.Contains(ae.Detail, tt.reason) {
				t.Errorf("got %v, want line %d with %q", ae, tt.wantLine, tt.reason)
			}
		})
	}
}

func TestAuditTornTailRecovery(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l := auditTestOpen(t, path)
	for _, rec := range auditTestRecords(3) {
		auditTestAppend(t, l, rec)
	}
	l.Close()
	// A crash in the middle of writing record 4.
	torn := `{"seq":4,"prev":"abc","time":"2030-01-01T00:0`
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(torn)
	f.Close()

	l = auditTestOpen(t, path)
	if seq := auditTestAppend(t, l, Record{Kind: KindStart}); seq != 5 {
		t.Errorf("seq after recovery %d, want 5 (4 is the recovered record)", seq)
	}
	l.Close()
	if h := auditTestVerifyFile(t, path); h.Seq != 5 {
		t.Fatalf("verify: %d records, want 5", h.Seq)
	}
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	var rec Record
	if err := json.Unmarshal([]byte(lines[3]), &rec); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("dropped %d bytes", len(torn)); rec.Kind != KindRecovered || !strings.Contains(rec.Message, want) {
		t.Errorf("record 4 is %s %q, want recovered with %q", rec.Kind, rec.Message, want)
	}
}

func TestOpenAuditRefusals(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, path string)
		want  string
	}{
		{"fail/corrupt-middle-line", func(t *testing.T, path string) {
			l := auditTestOpen(t, path)
			for _, rec := range auditTestRecords(4) {
				auditTestAppend(t, l, rec)
			}
			l.Close()
			data, _ := os.ReadFile(path)
			lines := strings.SplitAfter(string(data), "\n")
			lines[1] = "garbage\n"
			os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600)
		}, "line 2: not a valid record"},
		{"fail/group-writable", func(t *testing.T, path string) {
			os.WriteFile(path, nil, 0o600)
			os.Chmod(path, 0o620)
		}, "others can rewrite it (fix: chmod 600"},
		{"fail/symlink", func(t *testing.T, path string) {
			target := filepath.Join(filepath.Dir(path), "elsewhere")
			os.WriteFile(target, nil, 0o600)
			os.Symlink(target, path)
		}, "too many levels of symbolic links"},
		{"fail/not-regular", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				testpeer.Unavailable(t, "cannot make a FIFO: "+err.Error())
			}
		}, "not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.log")
			tt.setup(t, path)
			l, err := Open(path)
			if err == nil {
				l.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestOpenAuditLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l := auditTestOpen(t, path)
	if l2, err := Open(path); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		if l2 != nil {
			l2.Close()
		}
		t.Fatalf("second Open: %v, want in use", err)
	}
	l.Close()
	l = auditTestOpen(t, path) // the lock goes with Close
	l.Close()
}

// auditTestTmpfs mounts a tmpfs of the given size, or skips when that is not
// possible (not root) unless PARLEY_REQUIRE_PEERS=1.
func auditTestTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "tmpfs", dir).CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("cannot mount a tmpfs: %v: %s", err, bytes.TrimSpace(out))
		testpeer.Unavailable(t, msg)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

func TestAuditFullFilesystem(t *testing.T) {
	dir := auditTestTmpfs(t, "64k")
	path := filepath.Join(dir, "audit.log")
	l := auditTestOpen(t, path)
	defer l.Close()
	auditTestAppend(t, l, Record{Kind: KindStart})

	// Fill the filesystem.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	block := bytes.Repeat([]byte{'x'}, 1024)
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling: %v", err)
			}
			break
		}
	}
	for { // the last partial block
		if _, err := f.Write([]byte{'x'}); err != nil {
			break
		}
	}
	f.Close()
	before, _ := os.Stat(path)

	// A record larger than the space left in the log's last page: the write
	// is partial or fails outright; either way Append must fail.
	big := Record{Kind: KindIssue, Requested: json.RawMessage(`["` + strings.Repeat("m", 9000) + `"]`)}
	for i := range 3 {
		if seq, err := l.Append(big); err == nil {
			t.Fatalf("append %d on a full filesystem succeeded with seq %d", i, seq)
		} else if !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("append %d: got %v, want ENOSPC", i, err)
		}
	}
	after, _ := os.Stat(path)
	if after.Size() != before.Size() {
		t.Errorf("log size %d after failed appends, want %d (partial line left behind)", after.Size(), before.Size())
	}
	if h := auditTestVerifyFile(t, path); h.Seq != 1 {
		t.Errorf("verify after failures: %d records, want 1", h.Seq)
	}

	// Space returns.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if seq := auditTestAppend(t, l, big); seq != 2 {
		t.Errorf("append after space returned got seq %d, want 2", seq)
	}
	if h := auditTestVerifyFile(t, path); h.Seq != 2 {
		t.Errorf("verify after recovery: %d records, want 2", h.Seq)
	}
}

func TestShowAudit(t *testing.T) {
	lines := []string{
		`{"seq":1,"prev":"","time":"2030-01-02T03:04:05.123456Z","kind":"start","message":"parley-keyd 0.1 started"}`,
		`{"seq":2,"prev":"x","time":"2030-01-02T03:04:06Z","kind":"issue","request_id":"r1","caller":{"uid":1000,"gid":1000,"pid":42,"user":"alice","unit":"agent.service"},"holder":"ed25519:3Ue1sJbM4YyOIX7oWo9e_ZlPCbLDBYyFU0ePhTy7jqo","decision":"allow","decided_by":{"approver":"bob","channel":"desktop","strength":"strong"},"grant_id":"g1","expiry":1900000000}`,
		`{"seq":3,"prev":"y","time":"2030-01-02T03:04:07Z","kind":"deny","request_id":"\u001b[2J evil decision=allow\u202e","caller":{"uid":1001,"gid":1001,"pid":7},"decision":"deny","decided_by":{"rule":"no-shop"}}`,
		`not json`,
	}
	var out bytes.Buffer
	err := Show(strings.NewReader(strings.Join(lines, "\n")+"\n"), &out)
	var ae *Error
	if !errors.As(err, &ae) || ae.Line != 4 {
		t.Errorf("Show error %v, want *Error at line 4", err)
	}
	want := `#1 2030-01-02T03:04:05Z start -- parley-keyd 0.1 started
#2 2030-01-02T03:04:06Z issue req=r1 caller=alice/pid:42 unit=agent.service holder=ed25519:3Ue1sJ…Ty7jqo decision=allow by=bob,via:desktop(strong) grant=g1 exp=2030-03-17T17:46:40Z
#3 2030-01-02T03:04:07Z deny req="\x1b[2J evil decision=allow\u202e" caller=uid:1001/pid:7 decision=deny by=rule:no-shop
line 4: not a record
`
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("Show output (-want +got):\n%s", diff)
	}
}

func TestAuditClean(t *testing.T) {
	tests := []struct {
		name, in, want string
		max            int
	}{
		{"ok/plain", "calendar.find", "calendar.find", 40},
		{"ok/unicode-letters", "Zoë-日本", "Zoë-日本", 40},
		{"ok/escape-sequence", "\x1b]0;pwned\a", `\x1b]0;pwned\x07`, 40},
		{"ok/bidi-override", "abc\u202edef", `abc\u202edef`, 40},
		{"ok/zero-width", "a\u200bb", `a\u200bb`, 40},
		{"ok/backslash-is-unambiguous", `a\x1b`, `a\\x1b`, 40},
		{"ok/invalid-utf8", "a\xffb", `a\xffb`, 40},
		{"ok/newline", "a\nb", `a\x0ab`, 40},
		{"ok/cut", "abcdefgh", "abcd…[cut]", 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := clean(tt.in, tt.max); got != tt.want {
				t.Errorf("clean(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// BenchmarkAuditAppend shows group commit: with many concurrent appenders
// the fsyncs/op metric drops far below 1.
func BenchmarkAuditAppend(b *testing.B) {
	for _, par := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("parallel-%d", par), func(b *testing.B) {
			l := auditTestOpen(b, filepath.Join(b.TempDir(), "audit.log"))
			defer l.Close()
			rec := auditTestRecords(1)[0]
			b.SetParallelism(par)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := l.Append(rec); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(l.syncs.Load())/float64(b.N), "fsyncs/op")
		})
	}
}

// TestAuditCloseWhileAppending checks that an Append racing Close either
// returns a seq that verify then finds in the file, or ErrClosed.
func TestAuditCloseWhileAppending(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l := auditTestOpen(t, path)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		maxSeq  uint64
		success int
		bad     []error
	)
	started := make(chan struct{}, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				seq, err := l.Append(Record{Kind: KindIssue})
				if i == 0 {
					started <- struct{}{}
				}
				mu.Lock()
				switch {
				case err == nil:
					success++
					maxSeq = max(maxSeq, seq)
				case errors.Is(err, ErrClosed):
					mu.Unlock()
					return
				default:
					bad = append(bad, err)
				}
				mu.Unlock()
			}
		}()
	}
	for range 20 {
		<-started
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, err := range bad {
		t.Error(err)
	}
	h := auditTestVerifyFile(t, path)
	if int(h.Seq) != success || h.Seq != maxSeq {
		t.Errorf("file has %d records; %d appends succeeded, highest seq %d", h.Seq, success, maxSeq)
	}
}

// FuzzVerifyAudit checks that verification never panics, that Open's
// scan agrees with it, and that a log it accepts shows without error.
func FuzzVerifyAudit(f *testing.F) {
	dir := f.TempDir()
	l := auditTestOpen(f, filepath.Join(dir, "seed.log"))
	for _, rec := range auditTestRecords(3) {
		auditTestAppend(f, l, rec)
	}
	l.Close()
	seed, _ := os.ReadFile(filepath.Join(dir, "seed.log"))
	f.Add(seed)
	f.Add(seed[:len(seed)-7])
	f.Add(append(append([]byte(nil), seed...), 0, 0, 0))
	f.Add([]byte("{}\n"))
	f.Add([]byte(`{"seq":1,"prev":"","time":"2030-01-01T00:00:00Z","kind":"start"}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := VerifyChain(bytes.NewReader(data))
		nulTail := 0
		for nulTail < len(data) && data[len(data)-1-nulTail] == 0 {
			nulTail++
		}
		if err == nil {
			if err := Show(bytes.NewReader(data), io.Discard); err != nil {
				t.Errorf("verified log does not show: %v", err)
			}
		}
		sh, good, serr := scan(bytes.NewReader(data))
		if err == nil && (serr != nil || sh != h || good < int64(len(data)-nulTail)) {
			t.Errorf("verify accepted (%+v) but scan says %+v, %d, %v", h, sh, good, serr)
		}
		if serr == nil && good == int64(len(data)) && err != nil {
			// The scan reads only seq and prev of a line that another line
			// follows, and relies on the next line's prev for the rest: a
			// line that is no record but whose hash the next line carries
			// passes it (forging that means rewriting every later prev,
			// which a full verify cannot catch either). The last line gets
			// the full check, so verify may differ only before it.
			var ae *Error
			if !errors.As(err, &ae) || ae.Line >= bytes.Count(data, []byte("\n")) {
				t.Errorf("scan accepted the whole log but verify says %v", err)
			}
		}
	})
}

// FuzzVerifyLog runs Verify, with checkpoints, and Open on a damaged signed
// log: neither may panic, and a log that Verify accepts must open, keeping
// every record Verify saw.
func FuzzVerifyLog(f *testing.F) {
	// Nothing writes these logs: a damaged line is read again at once,
	// not over 127 ms, or most inputs would wait.
	first := settleFirst
	settleFirst = 0
	f.Cleanup(func() { settleFirst = first })
	dir := f.TempDir()
	o := signedOptions(newTestClock())
	o.CheckpointEvery = 3
	path := filepath.Join(dir, "audit.log")
	l := openWith(f, o, path)
	for _, rec := range auditTestRecords(5) {
		auditTestAppend(f, l, rec)
	}
	l.Close()
	seed, _ := os.ReadFile(path)
	f.Add(seed)
	f.Add(seed[:len(seed)/2])
	f.Add(append(seed[:len(seed)-40:len(seed)-40], make([]byte, 40)...))
	pub := testPub("daemon")
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "audit.log")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		rep, err := Verify(p, VerifyOptions{Key: pub})
		l, oerr := (Options{Signer: testKey("daemon")}).Open(p)
		if oerr != nil {
			if err == nil {
				t.Fatalf("Verify accepts (%+v) but Open refuses: %v", rep, oerr)
			}
			return
		}
		head := l.Head()
		l.Close()
		if err == nil && head.Seq < rep.Head.Seq {
			t.Fatalf("Open lost records: head %d, verify saw %d", head.Seq, rep.Head.Seq)
		}
		if err == nil {
			if _, err := Verify(p, VerifyOptions{Key: pub}); err != nil {
				t.Fatalf("a log that verified does not verify after Open wrote to it: %v", err)
			}
		}
	})
}

// TestAuditScanChainOnly pins what the start-up scan checks: a middle line
// is held by the chain (an edit breaks the next prev), the last line fully.
func TestAuditScanChainOnly(t *testing.T) {
	dir := t.TempDir()
	l := auditTestOpen(t, filepath.Join(dir, "a.log"))
	for _, rec := range auditTestRecords(4) {
		auditTestAppend(t, l, rec)
	}
	l.Close()
	data, _ := os.ReadFile(filepath.Join(dir, "a.log"))
	lines := bytes.SplitAfter(data, []byte("\n"))
	cases := []struct {
		name string
		edit func() []byte
		line int
	}{
		{"fail/edited-middle", func() []byte {
			return bytes.Join([][]byte{lines[0], bytes.Replace(lines[1], []byte(`"kind":"`), []byte(`"kind":"x`), 1), lines[2], lines[3]}, nil)
		}, 3},
		{"fail/edited-last", func() []byte {
			return bytes.Join([][]byte{lines[0], lines[1], lines[2], bytes.Replace(lines[3], []byte(`"time":"`), []byte(`"time":"x`), 1)}, nil)
		}, 4},
		{"fail/removed-middle", func() []byte { return bytes.Join([][]byte{lines[0], lines[2], lines[3]}, nil) }, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := scan(bytes.NewReader(tc.edit()))
			var ae *Error
			if !errors.As(err, &ae) || ae.Line != tc.line {
				t.Errorf("scan: %v, want an error at line %d", err, tc.line)
			}
		})
	}
}

// BenchmarkOpenAudit measures Open of a signed log of 1 000 and 100 000
// records whose last run was killed with 999 records after its last
// checkpoint, the most Open reads (CheckpointEvery is 1 000): the time and
// the bytes read do not grow with the log (make bench times the daemon at a
// million records).
func BenchmarkOpenAudit(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "audit.log")
			o := Options{Signer: testKey("daemon")}
			l := openWith(b, o, path)
			appendMany(b, l, n, 512)
			l.Close()
			l = openWith(b, Options{Signer: testKey("daemon"), CheckpointEvery: 1e9}, path)
			appendMany(b, l, 999, 64)
			l.closeQuiet() // no stop checkpoint, as after kill -9
			fi, _ := os.Stat(path)
			var read int64
			b.ResetTimer()
			for b.Loop() {
				l, err := o.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				read = l.openRead
				b.StopTimer()
				// Open wrote an open checkpoint and a recovered record:
				// take them back, so that every Open finds the same tail.
				l.closeQuiet()
				if err := os.Truncate(path, fi.Size()); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(read), "bytes-read/op")
			b.ReportMetric(float64(fi.Size()), "log-bytes")
		})
	}
}

// TestAuditLeaderHandOff appends from many goroutines while the writer
// goroutine keeps taking the log for itself (checkpoints every few records,
// explicit checkpoints and fold flushes from another goroutine, folded
// refusals), so that appenders often find it busy: every Append must
// return, within the deadline, with a seq of its own, and the log verify.
// An appender that finds the log busy waits to be told to commit; one
// left waiting would hang this test.
func TestAuditLeaderHandOff(t *testing.T) {
	clock := newTestClock()
	o := signedOptions(clock)
	o.CheckpointEvery = 7
	o.Preallocate = 4 << 10
	path := filepath.Join(t.TempDir(), "audit.log")
	l := openWith(t, o, path)
	const goroutines, each = 48, 40
	var (
		seen seqSet
		wg   sync.WaitGroup
		errs = make(chan error, goroutines+1)
	)
	stop := make(chan struct{})
	busy := make(chan struct{})
	go func() {
		defer close(busy)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			var err error
			if i%2 == 0 {
				_, err = l.Checkpoint()
			} else {
				err = l.FlushFolds()
			}
			if err != nil {
				errs <- err
				return
			}
		}
	}()
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				rec := Record{Kind: KindIssue, RequestID: fmt.Sprintf("%d-%d", g, i)}
				if i%5 == 0 {
					if _, _, err := l.AppendFolded(Record{Kind: KindRequest, Verb: "HELLO", Decision: "ok"}); err != nil {
						errs <- err
						return
					}
				}
				seq, err := l.Append(rec)
				if err == nil {
					err = seen.add(seq)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(60 * time.Second):
		t.Fatal("appends still waiting after 60 s: an appender was left waiting")
	}
	close(stop)
	<-busy
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	mustClose(t, l)
	if seen.len() != goroutines*each {
		t.Fatalf("%d distinct seqs, want %d", seen.len(), goroutines*each)
	}
	if _, err := Verify(path, VerifyOptions{Key: testPub("daemon")}); err != nil {
		t.Fatal(err)
	}
}
