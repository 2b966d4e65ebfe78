package audit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/durable"
	"github.com/parley-keyd/parley-keyd/internal/journal"
	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
)

// The scrub. Open reads only the active segment from its last checkpoint
// on, so that start-up costs the same at any length (docs/performance.md);
// what it does not read could have been edited, removed, reordered,
// duplicated or interleaved with forged records since it was written. The
// scrub reads the whole log again behind that fast start: right after Open,
// then every Options.ScrubInterval, at most Options.ScrubRate bytes a
// second, on a goroutine of its own that no Append waits for. When it finds
// damage (Verify's *Error), the log is damaged: Damage returns it, the
// damage file next to the log keeps it across restarts, the journal gets an
// entry at priority crit, and subscribers (SubscribeDamage) hear of it. The
// daemon then issues nothing until an admin acknowledges the damage
// (AcknowledgeFile): the log starts a new segment whose checkpoint is
// followed by a record of kind "acknowledged" that names the damage, the
// admin and the reason, and from then on Verify and the scrub go on past
// that damage from the new segment.

// Defaults of the scrub's options, as the daemon sets them.
const (
	DefaultScrubInterval = 24 * time.Hour
	DefaultScrubRate     = 16 << 20 // bytes a second
)

// DefaultScrubDelay is how long after Open the first scrub begins (or the
// interval, if shorter).
const DefaultScrubDelay = time.Second

// MessageIDDamage is the journal MESSAGE_ID of the entry the scrub writes
// when it finds damage.
const MessageIDDamage = "150eb6a4c43c47a4a5fda75b637ea326"

// Damage is damage the scrub found: where, its Reason, and what it is. The
// damage file holds one, and so does a record of kind "acknowledged".
type Damage struct {
	Reason Reason `json:"reason"`
	File   string `json:"file,omitempty"`
	Line   int    `json:"line,omitempty"`
	Seq    uint64 `json:"seq,omitempty"`
	Detail string `json:"detail"`
	// Found is when the scrub found it, RFC 3339 UTC.
	Found string `json:"found,omitempty"`
}

// DamageOf is the Damage an *Error reports.
func DamageOf(e *Error) Damage {
	return Damage{Reason: e.Reason, File: e.File, Line: e.Line, Seq: e.Seq, Detail: e.Detail}
}

// Err is d as the *Error Verify returned.
func (d *Damage) Err() *Error {
	return &Error{File: d.File, Line: d.Line, Seq: d.Seq, Reason: d.Reason, Detail: d.Detail}
}

func (d *Damage) String() string { return d.Err().Error() }

// Same reports whether d and o are the same damage: the same reason at the
// same record and line. (The file's name changes when the segment that
// holds it is closed.)
func (d *Damage) Same(o *Damage) bool {
	return d != nil && o != nil && d.Reason == o.Reason && d.Seq == o.Seq && d.Line == o.Line
}

// DamagePath is the damage file of the log at path: audit.damage for
// audit.log. It exists while the log is damaged and not acknowledged; a
// daemon that starts with it refuses to issue until an admin acknowledges.
func DamagePath(path string) string { return sidePath(path, ".damage") }

// AcknowledgePath is where an admin's acknowledgement waits for the daemon
// (audit.acknowledge), and AcknowledgeResultPath where the daemon answers
// it (audit.acknowledge.result).
func AcknowledgePath(path string) string       { return sidePath(path, ".acknowledge") }
func AcknowledgeResultPath(path string) string { return sidePath(path, ".acknowledge.result") }

func sidePath(path, suffix string) string {
	dir, stem, _ := segmentStem(path)
	return filepath.Join(dir, stem+suffix)
}

// Acknowledgement is an admin's acknowledgement of damage, as parley-keyd
// audit acknowledge writes it to AcknowledgePath.
type Acknowledgement struct {
	Damage Damage `json:"damage"`
	Reason string `json:"reason"`
	By     string `json:"by"` // the admin: "root (uid 0)", …
	Time   string `json:"time"`
}

