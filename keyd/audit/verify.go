package audit

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
)

// verifier checks records one line at a time, across the segments of a log.
type verifier struct {
	file      string
	line      int  // lines accepted in the current file
	lineKnown bool // the current file is read from its first line
	started   bool // a first record (or a start point) was accepted
	anyStart  bool // the first record may be a checkpoint with seq > 1 (a segment read on its own)
	n         uint64
	prev      string

	// Checkpoints: checked when checkpoints is true.
	checkpoints bool
	key         ed25519.PublicKey // nil: the key the first checkpoint names
	keyPinned   bool
	previous    []ed25519.PublicKey // keys rotated out, oldest first (rotation.go)
	keyAt       int                 // index in previous of the last key used; len(previous): key
	logID       string
	lastCP      *checkpoint.Checkpoint
	cpCount     int
	sinceCP     uint64 // records accepted after the last checkpoint record
	afterStop   uint64 // seq of the stop checkpoint the last record is, or 0
	startReason string // reason of the checkpoint the first record is, when it is not seq 1
	// seen is called for every accepted record.
	seen func(seq uint64, hash string, line []byte)
}

func (v *verifier) head() Head { return Head{Seq: v.n, Hash: v.prev} }

func (v *verifier) errorf(reason Reason, format string, args ...any) error {
	e := &Error{File: v.file, Seq: v.n + 1, Reason: reason, Detail: fmt.Sprintf(format, args...)}
	if v.lineKnown {
		e.Line = v.line + 1
	}
	return e
}

// newFile starts a file: line numbers count from its first line.
func (v *verifier) newFile(name string, fromStart bool) {
	v.file, v.line, v.lineKnown = name, 0, fromStart
}

// chained accepts a line that another line follows, reading only its seq
// and prev; the next line's prev then covers the rest of it. Anything
// unusual (a checkpoint, a first record, a record after a stop checkpoint)
// takes the full check of line, which then names the problem.
func (v *verifier) chained(line []byte) error {
	if !v.started || v.afterStop != 0 || (v.checkpoints && isCheckpointLine(line)) {
		return v.full(line)
	}
	seq, prev, ok := peek(line)
	if !ok || seq != v.n+1 || prev != v.prev {
		return v.full(line)
	}
	v.accept(line)
	return nil
}

func (v *verifier) accept(line []byte) {
	v.n++
	v.prev = lineHash(line)
	v.line++
	v.sinceCP++
	v.started = true
	if v.seen != nil {
		v.seen(v.n, v.prev, line)
	}
}

// full decodes line and checks everything about it.
func (v *verifier) full(line []byte) error {
	if bytes.IndexByte(line, 0) >= 0 {
		return v.errorf(ReasonMalformed, "the line holds NUL bytes (a crash before the data reached the disk, or damage)")
	}
	var rec Record
	if err := json.Unmarshal(line, &rec); err != nil {
		return v.errorf(ReasonMalformed, "not a valid record: %v", err)
	}
	if rec.Kind == "" {
		return v.errorf(ReasonMalformed, "record has no kind")
	}
	if _, err := time.Parse(time.RFC3339Nano, rec.Time); err != nil {
		return v.errorf(ReasonMalformed, "bad time %q", clean(rec.Time, 40))
	}
	isCP := rec.Kind == KindCheckpoint && v.checkpoints
	if !v.started {
		switch {
		case rec.Seq == 1 && rec.Prev == "":
		case v.anyStart && rec.Kind == KindCheckpoint && rec.Seq > 1:
			// A segment whose predecessors are elsewhere or removed: its
			// first record is the checkpoint that covers them, trusted
			// once its signature is checked below.
			v.n, v.prev = rec.Seq-1, rec.Prev
			if rec.Checkpoint != nil {
				v.startReason = rec.Checkpoint.Reason
			}
		case rec.Seq != 1:
			return v.errorf(ReasonSeq, "seq is %d, want 1 (records before it were removed)", rec.Seq)
		default:
			return v.errorf(ReasonSeq, "the first record has a non-empty prev (records before it were removed)")
		}
	}
	if rec.Seq != v.n+1 {
		return v.errorf(ReasonSeq, "seq is %d, want %d (a record was removed, inserted, duplicated or reordered)", rec.Seq, v.n+1)
	}
	if rec.Prev != v.prev {
		if v.n == 0 {
			return v.errorf(ReasonSeq, "the first record has a non-empty prev (records before it were removed)")
		}
		what := "line"
		if !v.lineKnown || v.line == 0 {
			what = "record"
		}
		ref := v.line
		if what == "record" {
			ref = int(v.n)
		}
		return v.errorf(ReasonChain, "prev does not match the hash of %s %d (that record was edited, or records were removed or inserted here)", what, ref)
	}
	if v.checkpoints && v.afterStop != 0 && !(isCP && rec.Checkpoint != nil && rec.Checkpoint.Reason == checkpoint.ReasonOpen) {
		return v.errorf(ReasonAfterStop, "a record of kind %q follows the stop checkpoint at seq %d; the daemon writes nothing there but the checkpoint of its next start, so it was added by someone else", clean(rec.Kind, 20), v.afterStop)
	}
	if isCP {
		if err := v.checkpoint(line, &rec); err != nil {
			return err
		}
	} else if rec.Checkpoint != nil && v.checkpoints {
		return v.errorf(ReasonCheckpoint, "a record of kind %q carries a checkpoint", clean(rec.Kind, 20))
	}
	v.accept(line)
	if isCP {
		v.sinceCP = 0
		if rec.Checkpoint.Reason == checkpoint.ReasonStop {
			v.afterStop = rec.Seq
		} else {
			v.afterStop = 0
		}
	} else {
		v.afterStop = 0
	}
	return nil
}

