package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/parley-keyd/parley-keyd/internal/journal"
	"github.com/parley-keyd/parley-keyd/internal/procgroup"
	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"

	"golang.org/x/sys/unix"
)

// A Witness keeps checkpoints outside the daemon's reach: on another
// filesystem, another machine, with another user. What each kind protects
// against is in docs/audit.md.
type Witness interface {
	// Witness keeps cp. It returns once cp is kept (durably, where that
	// applies), or ctx is done.
	Witness(ctx context.Context, cp *checkpoint.Checkpoint) error
	// String names the witness in messages.
	String() string
}

// A WitnessReader can give back the latest checkpoint it keeps, which Open
// compares with the log: a log cut or rolled back to before it, or rewritten
// there, does not open.
type WitnessReader interface {
	Witness
	// Latest returns the latest checkpoint kept, or nil when there is none.
	Latest(ctx context.Context) (*checkpoint.Checkpoint, error)
}

var (
	_ WitnessReader = FileWitness{}
	_ Witness       = CommandWitness{}
)

// FileWitness appends every checkpoint, one JSON line each, to a file, which
// should be on another filesystem (or a network mount) that the daemon's
// user can append to but an attacker who owns that user cannot rewrite:
// a file made append-only (chattr +a) by root, say. Each line is fsynced
// before the checkpoint counts as out.
type FileWitness struct{ Path string }

func (w FileWitness) String() string { return "file " + w.Path }

// Witness appends cp to the file.
func (w FileWitness) Witness(ctx context.Context, cp *checkpoint.Checkpoint) error {
	f, err := os.OpenFile(w.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("witness %s: %w", w.Path, err)
	}
	_, err = f.Write(append(cp.Marshal(), '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("witness %s: %w", w.Path, err)
	}
	return nil
}

// Latest reads the file's last line.
func (w FileWitness) Latest(ctx context.Context) (*checkpoint.Checkpoint, error) {
	return checkpoint.Latest(w.Path)
}

// CommandWitness runs a program for every checkpoint, with the checkpoint
// as one JSON line on its standard input and in the environment
// (PARLEY_CHECKPOINT, and PARLEY_CHECKPOINT_SEQ, _HASH, _LOG, _REASON); the
// checkpoint counts as out when it exits 0. It runs as the daemon's user,
// so what it protects depends on where it sends the checkpoint: another
// machine (ssh, a log service) or another user's spool.
//
// It runs in a process group of its own (internal/procgroup): when it
// exits, whatever it left running in that group is killed; at the
// delivery's deadline the whole group is. So a witness that hangs, ignores
// SIGTERM, never reads its input or leaves a child holding its output
// (ssh in a wrapper) holds up neither the next checkpoint nor a stop for
// longer than the witness timeout (DESIGN.md property 13). Its output is
// kept to 4 KiB, for the message of a failed delivery.
type CommandWitness struct {
	Argv []string
}

func (w CommandWitness) String() string { return "command " + strings.Join(w.Argv, " ") }

// Witness runs the command.
func (w CommandWitness) Witness(ctx context.Context, cp *checkpoint.Checkpoint) error {
	if len(w.Argv) == 0 {
		return errors.New("witness command is empty")
	}
	line := cp.Marshal()
	cmd := procgroup.Command(ctx, w.Argv[0], w.Argv[1:]...)
	cmd.Stdin = bytes.NewReader(append(line, '\n'))
	cmd.Env = append(os.Environ(),
		"PARLEY_CHECKPOINT="+string(line),
		"PARLEY_CHECKPOINT_SEQ="+strconv.FormatUint(cp.Seq, 10),
		"PARLEY_CHECKPOINT_HASH="+cp.Hash,
		"PARLEY_CHECKPOINT_LOG="+cp.Log,
		"PARLEY_CHECKPOINT_REASON="+cp.Reason)
	out := &procgroup.Limited{Max: 4096}
	cmd.Stdout, cmd.Stderr = out, out
	err := procgroup.Run(cmd)
	if errors.Is(err, exec.ErrWaitDelay) {
		// It exited 0; a process it started outside its group still
		// held its output, and stopped being waited for.
		err = nil
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (killed with every process it started, at the witness timeout)", err)
		}
		msg := strings.TrimSpace(out.String())
		if msg != "" {
			return fmt.Errorf("witness %s: %w: %s", w.Argv[0], err, cleanText(msg, 200))
		}
		return fmt.Errorf("witness %s: %w", w.Argv[0], err)
	}
	return nil
}

// witnessState delivers checkpoints to the witnesses from its own goroutine,
// so that a slow witness never holds up an Append.
type witnessState struct {
	ws      []Witness
	journal bool // the journal (outside the daemon's reach) gets every checkpoint

	mu      sync.Mutex
	pending *checkpoint.Checkpoint
	have    []uint64 // per witness, the seq of the latest checkpoint it kept
	haveAny []bool
	wake    chan struct{}
	quit    chan struct{}
	done    chan struct{}
	timeout func(parent context.Context) (context.Context, context.CancelFunc)
	// abort ends a delivery under way when stop begins: the stop
	// checkpoint, delivered next, covers it, and a stop waits for one
	// witness timeout, not two.
	abort       context.Context
	abortCancel context.CancelFunc
	log         func(err error, w Witness)
}

