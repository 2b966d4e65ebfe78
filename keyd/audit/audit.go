package audit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// The kinds of audit record. Log.Append refuses any other kind, so that a
// typo cannot produce a record that tools reading the log do not recognise.
const (
	KindIssue        = "issue"         // a grant was issued
	KindConsent      = "consent"       // a consent grant (§6.6) was issued
	KindDeny         = "deny"          // a request was refused by policy or by the human
	KindTimeout      = "timeout"       // an approval timed out (fail closed: no grant)
	KindWithdrawn    = "withdrawn"     // the requester went away before a decision
	KindError        = "error"         // a request failed inside the daemon
	KindPolicyReload = "policy-reload" // the policy was reloaded (or a reload was refused)
	KindStart        = "start"         // the daemon started
	KindStop         = "stop"          // the daemon stopped cleanly
	KindRecovered    = "recovered"     // Open dropped a torn last line after a crash
	KindLock         = "lock"          // an approver locked the daemon: every request is refused
	KindUnlock       = "unlock"        // an approver lifted the lock
)

var kinds = map[string]bool{
	KindIssue: true, KindConsent: true, KindDeny: true, KindTimeout: true,
	KindWithdrawn: true, KindError: true, KindPolicyReload: true,
	KindStart: true, KindStop: true, KindRecovered: true,
	KindLock: true, KindUnlock: true,
}

const (
	// maxLine caps one record. Requests are capped at 1 MiB per frame
	// (§2.1), so a record holding requested and issued caveats fits; the cap
	// keeps a corrupt or hostile log file from making verify read without end.
	maxLine = 4 << 20
	// maxBatch caps the records committed by one write and fsync.
	maxBatch = 512
)

// ErrClosed is returned by Append after Close.
var ErrClosed = errors.New("audit log is closed")

// ErrInUse is returned by Open when another process, such as a
// second daemon on the same state folder, holds the log.
var ErrInUse = errors.New("in use by another process")

// Record is one line of the audit log. Seq, Prev and Time are filled in
// by Log.Append; whatever the caller puts there is overwritten.
//
// A record never holds a signature, a token or any key material: Holder is
// the holder's public key, Requested and Issued are caveat lists, GrantID is
// an identifier, not the grant.
type Record struct {
	Seq       uint64          `json:"seq"`
	Prev      string          `json:"prev"`
	Time      string          `json:"time"` // RFC 3339 with nanoseconds, UTC
	Kind      string          `json:"kind"`
	RequestID string          `json:"request_id,omitempty"`
	Caller    *Caller         `json:"caller,omitempty"`
	Holder    string          `json:"holder,omitempty"`
	Requested json.RawMessage `json:"requested,omitempty"`
	Issued    json.RawMessage `json:"issued,omitempty"`
	Decision  string          `json:"decision,omitempty"`
	DecidedBy *Decider        `json:"decided_by,omitempty"`
	GrantID   string          `json:"grant_id,omitempty"`
	Expiry    int64           `json:"expiry,omitempty"` // unix seconds
	Message   string          `json:"message,omitempty"`
}

// Caller is the requester as the kernel identified it (see peercred.Get).
type Caller struct {
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	PID  int32  `json:"pid"`
	User string `json:"user,omitempty"`
	Exe  string `json:"exe,omitempty"`
	Unit string `json:"unit,omitempty"`
}

// Decider says who or what decided a request: a policy rule, or a human
// approver on a channel of some strength.
type Decider struct {
	Rule     string `json:"rule,omitempty"`
	Approver string `json:"approver,omitempty"` // user name, or uid when it has no name
	Channel  string `json:"channel,omitempty"`
	Strength string `json:"strength,omitempty"`
}

// Head names the last record of a log: its seq and the hash of its line,
// which is what the next record's prev will hold. A log with no records has
// Seq 0 and Hash "".
type Head struct {
	Seq  uint64
	Hash string
}

// Error reports the first line of an audit log that fails verification.
// Line counts from 1.
type Error struct {
	Line   int
	Reason string
}