// checkpoint checks a checkpoint record: its signature, that it covers the
// record just before it, that it belongs to the same log as the others, and
// that its line is exactly as the log writes it (a checkpoint record is the
// last line of a closed log, which no later prev covers, so its bytes must
// be fixed by what is signed).
func (v *verifier) checkpoint(line []byte, rec *Record) error {
	cp := rec.Checkpoint
	if cp == nil {
		return v.errorf(ReasonCheckpoint, "checkpoint record without a checkpoint")
	}
	if err := v.verifyCheckpoint(cp); err != nil {
		return v.errorf(signatureReason(cp, v.key, v.previous), "%v", err)
	}
	if v.key == nil {
		v.key, _ = checkpoint.ParseKey(cp.Key)
	}
	if cp.Seq+1 != rec.Seq || cp.Hash != rec.Prev {
		return v.errorf(ReasonCheckpoint, "the checkpoint covers seq %d, not the record before it", cp.Seq)
	}
	if cp.Time != rec.Time {
		return v.errorf(ReasonCheckpoint, "the checkpoint record's time differs from the checkpoint's")
	}
	if v.logID == "" {
		v.logID = cp.Log
	} else if cp.Log != v.logID {
		return v.errorf(ReasonForeignLog, "checkpoint of log %s in log %s (records of another log were spliced in)", cp.Log, v.logID)
	}
	if cp.Seq == 0 && cp.Reason != checkpoint.ReasonCreate || cp.Seq > 0 && cp.Reason == checkpoint.ReasonCreate {
		return v.errorf(ReasonCheckpoint, "a checkpoint of reason %q at seq %d", cp.Reason, cp.Seq)
	}
	want := checkpointLine(rec.Seq, cp)
	if !bytes.Equal(want, line) {
		return v.errorf(ReasonCheckpoint, "the checkpoint record is not written as the log writes it (it was edited)")
	}
	v.lastCP = cp
	v.cpCount++
	return nil
}