// AcknowledgeResult is the daemon's answer to an Acknowledgement.
type AcknowledgeResult struct {
	OK    bool   `json:"ok"`
	Seq   uint64 `json:"seq,omitempty"` // the record of kind "acknowledged"
	Error string `json:"error,omitempty"`
}

// maxAckReason bounds the admin's reason, in bytes.
const maxAckReason = 1024

// ReadDamage reads the damage file of the log at path: nil when there is
// none. A damage file that cannot be read is damage too.
func ReadDamage(path string) (*Damage, error) {
	b, err := os.ReadFile(DamagePath(path))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var d Damage
	if err == nil {
		err = json.Unmarshal(b, &d)
	}
	if err == nil && d.Reason == "" {
		err = errors.New("it names no reason")
	}
	if err != nil {
		return &Damage{Reason: ReasonUnreadable, File: filepath.Base(DamagePath(path)),
			Detail: fmt.Sprintf("the damage file could not be read (%v), so the log stays damaged", err)}, err
	}
	return &d, nil
}

// scrubState is the log's scrub.
type scrubState struct {
	damage atomic.Pointer[Damage]
	runs   atomic.Uint64 // scrubs completed, clean or not
	read   atomic.Int64  // bytes the last scrub read

	mu   sync.Mutex
	subs map[chan *Damage]struct{}

	kick chan struct{}
	done chan struct{}
}

// startScrub loads the damage file and starts the scrub's goroutine. It
// runs at the end of Open, with the writer started.
func (l *Log) startScrub() {
	s := &l.scrub
	s.subs = map[chan *Damage]struct{}{}
	s.kick = make(chan struct{}, 1)
	s.done = make(chan struct{})
	if l.pub == nil {
		close(s.done)
		return
	}
	d, err := ReadDamage(l.path)
	if err != nil {
		l.o.Journal.Send(journal.Entry{Priority: journal.Crit, Always: true, Message: "audit log: " + d.Detail})
	}
	if d != nil && d.Reason != ReasonUnreadable && l.acknowledged(d) {
		// Acknowledged, and the daemon stopped before it removed the file.
		os.Remove(DamagePath(l.path))
		d = nil
	}
	if d != nil {
		s.damage.Store(d)
		l.o.Journal.Send(journal.Entry{Priority: journal.Crit, Always: true,
			Fields:  map[string]string{"MESSAGE_ID": MessageIDDamage, "PARLEY_AUDIT_DAMAGE": string(d.Reason)},
			Message: fmt.Sprintf("audit log %s is damaged, found %s: %s; no grant is issued until an admin runs parley-keyd audit acknowledge --reason TEXT", l.path, d.Found, d)})
	}
	go l.scrubLoop()
}

// acknowledged reports whether a segment of the log begins with the
// acknowledgement of d.
func (l *Log) acknowledged(d *Damage) bool {
	segs, err := Segments(l.path)
	if err != nil {
		return false
	}
	files := make([]string, len(segs))
	for i, s := range segs {
		files[i] = s.Path
	}
	for _, a := range findAcks(files) {
		if a.rec.Damage.Same(d) {
			return true
		}
	}
	return false
}

func (l *Log) scrubLoop() {
	s := &l.scrub
	defer close(s.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-l.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	// A deferred log is checked once its open checkpoint is written: a
	// new one has no file before.
	select {
	case <-l.opened:
	case <-l.stop:
		return
	}
	// An acknowledgement made while the daemon was stopped.
	l.checkAck()
	interval := l.o.ScrubInterval
	var next <-chan time.Time
	if interval > 0 {
		// A moment after the start, so that the start itself (and its
		// first requests) never share the disk with the scrub.
		delay := l.o.ScrubDelay
		if delay <= 0 {
			delay = DefaultScrubDelay
		}
		next = time.After(min(delay, interval))
	}
	poll := time.NewTicker(250 * time.Millisecond)
	defer poll.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-poll.C:
			if s.damage.Load() != nil {
				l.checkAck()
			}
			continue
		case <-next:
		case <-s.kick:
		}
		if s.damage.Load() == nil {
			l.scrubOnce(ctx)
		}
		if interval > 0 {
			next = time.After(interval)
		}
	}
}

