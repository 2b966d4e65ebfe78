package audit

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/durable"
	"github.com/parley-keyd/parley-keyd/internal/journal"
	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"

	"golang.org/x/sys/unix"
)

// maxBatch caps the records committed by one write and fsync.
const maxBatch = 512

// Defaults of Options.
const (
	DefaultCheckpointEvery    = 1000
	DefaultCheckpointInterval = time.Minute
	DefaultSegmentSize        = 64 << 20
	DefaultFoldWindow         = time.Second
	DefaultWitnessTimeout     = 10 * time.Second
	DefaultStartRetry         = 2 * time.Second
)

// Journal MESSAGE_IDs of the entries the log writes, for journalctl
// MESSAGE_ID=… queries.
const (
	MessageIDRecord     = "cad88f6d6b9041fa8e76b07064f7b989" // one audit record
	MessageIDCheckpoint = "1656b5628b244491a3bd9d3e6a921053" // a checkpoint (also a record)
	MessageIDVanished   = "106d1bb2510f4c649946c87fa4238944" // the log's file vanished under the daemon
)

// Options configure a Log. The zero value opens a log without checkpoints,
// segments or witnesses, as tools and tests use; the daemon sets Signer.
type Options struct {
	// Signer signs checkpoints. It must hold an Ed25519 key and sign pure
	// Ed25519, as the principal key's signers do (docs/audit.md says why the
	// daemon passes its principal signer). The checkpoint's message is
	// built by this package and can never be a Parley grant or proof
	// (see Checkpoint). Without a Signer there are no checkpoints, no
	// segments and no Reopen, and Open reads the whole log.
	Signer crypto.Signer
	// Previous are principal keys rotated out, oldest first: the log's
	// checkpoints before the first one Signer makes may be theirs
	// (rotation.go). New checkpoints are always Signer's.
	Previous []ed25519.PublicKey
	// Witnesses receive every checkpoint once it is durable in the log, in
	// order, the latest first when they fall behind. Those that can read
	// back (WitnessReader) are compared with the log when it is opened.
	Witnesses []Witness
	// Journal receives every record as a structured entry, and what the
	// log notices (a vanished file, a failed witness) at high priority.
	Journal *journal.Logger
	// CheckpointEvery and CheckpointInterval say when to checkpoint: after
	// that many records, or that long after the last checkpoint when
	// records came since. Zero means the defaults.
	CheckpointEvery    int
	CheckpointInterval time.Duration
	// SegmentSize and SegmentAge say when to start a new segment: when the
	// active one reaches that size, or is that old. SegmentSize zero means
	// DefaultSegmentSize; SegmentAge zero means no limit.
	SegmentSize int64
	SegmentAge  time.Duration
	// Retain removes closed segments whose last record is older than this,
	// once every witness has a checkpoint after them. Zero keeps them all.
	Retain time.Duration
	// Preallocate, when above zero, makes the log write zeros ahead of its
	// last record, this much at a time, and then write records in place,
	// made durable with fdatasync: about half the cost of an fsync that
	// appends on ext4 (issue 15, BenchmarkWriteSync). The zeros are written
	// by the writer goroutine whenever less than half of this is left
	// (growAhead), not by a request's commit. The space written ahead is a
	// reserve: records go on being written into it when the disk is
	// full, and Append refuses only when it is used up. Readers here stop
	// at the zeros, and the log cuts them when it closes; tail -f and
	// other tools that watch the file's length do not see records written
	// in place (use audit show --follow). A file with the append-only
	// attribute is appended to regardless. Zero appends with O_APPEND
	// and fsync.
	Preallocate int64
	// FoldWindow is how long AppendFolded folds repeats into one record.
	FoldWindow time.Duration
	// WitnessTimeout bounds one delivery to one witness.
	WitnessTimeout time.Duration
	// Deferred makes Open check the log and write nothing to it: the
	// checkpoint that opens the log (or creates it), and the records of
	// what Open found, wait for Start, which the daemon calls once it is
	// sure to serve. When the Signer cannot sign then (a key service that
	// is down), the log tries again every StartRetry until it can; until
	// it has, Append refuses with a *WaitingError (ErrUnavailable).
	Deferred bool
	// StartRetry is how often a deferred log tries its open checkpoint
	// again; zero means DefaultStartRetry.
	StartRetry time.Duration
	// ScrubInterval, when above zero, makes the log verify itself whole in
	// the background right after Open and then every ScrubInterval, reading
	// at most ScrubRate bytes a second (zero: DefaultScrubRate); see
	// scrub.go. With a Signer, a log whose damage file exists is damaged
	// from Open on, scrub or not.
	ScrubInterval time.Duration
	ScrubRate     int64
	// ScrubDelay is how long after Open the first scrub begins (at most
	// ScrubInterval); zero means DefaultScrubDelay.
	ScrubDelay time.Duration
	// Now is the clock and Rand the source of a new log's id; nil means
	// time.Now and crypto/rand.
	Now  func() time.Time
	Rand io.Reader
}

// Head names the last record of a log: its seq and the hash of its line,
// which is what the next record's prev will hold. A log with no records has
// Seq 0 and Hash "".
type Head struct {
	Seq  uint64
	Hash string
}