func (e *Error) Error() string {
	return fmt.Sprintf("audit log line %d: %s", e.Line, e.Reason)
}

// Log is the daemon's append-only, hash-chained audit log: one JSON
// object per line, in a file only the daemon's user can write.
//
// # Chain
//
// Record n (counting from 1) has "seq": n. Its "prev" is the hash of record
// n-1: the unpadded base64url encoding (RFC 4648 §5) of the SHA-256 of that
// record's line, exactly the bytes on disk without the final newline. The
// first record has "prev": "". Removing, editing, reordering, duplicating or
// inserting a record therefore breaks either the seq sequence or a prev, and
// Verify names the first line where it breaks. Anyone who can write the
// file can still rewrite every record from some point on, or cut the tail;
// that is only detectable against a head (Head) kept somewhere else,
// which is why the daemon reports its head when it starts and stops.
//
// # Durability
//
// Append returns only after its record is written and fsynced, so the
// daemon calls it before a grant leaves the process and refuses the request
// when it fails. Concurrent appends are committed in groups by a single
// writer goroutine: it takes every record waiting in its queue, writes them
// with one write, fsyncs once, and then answers every waiter. When a write or
// fsync fails, the file is truncated back to the end of the last committed
// record, so no partial line is left behind, and every record of the group
// gets the error. If even that truncation fails, the log refuses every later
// Append (fail closed) until it is reopened.
type Log struct {
	path  string
	f     *os.File
	queue chan *request
	done  chan struct{} // closed when the writer goroutine has returned

	mu     sync.RWMutex // guards closed; held for reading while sending on queue
	closed bool

	// Owned by the writer goroutine once Open returns.
	seq    uint64
	head   string
	off    int64 // end of the last committed record
	broken error // set when the file could not be restored after a failure
	buf    bytes.Buffer

	headMu   sync.Mutex
	headCopy Head

	syncs atomic.Uint64 // fsyncs issued by the writer; read by tests and benchmarks
	now   func() time.Time
}

type request struct {
	rec  Record
	seq  uint64
	err  error
	done chan struct{}
}

// Open opens the audit log at path, creating it with mode 0600 when it
// does not exist, and returns once the existing records have been verified.
//
// A last line without its newline is the trace of a crash during a write.
// Such a record was never acknowledged (acknowledgement follows the fsync),
// so Open truncates it and appends a record of kind "recovered" that
// says how many bytes were dropped. Any other damage (a corrupt record or a
// broken chain) makes Open fail with an error wrapping the *Error
// that names the line; the daemon must not add records to a log it cannot
// vouch for.
//
// The file is locked (flock) for as long as the log is open, so a second
// daemon on the same state folder cannot interleave its own chain.
func Open(path string) (*Log, error) {
	// O_NOFOLLOW: a symlink planted in the state folder must not redirect the
	// log into a file the attacker can read or truncate.
	const flags = os.O_RDWR | os.O_APPEND | syscall.O_NOFOLLOW
	created := false
	f, err := os.OpenFile(path, flags|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		created = true
	} else if errors.Is(err, os.ErrExist) {
		f, err = os.OpenFile(path, flags, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	l, err := openFile(path, f, created)
	if err != nil {
		f.Close()
		return nil, err
	}
	return l, nil
}

func openFile(path string, f *os.File, created bool) (*Log, error) {
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("audit log %s: %w", path, ErrInUse)
		}
		return nil, fmt.Errorf("lock audit log %s: %w", path, err)
	}
	if created {
		// Make the new file's name durable too, not only its contents.
		if err := syncDir(path); err != nil {
			return nil, err
		}
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat audit log: %w", err)
	}
	// Tampering: a log that others can write is a log anyone can rewrite.
	if err := checkOwner(path, fi); err != nil {
		return nil, err
	}

	head, good, err := scan(f)
	if err != nil {
		return nil, fmt.Errorf("audit log %s cannot be trusted: %w (run `parley-keyd audit verify`; to start a new log, move this one aside)", path, err)
	}
	torn := fi.Size() - good
	if torn > 0 {
		if err := f.Truncate(good); err != nil {
			return nil, fmt.Errorf("truncate torn tail of audit log %s: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			return nil, fmt.Errorf("sync audit log %s: %w", path, err)
		}
	}

	l := &Log{
		path:  path,
		f:     f,
		queue: make(chan *request, 256),
		done:  make(chan struct{}),
		seq:   head.Seq,
		head:  head.Hash,
		off:   good,
		now:   time.Now,
	}
	l.headCopy = head
	go l.writer()
	if torn > 0 {
		_, err := l.Append(Record{
			Kind:    KindRecovered,
			Message: fmt.Sprintf("dropped %d bytes of an incomplete last record (the daemon stopped during a write; that record was never acknowledged)", torn),
		})
		if err != nil {
			l.Close()
			return nil, err
		}
	}
	return l, nil
}

func checkOwner(path string, fi os.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("audit log %s is not a regular file", path)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("audit log %s: cannot read its owner", path)
	}
	if euid := os.Geteuid(); st.Uid != uint32(euid) {
		return fmt.Errorf("audit log %s is owned by uid %d, not by the daemon's uid %d (fix: chown %d %s)", path, st.Uid, euid, euid, path)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("audit log %s has mode %04o: others can rewrite it (fix: chmod 600 %s)", path, fi.Mode().Perm(), path)
	}
	return nil
}