// ScrubNow asks the scrub to run now, and returns at once.
func (l *Log) ScrubNow() {
	select {
	case l.scrub.kick <- struct{}{}:
	default:
	}
}

// ScrubRuns returns how many scrubs have ended (clean or not) since Open,
// and the bytes the last one read.
func (l *Log) ScrubRuns() (runs uint64, bytesRead int64) {
	return l.scrub.runs.Load(), l.scrub.read.Load()
}

// Scrub verifies the whole log now, at the scrub's rate, and returns what
// Verify returns. It does not mark the log damaged; the scrub's goroutine
// does that.
func (l *Log) Scrub(ctx context.Context) (*Report, error) {
	rate := l.o.ScrubRate
	if rate <= 0 {
		rate = DefaultScrubRate
	}
	return verifyLog(ctx, l.path, VerifyOptions{Key: l.pub, Previous: l.o.Previous}, rate)
}

func sameSegments(a, b []Segment) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func (l *Log) scrubOnce(ctx context.Context) {
	s := &l.scrub
	began := time.Now()
	rep, err := l.Scrub(ctx)
	if ctx.Err() != nil {
		return
	}
	if rep != nil {
		s.read.Store(rep.BytesRead)
	}
	defer s.runs.Add(1)
	if err == nil {
		l.o.Journal.Send(journal.Entry{Priority: journal.Info, Always: true,
			Message: fmt.Sprintf("audit log %s: the scrub found the whole log intact: records %d–%d in %d files, %d bytes read in %s",
				l.path, rep.First, rep.Head.Seq, len(rep.Files), rep.BytesRead, time.Since(began).Round(time.Millisecond))})
		return
	}
	var ae *Error
	if !errors.As(err, &ae) {
		l.o.Journal.Send(journal.Entry{Priority: journal.Err, Key: "audit-scrub",
			Message: fmt.Sprintf("audit log %s: the scrub could not read the log (it tries again in %s): %v", l.path, l.o.ScrubInterval, err)})
		return
	}
	// Read once more before calling it damage: a file caught in the middle
	// of a write (the daemon's, or the attacker's) shows a state that no
	// longer holds. What the second reading finds is what is reported.
	select {
	case <-time.After(confirmWait):
	case <-ctx.Done():
		return
	}
	_, err = l.Scrub(ctx)
	if ctx.Err() != nil {
		return
	}
	if !errors.As(err, &ae) {
		if err != nil {
			l.o.Journal.Send(journal.Entry{Priority: journal.Err, Key: "audit-scrub",
				Message: fmt.Sprintf("audit log %s: the scrub could not read the log (it tries again in %s): %v", l.path, l.o.ScrubInterval, err)})
		}
		return
	}
	d := DamageOf(ae)
	d.Found = l.now().UTC().Format(time.RFC3339)
	l.setDamage(&d)
}

// setDamage marks the log damaged, durably, and tells everyone.
func (l *Log) setDamage(d *Damage) {
	b, _ := json.Marshal(d)
	werr := durable.ReplaceFile(DamagePath(l.path), append(b, '\n'), 0o600, nil)
	l.scrub.damage.Store(d)
	msg := fmt.Sprintf("audit log %s failed the scrub: %s; no grant is issued until an admin runs parley-keyd audit acknowledge --reason TEXT", l.path, d)
	if werr != nil {
		msg += fmt.Sprintf(" (the damage file could not be written, so a restart before the next scrub would not know: %v)", werr)
	}
	l.o.Journal.Send(journal.Entry{Priority: journal.Crit, Always: true, Message: msg,
		Fields: map[string]string{"MESSAGE_ID": MessageIDDamage, "PARLEY_AUDIT_DAMAGE": string(d.Reason),
			"PARLEY_AUDIT_SEQ": strconv.FormatUint(d.Seq, 10), "PARLEY_AUDIT_FILE": d.File}})
	l.publishDamage(d)
}