// Log is the daemon's append-only, hash-chained audit log: one JSON
// object per line, in files only the daemon's user can write.
//
// # Chain
//
// Record n (counting from 1) has "seq": n. Its "prev" is the hash of record
// n-1: the unpadded base64url encoding (RFC 4648 §5) of the SHA-256 of that
// record's line, exactly the bytes on disk without the final newline. The
// first record has "prev": "". Removing, editing, reordering, duplicating or
// inserting a record therefore breaks either the seq sequence or a prev, and
// Verify names the first line where it breaks.
//
// # Checkpoints
//
// With a Signer, the log signs its head every CheckpointEvery records or
// CheckpointInterval, when it opens, when it starts a segment, and when it
// closes, writes that Checkpoint as a record and hands it to the witnesses
// and the journal. Someone who can write the files can still cut the tail
// or rewrite records after the last checkpoint, and roll the whole log back;
// a checkpoint kept outside the daemon's reach shows all three (Verify).
//
// # Durability
//
// Append returns only after its record is written and fsynced, so the
// daemon calls it before a grant leaves the process and refuses the request
// when it fails. Concurrent appends are committed in groups: the first
// appender to find the log idle takes every record waiting by then, writes
// them with one write, fsyncs once, and then answers every waiter; one
// that queued meanwhile commits the next group. When a write or
// fsync fails, the file is truncated back to the end of the last committed
// record, so no partial line is left behind, and every record of the group
// gets the error. If even that truncation fails (a read-only filesystem),
// the next Append retries it first: the log resumes by itself once the disk
// takes writes again.
//
// Before every write the log checks that the file at its path is still the
// one it writes, with the length it wrote; if not, Append fails with a
// *VanishedError until the file is back or Reopen starts a new segment.
type Log struct {
	path string
	dir  string
	o    Options
	pub  ed25519.PublicKey // the signer's key, or nil
	now  func() time.Time

	ctl  chan func()
	grow chan struct{} // (buffer 1) the reserve fell under half: the writer goroutine grows it
	stop chan struct{} // closed by Close: the writer goroutine finishes
	done chan struct{} // closed when the writer goroutine has returned

	mu     sync.RWMutex // guards closed; held for reading while queueing a record or sending on ctl
	closed bool

	pmu     sync.Mutex
	pending []*request // records queued for the next commit, in order

	// wmu is held by whoever writes: an appender committing the pending
	// records (the leader), or the writer goroutine (ticks, do, Close).
	// What follows is guarded by it once Open returns.
	wmu       sync.Mutex
	f         *os.File
	seq       uint64
	head      string
	off       int64 // end of the last committed record
	end       int64 // the file's length as the log left it: off, or more with a preallocated tail
	pre       bool  // the tail is preallocated: records are written in place and made durable with fdatasync
	dirty     int64 // bytes after off that a failed write may have left, to take back before the next write
	vanished  *VanishedError
	logID     string
	segFirst  uint64    // seq of the active segment's first record
	segTime   time.Time // time of the active segment's first record
	sinceCP   int       // records since the last checkpoint record
	lastCPAt  time.Time
	cpRetry   time.Time              // no checkpoint attempt before (after a failed one)
	segRetry  time.Time              // no new segment attempt before
	growRetry time.Time              // no attempt to grow the reserve ahead before (after a failed one)
	retainAt  time.Time              // retention runs at this time or later, if set
	created   *checkpoint.Checkpoint // the first checkpoint of a log Open created
	buf       bytes.Buffer
	written   []written // commit's, kept for the next group
	closeErr  error

	// A deferred log (Options.Deferred) until its open checkpoint is
	// written: what Open found, Start's records, when to try again. A log
	// that did not exist has no file yet (f is nil, toCreate set).
	waiting      *openState
	then         []Record
	startReq     bool
	startAt      time.Time
	toCreate     bool
	reserved     *os.File // the locked temporary file a deferred new log starts as
	reservedPath string
	started      atomic.Bool
	opened       chan struct{} // closed once the open checkpoint is written
	waitErr      error         // why the last attempt failed; guarded by headMu

	headMu   sync.Mutex
	headCopy Head
	cpCopy   *checkpoint.Checkpoint

	folds folds
	wit   witnessState
	subs  subscribers
	scrub scrubState

	quiet    atomic.Bool   // Open failed: close without a stop checkpoint
	syncs    atomic.Uint64 // fsyncs issued by the writer; read by tests and benchmarks
	inline   atomic.Uint64 // preallocations a commit had to make itself (not ahead); read by tests
	openRead int64         // bytes Open read from the log; read by tests
}

type request struct {
	rec      Record
	internal bool // a record the log itself writes (checkpoint, recovered, folded)
	seq      uint64
	err      error
	done     chan struct{} // nil for internal records
	lead     chan struct{} // (buffer 1) its appender is to try to commit the pending records
}