func syncDir(path string) error {
	dir := "."
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		dir = path[:i+1]
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync audit log folder: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync audit log folder: %w", err)
	}
	return nil
}

// scan verifies the records of f from its start and returns the head
// and the offset just after the last complete line. An incomplete last line
// is not an error here: the caller truncates it.
func scan(f io.ReadSeeker) (Head, int64, error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Head{}, 0, err
	}
	var v verifier
	br := bufio.NewReaderSize(f, 64<<10)
	var good int64
	// Every line but the last is checked through the chain alone: its seq,
	// its prev, and its hash, which the next line's prev must equal. So an
	// edit anywhere in it is caught as surely as by decoding it (the last
	// line, which no prev covers, gets the full check). Decoding every
	// record made start-up with a long log slow (docs/performance.md).
	var held []byte
	for {
		line, complete, err := readLine(br)
		if err != nil && err != io.EOF {
			return Head{}, 0, &Error{Line: v.n + 1, Reason: err.Error()}
		}
		if err == io.EOF || !complete {
			if held != nil {
				if err := v.line(held); err != nil {
					return Head{}, 0, err
				}
				good += int64(len(held)) + 1
			}
			return v.head(), good, nil
		}
		if held != nil {
			if err := v.chained(held); err != nil {
				return Head{}, 0, err
			}
			good += int64(len(held)) + 1
		}
		held = append(held[:0], line...)
	}
}

// Append adds rec to the log and returns its seq once the record is durable
// (written and fsynced). On error the record is not in the log and the
// caller must not release what the record describes.
func (l *Log) Append(rec Record) (seq uint64, err error) {
	req := &request{rec: rec, done: make(chan struct{})}
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return 0, ErrClosed
	}
	l.queue <- req
	l.mu.RUnlock()
	<-req.done
	return req.seq, req.err
}

// Head returns the seq and hash of the last committed record. Report it
// outside the log (the system journal) so a cut tail can be noticed.
func (l *Log) Head() Head {
	l.headMu.Lock()
	defer l.headMu.Unlock()
	return l.headCopy
}

// Path returns the file the log writes to.
func (l *Log) Path() string { return l.path }

// Close waits for the records already queued, then closes the file and
// releases its lock. Append fails with ErrClosed afterwards.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	close(l.queue)
	l.mu.Unlock()
	<-l.done
	return l.f.Close()
}