// Damage returns the damage the scrub found and no admin acknowledged yet,
// or nil. While it is not nil the daemon issues nothing.
func (l *Log) Damage() *Damage { return l.scrub.damage.Load() }

// SubscribeDamage returns a channel that receives the damage when the scrub
// finds it, and nil when it is acknowledged (the latest only, for a
// receiver that falls behind), and a function that ends the subscription.
func (l *Log) SubscribeDamage() (<-chan *Damage, func()) {
	s := &l.scrub
	ch := make(chan *Damage, 1)
	s.mu.Lock()
	s.subs[ch] = struct{}{}
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		delete(s.subs, ch)
		s.mu.Unlock()
	}
}

func (l *Log) publishDamage(d *Damage) {
	s := &l.scrub
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.subs {
		select {
		case <-ch:
		default:
		}
		ch <- d
	}
}

// checkAck acts on an admin's acknowledgement, if one waits: it names the
// damage the log holds, and then the log starts a new segment whose
// checkpoint is followed by a record of kind "acknowledged", signs it,
// removes the damage file and issues again. The answer goes to
// AcknowledgeResultPath; the acknowledgement file is removed either way.
func (l *Log) checkAck() {
	// Claimed first (renamed), so that an acknowledgement written while
	// this one is answered is not removed with it.
	path := AcknowledgePath(l.path)
	taken := path + ".taken"
	if err := os.Rename(path, taken); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			l.o.Journal.Send(journal.Entry{Priority: journal.Err, Key: "audit-ack",
				Message: fmt.Sprintf("audit log: the acknowledgement %s cannot be taken: %v", path, err)})
		}
		return
	}
	defer os.Remove(taken)
	f, err := os.OpenFile(taken, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	var ack Acknowledgement
	var res AcknowledgeResult
	if err == nil {
		err = json.NewDecoder(io.LimitReader(f, 64<<10)).Decode(&ack)
		f.Close()
	}
	cur := l.scrub.damage.Load()
	reason := strings.TrimSpace(ack.Reason)
	switch {
	case err != nil:
		res.Error = fmt.Sprintf("the acknowledgement %s could not be read: %v", path, err)
	case cur == nil:
		res.Error = "the log holds no damage to acknowledge"
	case !cur.Same(&ack.Damage):
		res.Error = fmt.Sprintf("the acknowledgement names other damage (%s) than the daemon found (%s)", ack.Damage.String(), cur)
	case reason == "":
		res.Error = "the acknowledgement gives no reason"
	default:
		seq, aerr := l.acknowledge(cur, cleanText(reason, maxAckReason), cleanText(ack.By, 128))
		if aerr != nil {
			res.Error = fmt.Sprintf("the acknowledgement could not be written to the log: %v", aerr)
		} else {
			res.OK, res.Seq = true, seq
		}
	}
	b, _ := json.Marshal(res)
	if werr := durable.ReplaceFile(AcknowledgeResultPath(l.path), append(b, '\n'), 0o600, nil); werr != nil {
		l.o.Journal.Send(journal.Entry{Priority: journal.Err, Message: fmt.Sprintf("audit log: the answer to an acknowledgement could not be written: %v", werr)})
	}
	if !res.OK {
		l.o.Journal.Send(journal.Entry{Priority: journal.Warning, Always: true, Message: "audit log: acknowledgement refused: " + res.Error})
	}
}