// Open opens the audit log whose active segment is at path, creating it
// with mode 0600 when neither it nor any closed segment exists, and returns
// once the log has been checked and is ready for Append.
//
// With a Signer, Open reads only the active segment's last checkpoint and
// the records after it, so its cost does not depend on the log's length; it
// checks that checkpoint's signature, the record it covers and the chain
// after it, and compares the log with what each WitnessReader kept. A log
// without any checkpoint (written before checkpoints existed) is read whole
// once and then continued in a new segment. Without a Signer, Open reads
// and checks the whole file.
//
// After the last record, a torn line (a crash during a write) or a
// stretch holding NUL bytes (a power cut before the data reached the disk)
// was never acknowledged, since acknowledgement follows the fsync: Open
// cuts it, whatever its bytes, and writes a record of kind "recovered" that
// gives its size, hash and first bytes. It also writes one when the
// previous run ended without its stop checkpoint. Any other damage (a
// corrupt record, a broken chain, a bad checkpoint, an empty file, records
// after the stop checkpoint, a witness that holds a later checkpoint) makes
// Open fail with an error that names what and where; the daemon must not
// add records to a log it cannot vouch for.
//
// The file is locked (flock) for as long as the log is open, so a second
// daemon on the same state folder cannot interleave its own chain.
func (o Options) Open(path string) (*Log, error) {
	if o.CheckpointEvery <= 0 {
		o.CheckpointEvery = DefaultCheckpointEvery
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = DefaultCheckpointInterval
	}
	if o.SegmentSize <= 0 {
		o.SegmentSize = DefaultSegmentSize
	}
	if o.FoldWindow <= 0 {
		o.FoldWindow = DefaultFoldWindow
	}
	if o.WitnessTimeout <= 0 {
		o.WitnessTimeout = DefaultWitnessTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Reader
	}
	if o.StartRetry <= 0 {
		o.StartRetry = DefaultStartRetry
	}
	l := &Log{
		opened: make(chan struct{}),
		path:   path,
		dir:    filepath.Dir(path),
		o:      o,
		now:    o.Now,
		ctl:    make(chan func()),
		grow:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	if o.Signer != nil {
		pub, ok := o.Signer.Public().(ed25519.PublicKey)
		if !ok {
			return nil, errors.New("audit log: the checkpoint signer is not an Ed25519 key")
		}
		l.pub = pub
	}
	l.folds.init()
	l.subs.init()
	f, created, err := l.openActive()
	if err != nil {
		return nil, err
	}
	st := &openState{created: true}
	if f != nil {
		l.f = f
		st, err = l.load(created)
		if err != nil {
			f.Close()
			return nil, l.withWitnesses(err)
		}
		l.setMode()
	}
	l.headCopy = Head{Seq: l.seq, Hash: l.head}
	l.wit.init(l)
	go l.writer()
	if err := l.afterOpen(st); err != nil {
		l.closeQuiet()
		return nil, err
	}
	l.startScrub()
	return l, nil
}

// flags for the active segment. O_APPEND lets an admin set the append-only
// attribute (chattr +a); O_NOFOLLOW: a symlink planted in the state folder
// must not redirect the log into a file the attacker can read or truncate.
const fileFlags = os.O_RDWR | os.O_APPEND | syscall.O_NOFOLLOW

// openActive opens and locks the active segment, creating the log when it
// does not exist at all.
func (l *Log) openActive() (f *os.File, created bool, err error) {
	f, err = os.OpenFile(l.path, fileFlags, 0)
	if err == nil {
		if err := lock(f, l.path); err != nil {
			f.Close()
			return nil, false, err
		}
		if err := l.finishRotation(f); err != nil {
			f.Close()
			return nil, false, err
		}
		return f, false, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, false, fmt.Errorf("open audit log: %w", err)
	}
	// A log that is gone while its closed segments remain was deleted or
	// moved: starting a new chain here would hide that.
	segs, err := Segments(l.path)
	if err != nil {
		return nil, false, err
	}
	if len(segs) > 0 {
		return nil, false, fmt.Errorf("audit log %s is missing, but %d closed segments of it remain (it was deleted or moved; restore it, or move all of them aside to start a new log)", l.path, len(segs))
	}
	if l.pub == nil {
		f, err = os.OpenFile(l.path, fileFlags|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, false, fmt.Errorf("open audit log: %w", err)
		}
		if err := lock(f, l.path); err != nil {
			f.Close()
			return nil, false, err
		}
		// Make the new file's name durable too, not only its contents.
		if err := syncDir(l.dir); err != nil {
			f.Close()
			return nil, false, err
		}
		return f, true, nil
	}
	id := make([]byte, 16)
	if _, err := io.ReadFull(l.o.Rand, id); err != nil {
		return nil, false, fmt.Errorf("audit log id: %w", err)
	}
	l.logID = base64.RawURLEncoding.EncodeToString(id)
	if l.o.Deferred {
		// Made by Start, signed; until then the log's temporary file,
		// empty and locked, keeps a second daemon out.
		rf, tmp, err := l.reserve()
		if err != nil {
			return nil, false, err
		}
		l.toCreate, l.reserved, l.reservedPath = true, rf, tmp
		return nil, true, nil
	}
	f, err = l.create()
	return f, err == nil, err
}

// create makes a new signed log at the log's path. A signed log appears
// there already holding its first checkpoint, so an empty file is never a
// log the daemon wrote.
func (l *Log) create() (*os.File, error) {
	cp, err := l.makeCheckpoint(checkpoint.ReasonCreate, 0, "")
	if err != nil {
		return nil, err
	}
	line := checkpointLine(1, cp)
	place := func(f *os.File) error {
		if err := os.Link(f.Name(), l.path); err != nil {
			return fmt.Errorf("create audit log: %w", err)
		}
		return nil
	}
	var f *os.File
	if l.reserved != nil {
		f, err = l.fill(l.reserved, l.reservedPath, place, append(line, '\n'))
		l.reserved = nil
	} else {
		f, err = l.newFile(place, append(line, '\n'))
	}
	if err != nil {
		return nil, err
	}
	if l.o.Journal != nil {
		l.journalRecord(line, &Record{Seq: 1, Time: cp.Time, Kind: KindCheckpoint, Checkpoint: cp}, lineHash(line))
	}
	l.created = cp
	return f, nil
}

// finishRotation undoes a rotation that a crash interrupted after the
// active segment got its closed name and before the new segment took the
// path: the same file under both names. The closed name goes; the file
// stays the active segment.
func (l *Log) finishRotation(f *os.File) error {
	segs, err := Segments(l.path)
	if err != nil || len(segs) < 2 {
		return err
	}
	last := segs[len(segs)-2]
	var a, b unix.Stat_t
	if unix.Fstat(int(f.Fd()), &a) != nil || unix.Lstat(last.Path, &b) != nil || a.Dev != b.Dev || a.Ino != b.Ino {
		return nil
	}
	if err := os.Remove(last.Path); err != nil {
		return fmt.Errorf("undo an interrupted rotation of the audit log: %w", err)
	}
	return syncDir(l.dir)
}

// newFile writes first into a new, locked temporary file in the log's
// folder, fsyncs it, calls place (which puts it at its name) and fsyncs the
// folder. It returns the file open with fileFlags.
func (l *Log) newFile(place func(*os.File) error, first []byte) (*os.File, error) {
	f, tmp, err := l.reserve()
	if err != nil {
		return nil, err
	}
	return l.fill(f, tmp, place, first)
}

// reserve creates and locks the temporary file a new segment (or log)
// starts as. Held, it also keeps a second daemon from creating the log.
func (l *Log) reserve() (*os.File, string, error) {
	tmp := filepath.Join(l.dir, "."+filepath.Base(l.path)+".new")
	f, err := os.OpenFile(tmp, fileFlags|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		// Left by a crash, or by another daemon creating its log now.
		old, oerr := os.OpenFile(tmp, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if oerr == nil {
			lerr := unix.Flock(int(old.Fd()), unix.LOCK_EX|unix.LOCK_NB)
			old.Close()
			if lerr != nil {
				return nil, "", fmt.Errorf("audit log %s: %w", l.path, ErrInUse)
			}
		}
		os.Remove(tmp)
		f, err = os.OpenFile(tmp, fileFlags|os.O_CREATE|os.O_EXCL, 0o600)
	}
	if err != nil {
		return nil, "", fmt.Errorf("create audit log segment: %w", err)
	}
	if err := lock(f, tmp); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, "", err
	}
	return f, tmp, nil
}

// fill writes first into f, the file reserve made at tmp, fsyncs it, calls
// place and fsyncs the folder. On failure f is closed and tmp removed.
func (l *Log) fill(f *os.File, tmp string, place func(*os.File) error, first []byte) (*os.File, error) {
	fail := func(err error) (*os.File, error) {
		f.Close()
		os.Remove(tmp)
		return nil, err
	}
	if _, err := f.Write(first); err != nil {
		return fail(unavailable("write audit log segment", err))
	}
	if err := f.Sync(); err != nil {
		return fail(unavailable("sync audit log segment", err))
	}
	l.syncs.Add(1)
	if err := place(f); err != nil {
		return fail(err)
	}
	os.Remove(tmp) // a link left it at its name too; a rename took it away already
	if err := syncDir(l.dir); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func lock(f *os.File, path string) error {
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("audit log %s: %w", path, ErrInUse)
		}
		return fmt.Errorf("lock audit log %s: %w", path, err)
	}
	return nil
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

func syncDir(dir string) error {
	if err := durable.SyncDir(dir); err != nil {
		return fmt.Errorf("sync audit log folder: %w", err)
	}
	return nil
}

// openState is what load found that afterOpen must act on.
type openState struct {
	tornOff  int64
	torn     tornTail
	lastCP   *checkpoint.Checkpoint
	sinceCP  uint64 // records after the last checkpoint
	stopped  bool   // the log ended with a stop checkpoint
	migrate  bool   // a log without checkpoints, to continue in a new segment
	created  bool
	tailFrom uint64            // first seq whose hash is in hashes
	hashes   map[uint64]string // hashes of the records read
}

type tornTail struct {
	size int64
	hash string
	head []byte
	nul  bool // nothing but NUL bytes
}

// load reads the active segment: the last checkpoint and what follows with
// a Signer, all of it without. It leaves the head in l.
func (l *Log) load(created bool) (*openState, error) {
	st := &openState{created: created, hashes: map[uint64]string{}}
	fi, err := l.f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat audit log: %w", err)
	}
	// Tampering: a log that others can write is a log anyone can rewrite.
	if err := checkOwner(l.path, fi); err != nil {
		return nil, err
	}
	size := fi.Size()
	if size == 0 {
		if l.pub != nil {
			return nil, &Error{File: l.path, Reason: ReasonEmpty, Detail: "the file is empty; a log the daemon writes always begins with a checkpoint record, so it was emptied or truncated (logrotate's copytruncate does that). Keep it for investigation; to start a new log, move every segment of this one aside"}
		}
		return st, nil
	}
	first, err := firstLine(l.f, &l.openRead)
	if err != nil {
		return nil, err
	}
	if seq, _, ok := peek(first); ok {
		l.segFirst = seq
	}
	var frec Record
	if json.Unmarshal(first, &frec) == nil {
		if t, err := time.Parse(time.RFC3339Nano, frec.Time); err == nil {
			l.segTime = t
		}
	}
	if l.pub == nil && isCheckpointLine(first) {
		// Records appended without checkpoints after the daemon's stop
		// checkpoint would make its next start refuse the log.
		return nil, fmt.Errorf("audit log %s has signed checkpoints: only a writer with its signer may append to it", l.path)
	}
	v := verifier{file: filepath.Base(l.path), checkpoints: l.pub != nil, key: l.pub, anyStart: true, previous: l.o.Previous}
	v.seen = func(seq uint64, hash string, _ []byte) {
		if st.tailFrom == 0 {
			st.tailFrom = seq
		}
		if len(st.hashes) < 1<<16 {
			st.hashes[seq] = hash
		}
	}
	from := int64(0)
	if l.pub != nil && isCheckpointLine(first) && frec.Checkpoint != nil {
		from, err = l.findLastCheckpoint(size, &v)
		if err != nil {
			return nil, err
		}
	} else {
		v.lineKnown = true
		if l.pub != nil {
			// A log from before checkpoints: read whole once, then
			// continued in a new segment under a new id.
			st.migrate = true
			id := make([]byte, 16)
			if _, err := io.ReadFull(l.o.Rand, id); err != nil {
				return nil, fmt.Errorf("audit log id: %w", err)
			}
			l.logID = base64.RawURLEncoding.EncodeToString(id)
		}
	}
	res, err := scanFrom(l.f, filepath.Base(l.path), from, size, &v, &l.openRead)
	if err != nil {
		return nil, fmt.Errorf("audit log %s cannot be trusted: %w (run `parley-keyd audit verify`; to start a new log, move this one aside)", l.path, err)
	}
	if l.pub != nil && v.logID == "" && !st.migrate {
		return nil, &Error{File: l.path, Reason: ReasonNoCheckpoint, Detail: "no checkpoint found"}
	}
	if v.logID != "" {
		l.logID = v.logID
	}
	l.seq, l.head, l.off, l.end = v.n, v.prev, res.good, size
	st.tornOff, st.torn = res.good, res.torn
	st.lastCP, st.sinceCP, st.stopped = v.lastCP, v.sinceCP, v.afterStop != 0
	l.sinceCP = int(v.sinceCP)
	if v.lastCP != nil {
		if t, err := time.Parse(time.RFC3339Nano, v.lastCP.Time); err == nil {
			l.lastCPAt = t
		}
		l.cpCopy = v.lastCP
	}
	return st, nil
}