func (l *Log) writer() {
	defer close(l.done)
	batch := make([]*request, 0, maxBatch)
	for {
		req, ok := <-l.queue
		if !ok {
			return
		}
		batch = append(batch[:0], req)
		open := true
	drain:
		for len(batch) < maxBatch {
			select {
			case r, ok := <-l.queue:
				if !ok {
					open = false
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		l.commit(batch)
		if !open {
			return
		}
	}
}

// commit writes and fsyncs one group of records and answers each waiter.
func (l *Log) commit(batch []*request) {
	defer func() {
		for _, r := range batch {
			close(r.done)
		}
	}()
	if l.broken != nil {
		for _, r := range batch {
			r.err = l.broken
		}
		return
	}

	seq, head := l.seq, l.head
	now := l.now().UTC().Format(time.RFC3339Nano)
	l.buf.Reset()
	enc := json.NewEncoder(&l.buf)
	enc.SetEscapeHTML(false)
	var pending []*request
	for _, r := range batch {
		if !kinds[r.rec.Kind] {
			r.err = fmt.Errorf("audit record of unknown kind %q", r.rec.Kind)
			continue
		}
		rec := r.rec
		rec.Seq, rec.Prev, rec.Time = seq+1, head, now
		start := l.buf.Len()
		if err := enc.Encode(&rec); err != nil {
			l.buf.Truncate(start)
			r.err = fmt.Errorf("encode audit record: %w", err)
			continue
		}
		line := l.buf.Bytes()[start : l.buf.Len()-1]
		if len(line) > maxLine {
			l.buf.Truncate(start)
			r.err = fmt.Errorf("audit record of %d bytes exceeds the limit of %d", len(line), maxLine)
			continue
		}
		seq++
		head = lineHash(line)
		r.seq = seq
		pending = append(pending, r)
	}
	if len(pending) == 0 {
		return
	}

	_, err := l.f.Write(l.buf.Bytes())
	if err == nil {
		err = l.f.Sync()
		l.syncs.Add(1)
	}
	if err != nil {
		err = fmt.Errorf("write audit log: %w", err)
		l.rollback(err)
		for _, r := range pending {
			r.seq, r.err = 0, err
		}
		return
	}
	l.seq, l.head = seq, head
	l.off += int64(l.buf.Len())
	l.headMu.Lock()
	l.headCopy = Head{Seq: seq, Hash: head}
	l.headMu.Unlock()
	if l.buf.Cap() > 1<<20 {
		l.buf = bytes.Buffer{} // do not keep a large buffer alive after a burst
	}
}

// rollback cuts the file back to the last committed record after a
// failed write or fsync, so that no partial or unacknowledged line remains.
func (l *Log) rollback(cause error) {
	err := l.f.Truncate(l.off)
	if err == nil {
		err = l.f.Sync()
		l.syncs.Add(1)
	}
	if err != nil {
		l.broken = fmt.Errorf("audit log unusable after a failed write (%v), and restoring it failed: %w", cause, err)
	}
}

// lineHash is the chain hash of one line (without its newline).
func lineHash(line []byte) string {
	sum := sha256.Sum256(line)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// readLine returns the next line without its newline. complete is false
// for a last line that has no newline. Lines above maxLine are an error.
func readLine(br *bufio.Reader) (line []byte, complete bool, err error) {
	var long []byte
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			if long == nil {
				return chunk[:len(chunk)-1], true, nil
			}
			long = append(long, chunk[:len(chunk)-1]...)
			if len(long) > maxLine {
				return nil, false, fmt.Errorf("line longer than %d bytes", maxLine)
			}
			return long, true, nil
		case err == bufio.ErrBufferFull:
			long = append(long, chunk...)
			if len(long) > maxLine {
				return nil, false, fmt.Errorf("line longer than %d bytes", maxLine)
			}
		case err == io.EOF:
			long = append(long, chunk...)
			if len(long) == 0 {
				return nil, false, io.EOF
			}
			return long, false, nil
		default:
			return nil, false, err
		}
	}
}

// verifier checks records one line at a time.
type verifier struct {
	n    int    // lines accepted
	prev string // hash of the last accepted line
}

func (v *verifier) head() Head {
	return Head{Seq: uint64(v.n), Hash: v.prev}
}

// chained accepts a line that another line follows, reading only its seq
// and prev; anything unusual takes the full check of line, which then names
// the problem.
func (v *verifier) chained(line []byte) error {
	seq, prev, ok := peek(line)
	if !ok || seq != uint64(v.n+1) || prev != v.prev {
		return v.line(line)
	}
	v.n++
	v.prev = lineHash(line)
	return nil
}

// peek reads seq and prev from the start of a record as the log writes
// it: {"seq":N,"prev":"…",…}. ok is false for anything else.
func peek(line []byte) (seq uint64, prev string, ok bool) {
	const head, mid = `{"seq":`, `,"prev":"`
	rest, found := bytes.CutPrefix(line, []byte(head))
	if !found {
		return 0, "", false
	}
	i := 0
	for i < len(rest) && i < 20 && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	if i == 0 || (i > 1 && rest[0] == '0') {
		return 0, "", false
	}
	seq, err := strconv.ParseUint(string(rest[:i]), 10, 64)
	if err != nil {
		return 0, "", false
	}
	rest, found = bytes.CutPrefix(rest[i:], []byte(mid))
	if !found {
		return 0, "", false
	}
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return 0, "", false
	}
	for _, c := range rest[:end] {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return 0, "", false
		}
	}
	return seq, string(rest[:end]), true
}