func (w *witnessState) init(l *Log) {
	w.ws = l.o.Witnesses
	w.journal = l.o.Journal.Journal()
	w.have = make([]uint64, len(w.ws))
	w.haveAny = make([]bool, len(w.ws))
	w.wake = make(chan struct{}, 1)
	w.quit = make(chan struct{})
	w.done = make(chan struct{})
	w.timeout = func(parent context.Context) (context.Context, context.CancelFunc) {
		return context.WithTimeout(parent, l.o.WitnessTimeout)
	}
	w.abort, w.abortCancel = context.WithCancel(context.Background())
	w.log = func(err error, wt Witness) {
		l.o.Journal.Send(journal.Entry{Priority: journal.Err, Key: "audit-witness:" + wt.String(),
			Message: fmt.Sprintf("audit log: checkpoint not delivered to witness %s (retried with the next checkpoint): %v", wt, err)})
	}
	if len(w.ws) == 0 {
		close(w.done)
		return
	}
	go w.loop()
}

// offer hands cp to the delivery goroutine; a later offer replaces an
// earlier one not yet delivered (the later checkpoint covers it).
func (w *witnessState) offer(cp *checkpoint.Checkpoint) {
	if len(w.ws) == 0 {
		return
	}
	w.mu.Lock()
	w.pending = cp
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *witnessState) loop() {
	defer close(w.done)
	for {
		select {
		case <-w.quit:
			return
		case <-w.wake:
			w.mu.Lock()
			cp := w.pending
			w.pending = nil
			w.mu.Unlock()
			if cp != nil {
				w.deliver(w.abort, cp)
			}
		}
	}
}

// deliver gives cp to every witness that lacks it, each within the witness
// timeout or until parent ends, and returns the first error.
func (w *witnessState) deliver(parent context.Context, cp *checkpoint.Checkpoint) error {
	var first error
	for i, wt := range w.ws {
		w.mu.Lock()
		has := w.haveAny[i] && w.have[i] >= cp.Seq
		w.mu.Unlock()
		if has {
			continue
		}
		ctx, cancel := w.timeout(parent)
		err := wt.Witness(ctx, cp)
		cancel()
		if err != nil {
			w.log(err, wt)
			if first == nil {
				first = err
			}
			continue
		}
		w.mu.Lock()
		w.have[i], w.haveAny[i] = cp.Seq, true
		w.mu.Unlock()
	}
	return first
}

// stop ends the delivery goroutine and delivers final, the stop checkpoint,
// before it returns.
func (w *witnessState) stop(final *checkpoint.Checkpoint) error {
	if len(w.ws) == 0 {
		return nil
	}
	select {
	case <-w.quit:
	default:
		close(w.quit)
	}
	w.abortCancel()
	<-w.done
	if final == nil {
		return nil
	}
	return w.deliver(context.Background(), final)
}