// findLastCheckpoint reads the active segment backwards to its last
// checkpoint record, checks the record that checkpoint covers, and sets v
// to start there. It returns the checkpoint record's offset.
func (l *Log) findLastCheckpoint(size int64, v *verifier) (int64, error) {
	seenCP := false
	lines, offs, err := tailLines(l.f, size, func(line []byte) bool {
		if seenCP {
			return true // the line the checkpoint covers
		}
		seenCP = isCheckpointLine(line)
		return false
	}, &l.openRead)
	if err != nil {
		return 0, &Error{File: l.path, Reason: ReasonMalformed, Detail: err.Error()}
	}
	k := -1
	for i := len(lines) - 1; i >= 0; i-- {
		if isCheckpointLine(lines[i]) {
			k = i
			break
		}
	}
	if k < 0 {
		return 0, &Error{File: l.path, Reason: ReasonNoCheckpoint, Detail: "no checkpoint record found, though the first line looks like one"}
	}
	var rec Record
	if err := json.Unmarshal(lines[k], &rec); err != nil || rec.Checkpoint == nil {
		return 0, &Error{File: l.path, Reason: ReasonCheckpoint, Detail: "the last checkpoint record does not parse"}
	}
	cp := rec.Checkpoint
	if err := verifyAnyKey(cp, l.pub, l.o.Previous); err != nil {
		return 0, &Error{File: l.path, Seq: rec.Seq, Reason: signatureReason(cp, l.pub, l.o.Previous), Detail: fmt.Sprintf("the last checkpoint: %v (a log signed by another key, or forged); the log's head is record %d, hash %s, as that checkpoint claims", err, cp.Seq, cp.Hash)}
	}
	if k > 0 {
		seq, _, ok := peek(lines[k-1])
		if !ok || seq != cp.Seq || lineHash(lines[k-1]) != cp.Hash {
			return 0, &Error{File: l.path, Seq: cp.Seq, Reason: ReasonCheckpoint, Detail: fmt.Sprintf("the record the checkpoint of %s covers was edited or replaced (its hash differs from the signed one)", cp.Time)}
		}
	}
	return offs[k], nil
}

// firstLine reads the first line of f (without its newline; what there is
// when f has none).
func firstLine(f *os.File, read *int64) ([]byte, error) {
	var line []byte
	buf := make([]byte, 16<<10)
	for off := int64(0); len(line) <= maxLine; {
		n, err := f.ReadAt(buf, off)
		*read += int64(n)
		if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
			return append(line, buf[:i]...), nil
		}
		line = append(line, buf[:n]...)
		off += int64(n)
		if err == io.EOF {
			return line, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read audit log: %w", err)
		}
	}
	return nil, &Error{File: f.Name(), Line: 1, Reason: ReasonMalformed, Detail: fmt.Sprintf("line longer than %d bytes", maxLine)}
}

type scanResult struct {
	good int64 // offset just after the last good line
	torn tornTail
}

// scanFrom verifies the lines of f from offset off with v: every line but
// the last through the chain alone (its seq, its prev, and its hash, which
// the next line's prev must equal, so an edit anywhere in it is caught as
// surely as by decoding it), checkpoints and the last line in full.
// Decoding every record made start-up with a long log slow
// (docs/performance.md). A line that is incomplete or holds a NUL byte
// begins the torn tail, which runs to the end of the file.
func scanFrom(f io.ReaderAt, name string, off, size int64, v *verifier, read *int64) (scanResult, error) {
	var res scanResult
	br := newLineReader(io.NewSectionReader(f, off, size-off), read)
	pos := off
	var held []byte
	haveHeld := false
	heldEnd := off
	for {
		line, complete, err := readLine(br)
		if err != nil && err != io.EOF {
			return res, v.errorf(ReasonMalformed, "%v", err)
		}
		if err == io.EOF {
			break
		}
		if !complete || bytes.IndexByte(line, 0) >= 0 {
			break
		}
		if haveHeld {
			if err := v.chained(held); err != nil {
				return res, err
			}
		}
		held, haveHeld = append(held[:0], line...), true
		pos += int64(len(line)) + 1
		heldEnd = pos
	}
	if haveHeld {
		if err := v.full(held); err != nil {
			return res, err
		}
	}
	res.good = heldEnd
	if size > res.good {
		t, err := readTorn(f, name, res.good, size, read)
		if err != nil {
			return res, err
		}
		res.torn = t
	}
	return res, nil
}