func (v *verifier) line(line []byte) error {
	no := v.n + 1
	bad := func(format string, args ...any) error {
		return &Error{Line: no, Reason: fmt.Sprintf(format, args...)}
	}
	var rec Record
	if err := json.Unmarshal(line, &rec); err != nil {
		return bad("not a valid record: %v", err)
	}
	if rec.Seq != uint64(no) {
		return bad("seq is %d, want %d (a record was removed, inserted, duplicated or reordered)", rec.Seq, no)
	}
	if rec.Prev != v.prev {
		if no == 1 {
			return bad("the first record has a non-empty prev (records before it were removed)")
		}
		return bad("prev does not match the hash of line %d (that record was edited, or records were removed or inserted here)", no-1)
	}
	if rec.Kind == "" {
		return bad("record has no kind")
	}
	if _, err := time.Parse(time.RFC3339Nano, rec.Time); err != nil {
		return bad("bad time %q", rec.Time)
	}
	v.n = no
	v.prev = lineHash(line)
	return nil
}

// VerifyChain reads a whole audit log and checks its chain: seq must
// run 1, 2, 3, … and every prev must be the hash of the line before (see
// Log). It returns the head of a valid log, or an *Error naming the
// first line that fails. An incomplete last line is reported as an error;
// Open repairs it. Compare the head with one reported elsewhere to
// detect a cut tail, which the chain alone cannot show.
func VerifyChain(r io.Reader) (Head, error) {
	var v verifier
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, complete, err := readLine(br)
		if err == io.EOF {
			return v.head(), nil
		}
		if err != nil {
			return Head{}, &Error{Line: v.n + 1, Reason: err.Error()}
		}
		if !complete {
			return Head{}, &Error{Line: v.n + 1, Reason: "incomplete last line (a crash during a write; opening the log truncates it)"}
		}
		if err := v.line(line); err != nil {
			return Head{}, err
		}
	}
}

// Verify is VerifyChain returning the number of records.
func Verify(r io.Reader) (records int, err error) {
	h, err := VerifyChain(r)
	return int(h.Seq), err
}