// out returns the seq of the latest checkpoint that every witness kept, and
// that at least one place outside the daemon's reach has (a witness, or
// the journal); 0 when there is none.
func (w *witnessState) out(l *Log) uint64 {
	if len(w.ws) == 0 {
		if w.journal {
			if cp := l.LastCheckpoint(); cp != nil {
				return cp.Seq
			}
		}
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var min uint64
	for i := range w.ws {
		if !w.haveAny[i] {
			return 0
		}
		if i == 0 || w.have[i] < min {
			min = w.have[i]
		}
	}
	return min
}

// checkWitnesses compares the log as Open found it with the latest
// checkpoint of every witness that can read back. A witness that holds a
// checkpoint the log contradicts stops Open: the log was cut, rolled back,
// rewritten or replaced after that checkpoint went out.
func (l *Log) checkWitnesses(st *openState) error {
	for _, wt := range l.o.Witnesses {
		cp, ok, err := l.witnessLatest(wt)
		if !ok {
			continue
		}
		if err != nil {
			l.o.Journal.Send(journal.Entry{Priority: journal.Warning, Always: true,
				Message: fmt.Sprintf("audit log: cannot read witness %s to compare the log with it: %v", wt, err)})
			continue
		}
		if cp == nil {
			continue
		}
		head := fmt.Sprintf("the log's head is record %d, hash %s", l.seq, l.head)
		held := fmt.Sprintf("the witness holds a checkpoint of record %d, hash %s, made %s", cp.Seq, cp.Hash, cp.Time)
		refuse := func(reason Reason, seq uint64, what string) error {
			return &Error{File: l.path, Seq: seq, Reason: reason, Detail: fmt.Sprintf("contradicts witness %s: %s; %s; %s (keep both for investigation; run parley-keyd audit verify --checkpoint)", wt, what, held, head)}
		}
		if err := verifyAnyKey(cp, l.pub, l.o.Previous); err != nil {
			return refuse(witnessSigReason(cp, l.pub, l.o.Previous), cp.Seq, fmt.Sprintf("its latest checkpoint does not verify under the daemon's key: %v", err))
		}
		// The hash of the record the witness's checkpoint covers, as the
		// log has it: among the records read at start, the one the log's
		// last checkpoint covers (verified against it), or else found in
		// the log by its seq.
		hash, known := st.hashes[cp.Seq], cp.Seq >= st.tailFrom && st.hashes[cp.Seq] != ""
		if !known && st.lastCP != nil && cp.Seq == st.lastCP.Seq {
			hash, known = st.lastCP.Hash, true
		}
		if !known && cp.Seq > 0 && cp.Seq <= l.seq {
			h, err := HashAt(l.path, cp.Seq)
			if err != nil {
				return refuse(ReasonRewritten, cp.Seq, fmt.Sprintf("record %d, which its latest checkpoint covers, cannot be found in the log: %v", cp.Seq, err))
			}
			hash, known = h.Hash, true
		}
		switch {
		case cp.Log != l.logID:
			return refuse(ReasonForeignLog, cp.Seq, fmt.Sprintf("it holds a checkpoint of log %s, but this log is %s (the log was replaced; if you started a new log on purpose, move the witness's copy aside)", cp.Log, l.logID))
		case cp.Seq > l.seq:
			reason, what := ReasonTruncated, "the log ends before it: its tail was cut"
			if st.stopped {
				reason, what = ReasonRollback, "the log ends before it, with a stop checkpoint: it was rolled back to an older copy"
			}
			return refuse(reason, cp.Seq, what)
		case known && hash != cp.Hash:
			return refuse(ReasonRewritten, cp.Seq, fmt.Sprintf("record %d has hash %s in the log: the log was rewritten", cp.Seq, hash))
		}
	}
	for _, wt := range l.o.Witnesses {
		if fw, ok := wt.(FileWitness); ok && sameFilesystem(fw.Path, l.dir) {
			l.o.Journal.Send(journal.Entry{Priority: journal.Warning, Always: true,
				Message: fmt.Sprintf("audit log: witness %s is on the same filesystem as the log; whoever can rewrite the log there may rewrite the witness too (docs/audit.md)", fw.Path)})
		}
	}
	return nil
}

// withWitnesses adds to an *Error that stops Open what each witness that
// reads back holds, so that the refusal of a log rewritten under another
// key names the checkpoint it contradicts.
func (l *Log) withWitnesses(err error) error {
	var ae *Error
	if !errors.As(err, &ae) {
		return err
	}
	for _, wt := range l.o.Witnesses {
		if cp, _, rerr := l.witnessLatest(wt); rerr == nil && cp != nil {
			ae.Detail += fmt.Sprintf("; witness %s holds a checkpoint of record %d, hash %s, made %s", wt, cp.Seq, cp.Hash, cp.Time)
		}
	}
	return err
}

// witnessLatest reads back the latest checkpoint wt holds, within the
// witness timeout; ok is false for a witness that cannot read back.
func (l *Log) witnessLatest(wt Witness) (cp *checkpoint.Checkpoint, ok bool, err error) {
	r, ok := wt.(WitnessReader)
	if !ok {
		return nil, false, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.o.WitnessTimeout)
	defer cancel()
	cp, err = r.Latest(ctx)
	return cp, true, err
}

func sameFilesystem(path, dir string) bool {
	var a, b unix.Stat_t
	if unix.Stat(filepath.Dir(path), &a) != nil || unix.Stat(dir, &b) != nil {
		return false
	}
	return a.Dev == b.Dev
}

// subscribers get every checkpoint the log writes (Subscribe).
type subscribers struct {
	mu     sync.Mutex
	m      map[chan *checkpoint.Checkpoint]struct{}
	closed bool
}

func (s *subscribers) init() { s.m = map[chan *checkpoint.Checkpoint]struct{}{} }

// Subscribe returns a channel that receives every checkpoint the log
// writes from now on (a receiver that falls behind gets the latest, which
// covers the ones it missed), and a function that ends the subscription.
// The channel is closed when the log closes, after the stop checkpoint.
// The daemon uses it to carry checkpoints to approvers, who keep the latest
// (see Consistent).
func (l *Log) Subscribe() (<-chan *checkpoint.Checkpoint, func()) {
	ch := make(chan *checkpoint.Checkpoint, 1)
	s := &l.subs
	s.mu.Lock()
	if s.closed {
		close(ch)
	} else {
		s.m[ch] = struct{}{}
	}
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		if _, ok := s.m[ch]; ok {
			delete(s.m, ch)
			close(ch)
		}
		s.mu.Unlock()
	}
}

func (s *subscribers) publish(cp *checkpoint.Checkpoint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for ch := range s.m {
		select {
		case ch <- cp:
		default:
			select {
			case <-ch:
			default:
			}
			select {
			case ch <- cp:
			default:
			}
		}
	}
}

func (s *subscribers) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for ch := range s.m {
		delete(s.m, ch)
		close(ch)
	}
}