// readTorn hashes the torn tail of f from off to size and keeps its first
// bytes. A tail that holds a whole checkpoint record is not the trace of a
// crash (a checkpoint is written on its own and fsynced before anything
// after it), so it is refused rather than cut.
func readTorn(f io.ReaderAt, name string, off, size int64, read *int64) (tornTail, error) {
	t := tornTail{size: size - off, nul: true}
	h := newHasher()
	br := newLineReader(io.NewSectionReader(f, off, size-off), read)
	for {
		line, complete, err := readLine(br)
		if err == io.EOF {
			break
		}
		if err != nil {
			// A line over maxLine inside a torn tail: hash it whole.
			return t, &Error{File: name, Reason: ReasonMalformed, Detail: "the damaged tail holds a line longer than " + strconv.Itoa(maxLine) + " bytes"}
		}
		if complete && isCheckpointLine(line) && bytes.IndexByte(line, 0) < 0 {
			return t, &Error{File: name, Reason: ReasonMalformed, Detail: "a checkpoint record follows damaged bytes at the end of the log: this is not the trace of a crash"}
		}
		h.Write(line)
		if complete {
			h.Write([]byte{'\n'})
		}
		if t.nul && !allZero(line) || complete {
			t.nul = false
		}
		if len(t.head) < 64 {
			t.head = append(t.head, line...)
			if complete {
				t.head = append(t.head, '\n')
			}
			if len(t.head) > 64 {
				t.head = t.head[:64]
			}
		}
	}
	t.hash = h.Sum()
	return t, nil
}

// afterOpen checks the witnesses, then repairs what load found, records it
// and writes the open checkpoint, or with Options.Deferred leaves that to
// Start. It runs with the writer started.
func (l *Log) afterOpen(st *openState) error {
	if err := l.checkWitnesses(st); err != nil {
		return err
	}
	if l.o.Deferred {
		return l.do(func() error { l.waiting = st; return nil })
	}
	if err := l.do(func() error { return l.openCheckpoint(st) }); err != nil {
		return err
	}
	l.started.Store(true)
	close(l.opened)
	return nil
}

// openCheckpoint creates the log if it is still to be made, cuts a torn
// tail, and writes the open checkpoint with the records of what load found
// and then. It holds wmu. Tried again after a failure, it does the same.
func (l *Log) openCheckpoint(st *openState, then ...Record) error {
	if l.toCreate {
		f, err := l.create()
		if err != nil {
			return err
		}
		l.toCreate, l.f = false, f
		if _, err := l.load(true); err != nil {
			return err
		}
		l.setMode()
		l.headMu.Lock()
		l.headCopy = Head{Seq: l.seq, Hash: l.head}
		l.headMu.Unlock()
	}
	if st.torn.size > 0 && l.end > st.tornOff {
		if err := l.cutTorn(st.tornOff); err != nil {
			return err
		}
	}
	var recs []Record
	if st.torn.size > 0 {
		what := "a torn last record (the daemon stopped during a write)"
		if st.torn.nul {
			what = "a NUL-filled tail (a power cut before the data reached the disk, or preallocated space)"
		}
		recs = append(recs, Record{Kind: KindRecovered, Message: fmt.Sprintf(
			"dropped %d bytes of %s after record %d; a record there was never acknowledged, since acknowledgement follows the fsync. sha256 %s; they began: %s",
			st.torn.size, what, l.seq, st.torn.hash, cleanText(string(st.torn.head), 64))})
	}
	if l.pub != nil && !st.created {
		switch {
		case st.migrate:
			recs = append(recs, Record{Kind: KindRecovered, Message: fmt.Sprintf(
				"the log had no checkpoint: its %d records were checked through the chain and are covered by the checkpoint before this record", l.seq)})
		case !st.stopped:
			last := "its last checkpoint"
			if st.lastCP != nil {
				last = fmt.Sprintf("its last checkpoint (record %d, %s)", st.lastCP.Seq+1, st.lastCP.Time)
			}
			msg := fmt.Sprintf("the previous run ended without its stop checkpoint (the daemon was killed or crashed, or could not write at stop); %d records follow %s", st.sinceCP, last)
			if st.sinceCP > 0 {
				msg += fmt.Sprintf(": records %d–%d were covered by no signature until the checkpoint before this record; compare them with the journal or a witness", l.seq-st.sinceCP+1, l.seq)
			}
			recs = append(recs, Record{Kind: KindRecovered, Message: msg})
		}
	}
	recs = append(recs, then...)
	if l.created != nil {
		l.checkpointed(l.created)
		l.created = nil
	}
	if l.pub != nil && !st.created {
		// One write and fsync for the checkpoint and what it found.
		if err := l.writeCheckpoint(checkpoint.ReasonOpen, recs...); err != nil {
			return err
		}
	} else if len(recs) > 0 {
		if err := l.commitInternal(recs...); err != nil {
			return err
		}
	}
	if st.migrate {
		return l.rotate()
	}
	// The log is open and written: its reserve is grown ahead of the
	// first request.
	l.growSoon()
	return nil
}

// Start writes the open checkpoint of a log opened with Options.Deferred,
// with what Open found to record and then the records of then (the
// daemon's start record), in one write. When that fails (the signer cannot
// sign now, the disk is full), Start returns the error and the log tries
// again every Options.StartRetry until it succeeds or closes; Append
// refuses meanwhile. Started tells when it succeeded.
func (l *Log) Start(then ...Record) error {
	if !l.o.Deferred {
		return errors.New("audit log: Start is for a log opened with Options.Deferred")
	}
	for i := range then {
		if !kinds[then[i].Kind] {
			return fmt.Errorf("audit record of unknown kind %q", clean(then[i].Kind, 40))
		}
		bound(&then[i])
	}
	return l.do(func() error {
		if l.startReq {
			return errors.New("audit log: Start was called already")
		}
		l.startReq, l.then = true, then
		return l.tryStart()
	})
}

// Started is closed once the log's open checkpoint is written.
func (l *Log) Started() <-chan struct{} { return l.opened }

// tryStart makes one attempt at the open checkpoint of a deferred log. It
// holds wmu.
func (l *Log) tryStart() error {
	err := l.openCheckpoint(l.waiting, l.then...)
	if err != nil {
		l.startAt = l.now().Add(l.o.StartRetry)
		l.headMu.Lock()
		first := l.waitErr == nil
		l.waitErr = err
		l.headMu.Unlock()
		l.o.Journal.Send(journal.Entry{Priority: journal.Err, Key: "audit-open-waiting", Always: first,
			Message: fmt.Sprintf("audit log %s: the open checkpoint could not be written; no grant is issued until it is (trying again every %v): %v", l.path, l.o.StartRetry, err)})
		return &WaitingError{Err: err, Retry: l.o.StartRetry}
	}
	l.waiting, l.then = nil, nil
	l.headMu.Lock()
	waited := l.waitErr != nil
	l.waitErr = nil
	l.headMu.Unlock()
	l.started.Store(true)
	close(l.opened)
	if waited {
		l.o.Journal.Send(journal.Entry{Priority: journal.Notice, Always: true,
			Message: fmt.Sprintf("audit log %s: the open checkpoint is written; issuance resumes", l.path)})
	}
	return nil
}

// waitingError is Append's refusal before the open checkpoint.
func (l *Log) waitingError() error {
	l.headMu.Lock()
	defer l.headMu.Unlock()
	return &WaitingError{Err: l.waitErr, Retry: l.o.StartRetry}
}

// cutTorn truncates the active segment to off.
func (l *Log) cutTorn(off int64) error {
	if err := l.f.Truncate(off); err != nil {
		return fmt.Errorf("cut the torn tail of audit log %s: %w", l.path, err)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("sync audit log %s: %w", l.path, err)
	}
	l.syncs.Add(1)
	l.off, l.end = off, off
	return nil
}