// Show writes one human-readable line per record of the log in r to w:
// seq, time, kind, request id, caller, holder (shortened), decision, decided
// by, grant id, expiry and message. Text that came from callers is shown
// with control, format (bidi, zero-width) and other invisible characters
// escaped, and long values are cut visibly. Show does not verify the
// chain; a line that is not a record is shown as such and reported in the
// error returned at the end.
func Show(r io.Reader, w io.Writer) error {
	br := bufio.NewReaderSize(r, 64<<10)
	bw := bufio.NewWriter(w)
	var firstErr error
	for no := 1; ; no++ {
		line, _, err := readLine(br)
		if err == io.EOF {
			break
		}
		if err != nil {
			if firstErr == nil {
				firstErr = &Error{Line: no, Reason: err.Error()}
			}
			break
		}
		var rec Record
		if err := json.Unmarshal(line, &rec); err != nil {
			fmt.Fprintf(bw, "line %d: not a record\n", no)
			if firstErr == nil {
				firstErr = &Error{Line: no, Reason: "not a valid record: " + err.Error()}
			}
			continue
		}
		bw.WriteString(formatRecord(&rec))
		bw.WriteByte('\n')
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return firstErr
}

func formatRecord(rec *Record) string {
	var b strings.Builder
	ts := clean(rec.Time, 40)
	if t, err := time.Parse(time.RFC3339Nano, rec.Time); err == nil {
		ts = t.UTC().Format("2006-01-02T15:04:05Z")
	}
	fmt.Fprintf(&b, "#%d %s %s", rec.Seq, ts, clean(rec.Kind, 20))
	field := func(name, value string) {
		if value != "" {
			b.WriteString(" " + name + "=" + value)
		}
	}
	field("req", clean(rec.RequestID, 40))
	if c := rec.Caller; c != nil {
		who := c.User
		if who == "" {
			who = "uid:" + strconv.FormatUint(uint64(c.UID), 10)
		}
		field("caller", clean(who, 32)+"/pid:"+strconv.FormatInt(int64(c.PID), 10))
		if c.Unit != "" {
			field("unit", clean(c.Unit, 48))
		}
	}
	field("holder", shortKey(rec.Holder))
	field("decision", clean(rec.Decision, 20))
	if d := rec.DecidedBy; d != nil {
		var parts []string
		if d.Rule != "" {
			parts = append(parts, "rule:"+clean(d.Rule, 40))
		}
		if d.Approver != "" {
			parts = append(parts, clean(d.Approver, 32))
		}
		if d.Channel != "" {
			ch := "via:" + clean(d.Channel, 20)
			if d.Strength != "" {
				ch += "(" + clean(d.Strength, 10) + ")"
			}
			parts = append(parts, ch)
		}
		field("by", strings.Join(parts, ","))
	}
	field("grant", clean(rec.GrantID, 48))
	if rec.Expiry != 0 {
		field("exp", time.Unix(rec.Expiry, 0).UTC().Format("2006-01-02T15:04:05Z"))
	}
	if rec.Message != "" {
		b.WriteString(" -- " + cleanText(rec.Message, 200))
	}
	return b.String()
}

// shortKey shortens "ed25519:AAAA…" to its prefix and both ends.
func shortKey(k string) string {
	if k == "" {
		return ""
	}
	k = clean(k, 200)
	if utf8.RuneCountInString(k) <= 24 {
		return k
	}
	r := []rune(k)
	return string(r[:14]) + "…" + string(r[len(r)-6:])
}

// clean makes untrusted text safe to print on a terminal: anything that
// is not a graphic character (terminal escapes, control characters, bidi
// overrides, zero-width characters), any space, invalid UTF-8 and the
// backslash are escaped Go-style, so a caller-chosen request id can neither
// rewrite the admin's screen nor fake another field; values longer than max
// runes are cut with a visible marker.
func clean(s string, max int) string { return escape(s, max, false) }

// cleanText is clean for free text, which keeps plain spaces.
func cleanText(s string, max int) string { return escape(s, max, true) }

func escape(s string, max int, spaces bool) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(s); {
		if n == max {
			b.WriteString("…[cut]")
			break
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == ' ' && spaces:
			b.WriteByte(' ')
		case unicode.IsSpace(r) || !unicode.IsGraphic(r):
			switch {
			case r < 0x80:
				fmt.Fprintf(&b, `\x%02x`, r)
			case r <= 0xFFFF:
				fmt.Fprintf(&b, `\u%04x`, r)
			default:
				fmt.Fprintf(&b, `\U%08x`, r)
			}
		default:
			b.WriteRune(r)
		}
		i += size
		n++
	}
	return b.String()
}