// acknowledge writes the acknowledgement of d into a new segment, signs it,
// and clears the damage. It returns the seq of the acknowledged record.
func (l *Log) acknowledge(d *Damage, reason, by string) (uint64, error) {
	var seq uint64
	err := l.do(func() error {
		if err := l.rotate(); err != nil {
			return err
		}
		rec := Record{Kind: KindAcknowledged, Decision: string(d.Reason), Damage: d,
			DecidedBy: &Decider{Approver: by, Channel: "terminal"},
			Message:   fmt.Sprintf("damage acknowledged by %s: %s; reason: %s", by, d, reason)}
		// The record and a checkpoint that covers it, at once.
		if err := l.commitInternal(rec); err != nil {
			return err
		}
		seq = l.seq
		return l.writeCheckpoint(checkpoint.ReasonRequest)
	})
	if err != nil {
		return 0, err
	}
	if err := os.Remove(DamagePath(l.path)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		l.o.Journal.Send(journal.Entry{Priority: journal.Err, Message: fmt.Sprintf("audit log: the damage file could not be removed (a restart finds the acknowledgement in the log and removes it): %v", err)})
	}
	durable.SyncDir(l.dir)
	l.scrub.damage.Store(nil)
	l.o.Journal.Send(journal.Entry{Priority: journal.Notice, Always: true,
		Message: fmt.Sprintf("audit log %s: damage acknowledged by %s in record %d (%s); issuance resumes", l.path, by, seq, reason)})
	l.publishDamage(nil)
	return seq, nil
}

// ackAt is an acknowledgement that begins a segment: files[file].
type ackAt struct {
	file int
	rec  Record
}

// findAcks finds the segments that begin with an acknowledgement: a
// checkpoint record, then a record of kind "acknowledged". It reads the
// first two lines of each file.
func findAcks(files []string) []ackAt {
	var acks []ackAt
	for i, name := range files {
		if i == 0 {
			continue
		}
		f, err := openLogFile(name)
		if err != nil {
			continue
		}
		br := bufio.NewReaderSize(io.LimitReader(f, 2*maxLine), 16<<10)
		first, ok1, _ := readLine(br)
		second, ok2, _ := readLine(br)
		f.Close()
		if !ok1 || !ok2 || !isCheckpointLine(first) {
			continue
		}
		var rec Record
		if json.Unmarshal(second, &rec) != nil || rec.Kind != KindAcknowledged || rec.Damage == nil {
			continue
		}
		acks = append(acks, ackAt{file: i, rec: rec})
	}
	return acks
}

// matchAck returns the index in acks of the acknowledgement of ae in a file
// after files[i], or -1.
func matchAck(acks []ackAt, i int, ae *Error) int {
	d := DamageOf(ae)
	for k, a := range acks {
		if a.file > i && a.rec.Damage.Same(&d) {
			return k
		}
	}
	return -1
}

// confirmWait is how long the scrub waits before it reads the log again to
// confirm damage.
const confirmWait = 200 * time.Millisecond

// errStopped ends a scrub whose log closed.
var errStopped = errors.New("the scrub was stopped")

// throttle bounds the bytes a second read through it.
type throttle struct {
	ctx   context.Context
	rate  int64
	start time.Time
	n     int64
}

func (t *throttle) wrap(r io.Reader) io.Reader {
	if t == nil {
		return r
	}
	return throttled{r, t}
}

type throttled struct {
	r io.Reader
	t *throttle
}

func (r throttled) Read(p []byte) (int, error) {
	t := r.t
	if t.ctx.Err() != nil {
		return 0, errStopped
	}
	if len(p) > 64<<10 {
		p = p[:64<<10]
	}
	n, err := r.r.Read(p)
	t.n += int64(n)
	due := t.start.Add(time.Duration(float64(t.n) / float64(t.rate) * float64(time.Second)))
	if wait := time.Until(due); wait > 0 {
		tm := time.NewTimer(wait)
		select {
		case <-tm.C:
		case <-t.ctx.Done():
			tm.Stop()
			return n, errStopped
		}
	}
	return n, err
}