// do runs fn on the writer goroutine, holding wmu, and returns its error.
func (l *Log) do(fn func() error) error {
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return ErrClosed
	}
	res := make(chan error, 1)
	l.ctl <- func() { res <- fn() }
	l.mu.RUnlock()
	return <-res
}

// Append adds rec to the log and returns its seq once the record is durable
// (written and fsynced). Fields longer than their bound are cut (see
// MaxRecord). On error the record is not in the log and the caller must not
// release what the record describes; an error wrapping ErrUnavailable means
// "not now" (see there).
//
// The record is committed by the first appender that finds the log idle,
// with every record queued by then, in one write and fsync (a group
// commit); the others wait for it. No other goroutine is woken to write:
// under load each hand-off cost the daemon a wake-up of a thread.
func (l *Log) Append(rec Record) (seq uint64, err error) {
	return l.AppendWhile(rec, nil)
}

// AppendWhile is Append with work of the caller's that does not need the
// record durable: during runs once, on the calling goroutine, before
// AppendWhile returns, whatever the outcome. On an idle log (one request at
// a time) the record is committed at once and during runs while the disk
// writes: after the write, with the disk's writeback started
// (sync_file_range), and before the fsync that waits for it. On a log that
// is committing or has records queued, during runs first, while the group
// ahead commits, and the record is queued after it, as a plain Append's
// would be: it joins a later, larger group, instead of making the groups
// smaller and the fsyncs more. during may run holding the log's writer
// lock: it must be short, must not block, and must not use the log. The
// daemon checks a grant's signature there (keyd's sigcheck.go).
func (l *Log) AppendWhile(rec Record, during func()) (seq uint64, err error) {
	defer func() {
		if during != nil {
			during()
		}
	}()
	if during != nil && !l.idle() {
		during()
		during = nil
	}
	req := &request{rec: rec, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return 0, ErrClosed
	}
	if !l.started.Load() {
		l.mu.RUnlock()
		return 0, l.waitingError()
	}
	l.pmu.Lock()
	l.pending = append(l.pending, req)
	l.pmu.Unlock()
	l.mu.RUnlock()
	for {
		if l.wmu.TryLock() {
			l.lead(req, &during)
		}
		if during != nil {
			during()
			during = nil
		}
		select {
		case <-req.done:
			return req.seq, req.err
		case <-req.lead:
		}
	}
}

// lead commits the pending records, in groups of at most maxBatch, until
// own is among the committed, then hands on (unlockWriter). It holds wmu.
// The first group's write runs *during, if any, and clears it.
func (l *Log) lead(own *request, during *func()) {
	defer func() {
		if r := recover(); r != nil {
			// A bug while writing stopped the daemon when the writer
			// goroutine wrote, and still does: the appender's own
			// goroutine may recover from panics (a request handler
			// does), which would leave wmu held and every later
			// Append waiting.
			go func() { panic(r) }()
			select {}
		}
	}()
	for {
		if own != nil && committed(own) {
			break // by a leader before us: the rest is for others to lead
		}
		l.pmu.Lock()
		n := min(len(l.pending), maxBatch)
		batch := l.pending[:n:n]
		l.pending = l.pending[n:]
		if len(l.pending) == 0 {
			l.pending = nil // drop the array the batches came from
		}
		l.pmu.Unlock()
		if n == 0 {
			break
		}
		l.commit(batch, during)
		during = nil
		l.maintain(false)
	}
	l.unlockWriter()
}

// idle reports whether the log has nothing queued and nothing being
// committed, now. It is a hint: the answer may be stale as it returns.
func (l *Log) idle() bool {
	l.pmu.Lock()
	queued := len(l.pending) > 0
	l.pmu.Unlock()
	if queued || !l.wmu.TryLock() {
		return false
	}
	// unlockWriter, not Unlock: an appender that queued meanwhile and
	// found wmu held waits to be told to commit.
	l.unlockWriter()
	return true
}

// committed reports whether r's commit has ended (its done is closed).
func committed(r *request) bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// unlockWriter releases wmu and tells the appender of the oldest pending
// record, if any, to commit: records queued while wmu was held, whose
// appenders found the log busy, are not left waiting.
func (l *Log) unlockWriter() {
	l.wmu.Unlock()
	l.pmu.Lock()
	if len(l.pending) > 0 {
		select {
		case l.pending[0].lead <- struct{}{}:
		default: // told already
		}
	}
	l.pmu.Unlock()
}

// Head returns the seq and hash of the last committed record.
func (l *Log) Head() Head {
	l.headMu.Lock()
	defer l.headMu.Unlock()
	return l.headCopy
}

// LastCheckpoint returns the last checkpoint the log wrote or found, or nil.
func (l *Log) LastCheckpoint() *checkpoint.Checkpoint {
	l.headMu.Lock()
	defer l.headMu.Unlock()
	return l.cpCopy
}

// Checkpoint makes a checkpoint of the current head now, writes it and
// hands it to the witnesses, and returns it.
func (l *Log) Checkpoint() (*checkpoint.Checkpoint, error) {
	if l.pub == nil {
		return nil, errors.New("audit log has no checkpoint signer")
	}
	var cp *checkpoint.Checkpoint
	err := l.do(func() error {
		if !l.started.Load() {
			return l.waitingError()
		}
		if err := l.ready(); err != nil {
			return err
		}
		if err := l.writeCheckpoint(checkpoint.ReasonRequest); err != nil {
			return err
		}
		cp = l.cpCopy
		return nil
	})
	return cp, err
}

// FlushFolds writes now the counted records of every fold still open
// (AppendFolded), so that a record appended next, such as the daemon's stop
// record, comes after all of them.
func (l *Log) FlushFolds() error {
	return l.do(func() error { return l.flushFolds(true) })
}

// Path returns the file the log writes to.
func (l *Log) Path() string { return l.path }

// ID returns the log's id (the same in every checkpoint), or "" for a log
// without checkpoints.
func (l *Log) ID() string { return l.logID }

// Close writes the records already queued and those AppendFolded still
// counts, then the stop checkpoint, hands it to the witnesses (each within
// Options.WitnessTimeout), and closes the file, releasing its lock. Append
// fails with ErrClosed afterwards. An error means the stop checkpoint could
// not be written or delivered; the next Open then records that the run
// ended without it.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	close(l.stop)
	l.mu.Unlock()
	<-l.done
	<-l.scrub.done
	err := l.closeErr
	var final *checkpoint.Checkpoint
	if l.started.Load() {
		final = l.LastCheckpoint()
	}
	if werr := l.wit.stop(final); werr != nil && err == nil {
		err = werr
	}
	l.subs.closeAll()
	if l.f != nil {
		if cerr := l.f.Close(); err == nil {
			err = cerr
		}
	}
	l.release()
	return err
}

// release removes the temporary file a deferred new log reserved and
// never filled.
func (l *Log) release() {
	if l.reserved != nil {
		os.Remove(l.reservedPath)
		l.reserved.Close()
		l.reserved = nil
	}
}

// closeQuiet closes a log whose Open failed, without a stop checkpoint.
func (l *Log) closeQuiet() {
	l.quiet.Store(true)
	l.mu.Lock()
	l.closed = true
	close(l.stop)
	l.mu.Unlock()
	<-l.done
	l.wit.stop(nil)
	if l.f != nil {
		l.f.Close()
	}
	l.release()
}