// checkpointLine is the line of the checkpoint record with seq seq that
// holds cp.
func checkpointLine(seq uint64, cp *checkpoint.Checkpoint) []byte {
	rec := Record{Seq: seq, Prev: cp.Hash, Time: cp.Time, Kind: KindCheckpoint, Checkpoint: cp}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(&rec)
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// VerifyChain reads one audit log file and checks its chain: seq must run
// 1, 2, 3, … and every prev must be the hash of the line before (see Log).
// It returns the head of a valid log, or an *Error naming the first line
// that fails. An incomplete last line is reported as an error (Open repairs
// it); a last stretch of NUL bytes is not (the space a writer preallocated).
// It does not check checkpoints: Verify does, and also finds what the chain
// alone cannot (a cut tail, a rollback, a rewrite).
func VerifyChain(r io.Reader) (Head, error) {
	v := verifier{lineKnown: true}
	_, err := verifyStream(&v, r)
	if err != nil {
		return Head{}, err
	}
	return v.head(), nil
}

// verifyStream runs v over every line of r. It returns the number of NUL
// bytes that end r, which it ignores.
func verifyStream(v *verifier, r io.Reader) (nulTail int64, err error) {
	return verifyLines(v, r, 0, nil)
}

// verifyLines is verifyStream over r, whose first byte is at offset off of
// its file. settle, when set, is shown a line that looks damaged (raw: its
// bytes, with its newline if it has one) before it is called damage; it
// returns the file's bytes from the line's offset on if they have changed
// since, and then the line is read again from there.
func verifyLines(v *verifier, r io.Reader, off int64, settle func(off int64, raw []byte) io.Reader) (nulTail int64, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	// Every line but the last is checked through the chain alone (its
	// seq and prev; the next line's prev covers the rest of its bytes), as
	// Open does: decoding every record made the scrub of a long log cost
	// a core. The last line of the stream, a checkpoint, and anything
	// unusual get the full check (verifier.chained).
	var held []byte
	haveHeld := false
	last := func() error {
		if !haveHeld {
			return nil
		}
		haveHeld = false
		return v.full(held)
	}
	for {
		line, complete, err := readLine(br)
		if err == io.EOF {
			return 0, last()
		}
		if err != nil {
			if errors.Is(err, errStopped) {
				return 0, err
			}
			if lerr := last(); lerr != nil {
				return 0, lerr
			}
			return 0, v.errorf(ReasonMalformed, "%v", err)
		}
		if !complete && allZero(line) {
			return int64(len(line)), last()
		}
		if settle != nil && (!complete || bytes.IndexByte(line, 0) >= 0) {
			raw := line
			if complete {
				raw = append(line[:len(line):len(line)], '\n')
			}
			if again := settle(off, raw); again != nil {
				br.Reset(again)
				continue
			}
		}
		if !complete {
			if err := last(); err != nil {
				return 0, err
			}
			return 0, v.errorf(ReasonTorn, "incomplete last line (a crash during a write; opening the log cuts it)")
		}
		if haveHeld {
			if err := v.chained(held); err != nil {
				return 0, err
			}
		}
		held, haveHeld = append(held[:0], line...), true
		off += int64(len(line)) + 1
	}
}

// verifyFile reads a line that looks damaged again up to settleLine times,
// after waits of settleFirst doubling each time (127 ms in all), and at
// most settleTries times in all. (Fuzzing, which damages a log on every
// input, sets settleFirst to zero.)
const (
	settleLine  = 7
	settleTries = 32
)

var settleFirst = time.Millisecond

// verifyFile is verifyStream over a file that a running daemon may be
// writing. The daemon writes records in place over preallocated zeros, and
// the kernel does not make a read atomic with a write: a reader can see a
// record half copied, its start still NUL bytes and its end and newline
// already there, or its start followed by NULs. Such a line is read again,
// a few times over about 0.1 s: a write in progress changes it (the record
// is then read whole), damage stays as it is and is reported, a little
// later.
// (TestVerifyWhileWriting.)
func verifyFile(v *verifier, f *os.File, tr *throttle) (nulTail, read int64, err error) {
	tries := 0
	settle := func(off int64, raw []byte) io.Reader {
		// One byte past the line too: an incomplete last line has
		// changed if the file has grown past it.
		last := !bytes.HasSuffix(raw, []byte("\n"))
		now := make([]byte, len(raw)+1)
		for i, wait := 0, settleFirst; i < settleLine && tries < settleTries; i, wait = i+1, wait*2 {
			tries++
			time.Sleep(wait)
			n, _ := f.ReadAt(now, off)
			if n < len(raw) || !bytes.Equal(now[:len(raw)], raw) || last && n > len(raw) {
				return countingReader{tr.wrap(io.NewSectionReader(f, off, math.MaxInt64-off)), &read}
			}
		}
		return nil
	}
	nulTail, err = verifyLines(v, countingReader{tr.wrap(f), &read}, 0, settle)
	return nulTail, read, err
}

// VerifyOptions say what Verify checks a log against.
type VerifyOptions struct {
	// Key is the key every checkpoint must be signed with: the daemon's
	// principal key (principal.pub). Without it, Verify checks signatures
	// under the key the first checkpoint names and says so in the report:
	// that proves the checkpoints consistent, not who made them.
	Key ed25519.PublicKey
	// Previous are principal keys rotated out, oldest first, which may have
	// signed the checkpoints before Key's first (rotation.go). Only with Key.
	Previous []ed25519.PublicKey
	// Checkpoints were kept elsewhere (a witness, the journal, an
	// approver). Each must be of this log and match it: a record at its
	// seq with its hash. One with a seq beyond the log's last record means
	// the log was cut or rolled back.
	Checkpoints []*checkpoint.Checkpoint
	// Segment verifies the file at path alone, not the segments around
	// it. Its first record must be the log's first (seq 1) or a checkpoint
	// record; After, if set, must be the checkpoint that first record
	// follows.
	Segment bool
	After   *checkpoint.Checkpoint
}

// Report is what Verify found in a log that verifies.
type Report struct {
	Files   []string
	First   uint64 // seq of the first record read
	Head    Head   // the last record
	Records uint64 // records read
	// Checkpoints counts checkpoint records; LastCheckpoint is the last.
	Checkpoints    int
	LastCheckpoint *checkpoint.Checkpoint
	// Unsigned counts the records after the last checkpoint: the daemon
	// is running and has not made its next checkpoint yet, or it stopped
	// without its stop checkpoint (killed, or a full disk at stop; its next
	// start says so in a "recovered" record). Only a witness or the
	// journal vouches for them.
	Unsigned uint64
	// Stopped is true when the log ends with the daemon's stop checkpoint.
	Stopped bool
	// Key is the key the checkpoints are signed with; KeyPinned says
	// whether it was given (VerifyOptions.Key) or taken from the log.
	Key       string
	KeyPinned bool
	// Matched are the checkpoints of VerifyOptions that matched a record;
	// Older are those of seq before the first record read (in a segment
	// that was removed, or not read), which could not be checked.
	Matched, Older []*checkpoint.Checkpoint
	// NULTail is the number of NUL bytes after the last record (space
	// preallocated, or a crash before data reached the disk), ignored.
	NULTail int64
	// Acknowledged are the records of kind "acknowledged" that named damage
	// Verify found: verification went on after each.
	Acknowledged []Record
	// BytesRead counts the bytes read from the log's files.
	BytesRead int64
}

// Verify checks the log whose active segment is at path: every segment in
// order (or the one file with VerifyOptions.Segment), the chain across
// them, every checkpoint's signature and place, and the log against the
// checkpoints kept elsewhere. It returns a report, or an *Error naming the
// file and line of the first problem and its Reason (an outside checkpoint
// that the log contradicts is one too, and errors.Is(err, ErrCheckpoint)).
//
// What it detects besides the chain's breaks: an edited record before any
// checkpoint (the checkpoint's hash no longer matches); records appended
// after the daemon's stop checkpoint; an empty log; a log whose checkpoints
// were made with another key. Given an outside checkpoint made after the
// fact, also a cut tail, a rollback to an older copy, a chain recomputed
// after an edit, and a rewrite.
//
// Damage an admin acknowledged (parley-keyd audit acknowledge: a segment
// that begins with a checkpoint and a record of kind "acknowledged" naming
// it) is not an error: Report.Acknowledged lists it, and verification goes
// on from that segment.
func Verify(path string, o VerifyOptions) (*Report, error) {
	return verifyLog(context.Background(), path, o, 0)
}

// verifyLog is Verify, reading at most rate bytes a second (0: as fast as
// it can) until ctx ends.
func verifyLog(ctx context.Context, path string, o VerifyOptions, rate int64) (*Report, error) {
	var files []string
	var fds []*os.File
	defer func() {
		for _, f := range fds {
			f.Close()
		}
	}()
	if o.Segment {
		files = []string{path}
	} else {
		// Every segment is opened before any is read, and the list is
		// taken again after: a segment that a running daemon closed
		// meanwhile (the active file renamed, a new one at its path) or
		// that retention removed would otherwise break the chain where
		// nothing broke. An open file stays readable whatever its name.
		for try := 0; ; try++ {
			segs, err := Segments(path)
			if err != nil {
				return nil, err
			}
			if len(segs) == 0 {
				// Nothing to verify is not a verification that failed: the
				// caller named a log that is not there (exit 1, not 3).
				return nil, fmt.Errorf("audit log %s: no such log: %w", path, fs.ErrNotExist)
			}
			if !segs[len(segs)-1].Active {
				return nil, &Error{File: path, Reason: ReasonSegmentLink, Detail: "the active segment is missing, but closed segments exist (it was deleted or moved)"}
			}
			files, fds = files[:0], fds[:0]
			var oerr error
			for _, s := range segs {
				f, err := openLogFile(s.Path)
				if err != nil {
					oerr = err
					break
				}
				files, fds = append(files, s.Path), append(fds, f)
			}
			again, err := Segments(path)
			if err == nil && oerr == nil && sameSegments(segs, again) {
				if n := len(fds); n >= 2 && sameFile(fds[n-2], fds[n-1]) {
					// A rotation between its two steps: the active file
					// has its closed name already, and still its own
					// (finishRotation). It is read once, as the active one.
					fds[n-2].Close()
					files = append(files[:n-2], files[n-1])
					fds = append(fds[:n-2], fds[n-1])
				}
				break
			}
			for _, f := range fds {
				f.Close()
			}
			fds = nil
			if try == 4 {
				if oerr == nil {
					oerr = errors.New("its segments kept changing while they were opened")
				}
				return nil, &Error{File: filepath.Base(path), Reason: ReasonUnreadable, Detail: oerr.Error()}
			}
		}
	}
	rep := &Report{Files: files}
	want := map[uint64][]*checkpoint.Checkpoint{}
	for _, cp := range o.Checkpoints {
		if err := verifyAnyKey(cp, o.Key, o.Previous); err != nil {
			return nil, &Error{Seq: cp.Seq, Reason: witnessSigReason(cp, o.Key, o.Previous), Detail: fmt.Sprintf("the checkpoint of record %d kept elsewhere does not verify: %v", cp.Seq, err)}
		}
		want[cp.Seq] = append(want[cp.Seq], cp)
	}
	if o.After != nil {
		if err := verifyAnyKey(o.After, o.Key, o.Previous); err != nil {
			return nil, &Error{Seq: o.After.Seq, Reason: witnessSigReason(o.After, o.Key, o.Previous), Detail: fmt.Sprintf("the checkpoint given with --after does not verify: %v", err)}
		}
	}
	v := verifier{checkpoints: true, key: o.Key, keyPinned: o.Key != nil, anyStart: true}
	if o.Key != nil {
		v.previous = o.Previous
	}
	var mismatch error
	v.seen = func(seq uint64, hash string, line []byte) {
		if rep.Records == 0 {
			rep.First = seq
			if o.After != nil && (o.After.Seq+1 != seq || o.After.Hash != v.prevBefore(line)) {
				mismatch = &Error{File: v.file, Line: v.line + 1, Seq: seq, Reason: ReasonWitness, Detail: fmt.Sprintf("the first record (seq %d) does not follow the checkpoint given with --after (seq %d)", seq, o.After.Seq)}
			}
		}
		rep.Records++
		for _, cp := range want[seq] {
			if cp.Hash != hash && mismatch == nil {
				mismatch = &Error{File: v.file, Line: v.line + 1, Seq: seq, Reason: ReasonRewritten, Detail: fmt.Sprintf("record %d differs from the checkpoint of %s kept elsewhere (the log was rewritten from there on, or its chain recomputed after an edit)", seq, cp.Time)}
			}
			if cp.Log != v.logID && v.logID != "" && mismatch == nil {
				mismatch = &Error{File: v.file, Seq: seq, Reason: ReasonForeignLog, Detail: fmt.Sprintf("the checkpoint kept elsewhere is of log %s, this log is %s", cp.Log, v.logID)}
			}
			rep.Matched = append(rep.Matched, cp)
		}
	}
	var acks []ackAt
	if !o.Segment {
		acks = findAcks(files)
	}
	var tr *throttle
	if rate > 0 {
		tr = &throttle{ctx: ctx, rate: rate, start: time.Now()}
	}
	for i := 0; i < len(files); i++ {
		name := files[i]
		var f *os.File
		if fds != nil {
			f = fds[i]
			if _, err := f.Seek(0, io.SeekStart); err != nil {
				return nil, &Error{File: filepath.Base(name), Reason: ReasonUnreadable, Detail: err.Error()}
			}
		} else {
			var err error
			if f, err = openLogFile(name); err != nil {
				return nil, fmt.Errorf("audit log: %w", err)
			}
			defer f.Close()
		}
		v.newFile(filepath.Base(name), true)
		nul, read, err := verifyFile(&v, f, tr)
		rep.BytesRead += read
		if err == nil && mismatch != nil {
			err = mismatch
		}
		if err == nil && nul > 0 && i < len(files)-1 {
			err = &Error{File: filepath.Base(name), Reason: ReasonSegmentLink, Detail: fmt.Sprintf("a closed segment ends with %d NUL bytes", nul)}
		}
		if err == nil && v.line == 0 {
			err = &Error{File: filepath.Base(name), Reason: ReasonEmpty, Detail: "empty: every segment the daemon writes begins with a checkpoint record (the file was emptied or truncated)"}
		}
		if err == nil && i == 0 && !o.Segment && v.startReason != "" && v.startReason != checkpoint.ReasonRotate {
			// Retention removes whole segments, and the oldest left
			// begins with the checkpoint of a rotation. Any other start
			// means records went missing with no segment to show.
			err = &Error{File: filepath.Base(name), Line: 1, Reason: ReasonSegmentLink, Detail: fmt.Sprintf("the log's first file begins at record %d with a %s checkpoint: the records before it are in no file of the log (the file that held them was truncated or lost under the daemon; a recovered record after this one says what happened)", rep.First, v.startReason)}
		}
		if err != nil {
			var ae *Error
			if !errors.As(err, &ae) {
				return nil, err
			}
			// Damage an admin acknowledged: go on from the segment that
			// begins with the acknowledgement, as from a segment read on
			// its own (its first record is a signed checkpoint).
			k := matchAck(acks, i, ae)
			if k < 0 {
				return nil, err
			}
			rep.Acknowledged = append(rep.Acknowledged, acks[k].rec)
			logID, cps := v.logID, v.cpCount
			v = verifier{checkpoints: true, key: v.key, keyPinned: v.keyPinned, anyStart: true, previous: v.previous, keyAt: v.keyAt, logID: logID, cpCount: cps, seen: v.seen}
			mismatch = nil
			i = acks[k].file - 1
			continue
		}
		rep.NULTail = nul
	}
	rep.Head = v.head()
	rep.Checkpoints, rep.LastCheckpoint, rep.Unsigned = v.cpCount, v.lastCP, v.sinceCP
	rep.Stopped = v.afterStop != 0
	rep.KeyPinned = o.Key != nil
	if v.key != nil {
		rep.Key = checkpoint.FormatKey(v.key)
	}
	if v.lastCP == nil {
		return rep, &Error{File: filepath.Base(path), Reason: ReasonNoCheckpoint, Detail: "no checkpoint in the log: nothing signed vouches for it (a log written before checkpoints, or rewritten without them)"}
	}
	for _, cp := range o.Checkpoints {
		switch {
		case cp.Log != v.logID:
			return rep, &Error{Seq: cp.Seq, Reason: ReasonForeignLog, Detail: fmt.Sprintf("the checkpoint of record %d kept elsewhere is of log %s, this log is %s", cp.Seq, cp.Log, v.logID)}
		case cp.Seq > rep.Head.Seq:
			reason, what := ReasonTruncated, "the log was cut"
			if rep.Stopped {
				reason, what = ReasonRollback, "the log was rolled back to an older copy"
			}
			return rep, &Error{Seq: cp.Seq, Reason: reason, Detail: fmt.Sprintf("a checkpoint kept elsewhere (%s) covers record %d, but the log ends at record %d: %s", cp.Time, cp.Seq, rep.Head.Seq, what)}
		case cp.Seq == 0 && rep.First == 1:
			rep.Matched = append(rep.Matched, cp) // the empty log it covers begins this one
		case cp.Seq < rep.First:
			rep.Older = append(rep.Older, cp)
		}
	}
	return rep, nil
}

func sameFile(a, b *os.File) bool {
	x, err1 := a.Stat()
	y, err2 := b.Stat()
	return err1 == nil && err2 == nil && os.SameFile(x, y)
}

// signatureReason says why cp did not verify under key (or, with previous
// keys, under any of them): it names another key, or its signature fails.
func signatureReason(cp *checkpoint.Checkpoint, key ed25519.PublicKey, previous []ed25519.PublicKey) Reason {
	named, err := checkpoint.ParseKey(cp.Key)
	if err != nil || key == nil || key.Equal(named) {
		return ReasonCheckpointSignature
	}
	for _, p := range previous {
		if p.Equal(named) {
			return ReasonCheckpointSignature
		}
	}
	return ReasonForeignKey
}

// witnessSigReason is signatureReason for a checkpoint kept elsewhere: one
// under another key is a foreign key, any other failure the witness's.
func witnessSigReason(cp *checkpoint.Checkpoint, key ed25519.PublicKey, previous []ed25519.PublicKey) Reason {
	if r := signatureReason(cp, key, previous); r == ReasonForeignKey {
		return r
	}
	return ReasonWitness
}

// prevBefore returns the prev of line (the hash of the record before it).
func (v *verifier) prevBefore(line []byte) string {
	_, prev, _ := peek(line)
	return prev
}