func (l *Log) writer() {
	defer close(l.done)
	// The tick ends fold windows and makes interval checkpoints and age
	// rotations; once a second is often enough for the defaults and costs
	// nothing worth counting.
	every := min(time.Second, l.o.FoldWindow/4, l.o.CheckpointInterval/4)
	if every < 10*time.Millisecond {
		every = 10 * time.Millisecond
	}
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		select {
		case <-l.stop:
			// No record is queued after closed is set: commit what is
			// pending, then the stop checkpoint.
			l.wmu.Lock()
			l.lead(nil, nil)
			l.wmu.Lock()
			l.finish()
			l.wmu.Unlock()
			return
		case fn := <-l.ctl:
			l.wmu.Lock()
			fn()
			l.unlockWriter()
		case <-l.grow:
			l.wmu.Lock()
			l.growAhead()
			l.unlockWriter()
		case <-ticker.C:
			l.wmu.Lock()
			l.maintain(true)
			l.unlockWriter()
		}
	}
}

// finish runs when the log is closed and nothing is pending: it writes what
// folds still count and the stop checkpoint. It holds wmu.
func (l *Log) finish() {
	if l.quiet.Load() {
		return
	}
	if !l.started.Load() {
		// Nothing was written in this run, so there is nothing to
		// close: the log ends as the previous run left it.
		l.closeErr = l.waitingError()
		l.o.Journal.Send(journal.Entry{Priority: journal.Warning, Always: true,
			Message: fmt.Sprintf("audit log %s: stopped before its open checkpoint was written; this run wrote no record (%v)", l.path, l.closeErr)})
		return
	}
	if err := l.flushFolds(true); err != nil {
		l.closeErr = err
	}
	if l.pub != nil {
		if err := l.ready(); err != nil {
			l.closeErr = err
			return
		}
		if err := l.writeCheckpoint(checkpoint.ReasonStop); err != nil {
			l.closeErr = err
			var se *signError
			if errors.As(err, &se) {
				// Never silently missing: the log says that its stop
				// checkpoint could not be signed, and why.
				rec := Record{Kind: KindUnsigned, Message: fmt.Sprintf(
					"the stop checkpoint could not be signed: %v. Records %d–%d (this one the last) are covered by no signature until the next start's checkpoint",
					cleanText(err.Error(), 400), l.seq-uint64(l.sinceCP)+1, l.seq+1)}
				if l.sinceCP == 0 {
					rec.Message = fmt.Sprintf("the stop checkpoint could not be signed: %v", cleanText(err.Error(), 400))
				}
				if cerr := l.commitInternal(rec); cerr != nil {
					l.closeErr = errors.Join(err, cerr)
				}
			}
		}
	}
	if err := l.trim(); err != nil && l.closeErr == nil {
		l.closeErr = err
	}
}

// ready checks, before a write, that the file at the log's path is still the
// one the log writes and has the length the log wrote, and cuts what a
// failed write left behind. It is what makes a log renamed, deleted,
// replaced or truncated under the daemon stop issuance at the next record
// instead of taking records nobody will find.
func (l *Log) ready() error {
	fst, err := statFD(l.f)
	if err != nil {
		return unavailable("stat audit log", err)
	}
	pst, err := statName(l.path)
	what := ""
	switch {
	case errors.Is(err, unix.ENOENT):
		what = "was renamed or moved away: no file is at its path"
		if fst.nlink == 0 {
			what = "was deleted"
		}
	case err != nil:
		return unavailable("stat audit log", err)
	case pst.dev != fst.dev || pst.ino != fst.ino:
		what = "was renamed, and another file is at its path now"
		if fst.nlink == 0 {
			what = "was deleted, and another file is at its path now"
		}
	case fst.size < l.end:
		what = fmt.Sprintf("was truncated from %d to %d bytes (logrotate's copytruncate does that; records in it are gone)", l.end, fst.size)
	case fst.size > l.end && (l.pre || l.dirty == 0):
		what = fmt.Sprintf("grew by %d bytes that the daemon did not write (another process writes to it)", fst.size-l.end)
	}
	if what == "" && l.dirty > 0 {
		// What our own failed write left: take it back now that we can.
		if err := l.undo(); err != nil {
			return unavailable("take a failed write back from the audit log", err)
		}
	}
	if what != "" {
		ve := &VanishedError{Path: l.path, What: what}
		if l.vanished == nil || l.vanished.What != what {
			l.o.Journal.Send(journal.Entry{Priority: journal.Crit, Message: ve.Error(), Always: true,
				Fields: map[string]string{"MESSAGE_ID": MessageIDVanished, "PARLEY_AUDIT_PATH": l.path, "PARLEY_AUDIT_SEQ": strconv.FormatUint(l.seq, 10)}})
		}
		l.vanished = ve
		return ve
	}
	if l.vanished != nil {
		l.o.Journal.Send(journal.Entry{Priority: journal.Notice, Always: true,
			Message: fmt.Sprintf("audit log %s is back as the daemon wrote it; issuance resumes", l.path)})
		l.vanished = nil
	}
	return nil
}

// encoder encodes records as the log writes them: encoding/json, no HTML
// escaping, one line each.
func (l *Log) encode(rec *Record) error {
	if b, ok := appendRecord(l.buf.AvailableBuffer(), rec); ok {
		l.buf.Write(append(b, '\n'))
		return nil
	}
	enc := json.NewEncoder(&l.buf)
	enc.SetEscapeHTML(false)
	return enc.Encode(rec)
}

// written is a record commit wrote into its buffer.
type written struct {
	r    *request
	line [2]int // start and end in buf, without the newline
	hash string
}

// commit writes and fsyncs one group of records and answers each waiter.
// The write runs *during between the write and the fsync (AppendWhile).
func (l *Log) commit(batch []*request, during *func()) {
	defer func() {
		for _, r := range batch {
			if r.done != nil {
				close(r.done)
			}
		}
	}()
	if err := l.ready(); err != nil {
		for _, r := range batch {
			r.err = err
		}
		return
	}
	seq, head := l.seq, l.head
	now := l.now().UTC().Format(time.RFC3339Nano)
	l.buf.Reset()
	pending := l.written[:0]
	defer func() {
		clear(pending) // let the requests go
		l.written = pending[:0]
	}()
	for _, r := range batch {
		// The log has the request's record to itself: its appender
		// only waits, and the record is written in place.
		rec := &r.rec
		if !r.internal {
			if !kinds[rec.Kind] {
				r.err = fmt.Errorf("audit record of unknown kind %q", clean(rec.Kind, 40))
				continue
			}
			rec.Cut, rec.Folded, rec.Checkpoint, rec.Damage = nil, nil, nil, nil
			bound(rec)
		}
		rec.Seq, rec.Prev = seq+1, head
		if rec.Time == "" || !r.internal {
			rec.Time = now
		}
		start := l.buf.Len()
		if err := l.encode(rec); err != nil {
			l.buf.Truncate(start)
			r.err = fmt.Errorf("encode audit record: %w", err)
			continue
		}
		end := l.buf.Len() - 1
		if end-start > MaxRecord {
			l.buf.Truncate(start)
			r.err = fmt.Errorf("audit record of %d bytes exceeds the limit of %d", end-start, MaxRecord)
			continue
		}
		seq++
		head = lineHash(l.buf.Bytes()[start:end])
		r.seq = seq
		pending = append(pending, written{r, [2]int{start, end}, head})
	}
	if len(pending) == 0 {
		return
	}
	if err := l.write(l.buf.Bytes(), during); err != nil {
		for _, w := range pending {
			w.r.seq, w.r.err = 0, err
		}
		return
	}
	l.seq, l.head = seq, head
	l.sinceCP += len(pending)
	l.headMu.Lock()
	l.headCopy = Head{Seq: seq, Hash: head}
	l.headMu.Unlock()
	if l.o.Journal != nil {
		for _, w := range pending {
			l.journalRecord(l.buf.Bytes()[w.line[0]:w.line[1]], &w.r.rec, w.hash)
		}
	}
	if l.buf.Cap() > 1<<20 {
		l.buf = bytes.Buffer{} // do not keep a large buffer alive after a burst
	}
}

// commitInternal writes records of the log's own in one group.
func (l *Log) commitInternal(recs ...Record) error {
	batch := make([]*request, len(recs))
	for i := range recs {
		batch[i] = &request{rec: recs[i], internal: true}
	}
	l.commit(batch, nil)
	for _, r := range batch {
		if r.err != nil {
			return r.err
		}
	}
	return nil
}

// makeCheckpoint signs a checkpoint of the record seq with hash.
func (l *Log) makeCheckpoint(reason string, seq uint64, hash string) (*checkpoint.Checkpoint, error) {
	cp := &checkpoint.Checkpoint{Log: l.logID, Seq: seq, Hash: hash, Time: l.now().UTC().Format(time.RFC3339Nano), Reason: reason}
	if err := signCheckpoint(cp, l.o.Signer); err != nil {
		return nil, &signError{err}
	}
	return cp, nil
}

// writeCheckpoint signs the current head and writes it as the next record,
// and after it, in the same write, the records of then.
func (l *Log) writeCheckpoint(reason string, then ...Record) error {
	cp, err := l.makeCheckpoint(reason, l.seq, l.head)
	if err != nil {
		return err
	}
	if err := l.commitInternal(append([]Record{{Kind: KindCheckpoint, Time: cp.Time, Checkpoint: cp}}, then...)...); err != nil {
		return err
	}
	l.checkpointed(cp)
	l.sinceCP = len(then)
	return nil
}

// checkpointed publishes a checkpoint that is durable in the log.
func (l *Log) checkpointed(cp *checkpoint.Checkpoint) {
	l.sinceCP = 0
	l.lastCPAt = l.now()
	l.headMu.Lock()
	l.cpCopy = cp
	l.headMu.Unlock()
	l.subs.publish(cp)
	l.wit.offer(cp)
}

// maintain runs after every commit and on every tick: folded records whose
// window ended, checkpoints and segments that are due, retention.
func (l *Log) maintain(tick bool) {
	if tick {
		l.flushFolds(false)
	}
	if !l.started.Load() {
		if l.startReq && !l.now().Before(l.startAt) {
			l.tryStart()
		}
		return
	}
	if l.pub == nil || l.vanished != nil {
		return
	}
	now := l.now()
	if now.Before(l.cpRetry) {
		return
	}
	reason := ""
	switch {
	case l.sinceCP >= l.o.CheckpointEvery:
		reason = checkpoint.ReasonCount
	case tick && l.sinceCP > 0 && now.Sub(l.lastCPAt) >= l.o.CheckpointInterval:
		reason = checkpoint.ReasonInterval
	}
	due := l.off >= l.o.SegmentSize || l.o.SegmentAge > 0 && l.seq > l.segFirst && now.Sub(l.segTime) >= l.o.SegmentAge
	if due && !now.Before(l.segRetry) {
		if err := l.rotate(); err != nil {
			l.segRetry = now.Add(time.Minute)
			l.o.Journal.Send(journal.Entry{Priority: journal.Err, Key: "audit-rotate-failed",
				Message: fmt.Sprintf("audit log %s: could not start a new segment (will retry in a minute): %v", l.path, err)})
		}
		reason = ""
	}
	if reason != "" {
		if err := l.writeCheckpoint(reason); err != nil {
			l.cpRetry = now.Add(5 * time.Second)
			l.o.Journal.Send(journal.Entry{Priority: journal.Err, Key: "audit-checkpoint-failed",
				Message: fmt.Sprintf("audit log %s: could not write a checkpoint (will retry): %v", l.path, err)})
		}
	}
	if !l.retainAt.IsZero() && !now.Before(l.retainAt) {
		l.retainAt = time.Time{}
		l.retain()
	}
}

// journalBudget is how many records of one kind go to the journal one by one
// each second; past it, one entry a second counts the rest and carries the
// last one's seq and hash (the records themselves are in the log). journald
// itself would drop more than its rate limit (by default 10 000 in 30 s).
const journalBudget = 200

// journalRecord sends one record to the journal as an entry with the
// record's seq, kind, hash and line as fields. Without a journal (the
// Logger writes to stderr) only checkpoints are sent: the records are in
// the log, and a line each on stderr would be noise.
func (l *Log) journalRecord(line []byte, rec *Record, hash string) {
	if !l.o.Journal.Journal() && rec.Kind != KindCheckpoint {
		return
	}
	seq := rec.Seq
	p := journal.Info
	fields := map[string]string{
		"MESSAGE_ID":          MessageIDRecord,
		"PARLEY_AUDIT_SEQ":    strconv.FormatUint(seq, 10),
		"PARLEY_AUDIT_KIND":   rec.Kind,
		"PARLEY_AUDIT_HASH":   hash,
		"PARLEY_AUDIT_RECORD": string(line),
	}
	if rec.GrantID != "" {
		fields["PARLEY_GRANT_ID"] = rec.GrantID
	}
	if rec.RequestID != "" {
		fields["PARLEY_REQUEST_ID"] = rec.RequestID
	}
	if rec.Verb != "" {
		fields["PARLEY_VERB"] = rec.Verb
	}
	if rec.Decision != "" {
		fields["PARLEY_DECISION"] = rec.Decision
	}
	always := false
	switch rec.Kind {
	case KindDeny, KindTimeout, KindWithdrawn, KindPolicyReload, KindStart, KindStop, KindDecide:
		p = journal.Notice
	case KindLock, KindUnlock:
		// A human pressed the stop button, or lifted it.
		p, always = journal.Warning, true
	case KindError, KindRecovered, KindUnsigned:
		p = journal.Warning
	case KindCheckpoint:
		p, always = journal.Notice, true
		fields["MESSAGE_ID"] = MessageIDCheckpoint
		fields["PARLEY_CHECKPOINT"] = string(rec.Checkpoint.Marshal())
	}
	msg := "audit " + FormatRecord(rec)
	if rec.Checkpoint != nil {
		msg += " " + string(rec.Checkpoint.Marshal())
	}
	l.o.Journal.Send(journal.Entry{Priority: p, Message: msg, Fields: fields, Key: "audit:" + rec.Kind, Always: always, Budget: journalBudget})
}
