package audit

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/parley-keyd/parley-keyd/internal/journal"
	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"

	"golang.org/x/sys/unix"
)

// Segments. The log at PATH (say audit.log) is the active segment; a closed
// segment is named after PATH and the seq of its first record:
// audit-000000000001.log for PATH audit.log, and so on. The names sort in
// the order of the records. Every segment but the log's first begins with a
// checkpoint record that covers the previous segment's last record, so a
// segment can be checked on its own, and the log stays checkable after
// retention removed its oldest segments.

// segmentDigits is the width of the seq in a closed segment's name.
const segmentDigits = 12

// Segment is one file of a log.
type Segment struct {
	Path  string
	First uint64 // seq of its first record (0 for the active segment before it is read)
	// Active is true for the file at the log's path.
	Active bool
}

func segmentStem(path string) (dir, stem, ext string) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	ext = filepath.Ext(base)
	if ext == "" || ext == base {
		return dir, base, ""
	}
	return dir, strings.TrimSuffix(base, ext), ext
}

// SegmentName returns the name of the closed segment of the log at path
// whose first record has seq first.
func SegmentName(path string, first uint64) string {
	dir, stem, ext := segmentStem(path)
	return filepath.Join(dir, fmt.Sprintf("%s-%0*d%s", stem, segmentDigits, first, ext))
}

// Segments lists the segments of the log whose active segment is at path,
// closed ones first, in the order of their records, then the active one
// (when it exists). Files whose name only looks like a segment are left
// out.
func Segments(path string) ([]Segment, error) {
	dir, stem, ext := segmentStem(path)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list audit log segments: %w", err)
	}
	var segs []Segment
	for _, e := range ents {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, stem+"-")
		if !ok {
			continue
		}
		num, ok := strings.CutSuffix(rest, ext)
		if !ok || len(num) < segmentDigits || strings.TrimLeft(num, "0123456789") != "" {
			continue
		}
		first, err := strconv.ParseUint(num, 10, 64)
		if err != nil || first == 0 {
			continue
		}
		segs = append(segs, Segment{Path: filepath.Join(dir, name), First: first})
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].First < segs[j].First })
	if _, err := os.Lstat(path); err == nil {
		segs = append(segs, Segment{Path: path, Active: true})
	} else if !os.IsNotExist(err) {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return segs, nil
}

// rotate closes the active segment under its closed name and starts a new
// one whose first record is a checkpoint of the closed one's last record.
// It runs holding wmu.
func (l *Log) rotate() error {
	if err := l.ready(); err != nil {
		return err
	}
	closed := SegmentName(l.path, l.segFirst)
	if err := l.startSegment(checkpoint.ReasonRotate, func(old *os.File) error { return linkFD(old, closed) }); err != nil {
		return err
	}
	l.retainAt = l.now()
	return nil
}

// startSegment signs the head, writes that checkpoint as the first record
// of a new file, has keepOld give the old file a closed segment's name (or
// keep its content there), and puts the new file at the log's path. A crash
// anywhere leaves the log openable: before the rename the path still holds
// the old file (Open removes a closed name that is the same file), after it
// the new one.
func (l *Log) startSegment(reason string, keepOld func(old *os.File) error) error {
	cp, err := l.makeCheckpoint(reason, l.seq, l.head)
	if err != nil {
		return err
	}
	line := checkpointLine(l.seq+1, cp)
	old := l.f
	nf, err := l.newFile(func(f *os.File) error {
		// The closed segment ends with its last record, not with
		// preallocated space.
		if err := l.trim(); err != nil {
			return err
		}
		if err := keepOld(old); err != nil {
			return err
		}
		if err := syncDir(l.dir); err != nil {
			return err
		}
		if err := os.Rename(f.Name(), l.path); err != nil {
			return fmt.Errorf("start a new audit log segment: %w", err)
		}
		return nil
	}, append(line, '\n'))
	if err != nil {
		return err
	}
	// A closed segment is not written again; say so in its mode too.
	old.Chmod(0o400)
	old.Close()
	l.f = nf
	l.off = int64(len(line)) + 1
	l.end = l.off
	l.setMode()
	l.seq++
	l.head = lineHash(line)
	l.segFirst, l.segTime = l.seq, l.now()
	l.dirty, l.vanished = 0, nil
	l.growSoon()
	l.headMu.Lock()
	l.headCopy = Head{Seq: l.seq, Hash: l.head}
	l.headMu.Unlock()
	if l.o.Journal != nil {
		l.journalRecord(line, &Record{Seq: l.seq, Prev: cp.Hash, Time: cp.Time, Kind: KindCheckpoint, Checkpoint: cp}, l.head)
	}
	l.checkpointed(cp)
	return nil
}

// linkFD gives the file f another name, exactly the inode f is open on
// (not whatever is at its path now). An existing name for the same file is
// fine; a name for another file is an error.
func linkFD(f *os.File, name string) error {
	err := unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())), unix.AT_FDCWD, name, unix.AT_SYMLINK_FOLLOW)
	if errors.Is(err, unix.EEXIST) {
		var a, b unix.Stat_t
		if unix.Fstat(int(f.Fd()), &a) == nil && unix.Lstat(name, &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino {
			return nil
		}
		return fmt.Errorf("audit log segment %s exists already", name)
	}
	if err != nil {
		return fmt.Errorf("name the closed audit log segment %s: %w", name, err)
	}
	return nil
}

// copyTo writes the first n bytes of f to a new file name (which must not
// exist), durably.
func copyTo(f *os.File, n int64, name string) error {
	tmp := name + ".tmp"
	os.Remove(tmp)
	out, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	_, err = io.Copy(out, io.NewSectionReader(f, 0, n))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp, name)
	}
	if err != nil {
		return fmt.Errorf("keep the audit log segment as %s: %w", name, err)
	}
	return nil
}

// Reopen makes the log write to the file at its path again after that file
// was renamed, deleted, replaced or truncated under it (Append fails with a
// *VanishedError until then). What the daemon still holds is kept under the
// closed segment's name: a renamed file gets that name as a second link, a
// deleted one is copied there from the open descriptor, what a truncation
// left is copied there too. Then a new segment starts at the path, its
// first record a checkpoint of the last record the daemon wrote, followed by
// a "recovered" record that says what happened. Records cut by a truncation
// are gone; the checkpoints before the cut still vouch for them, so a copy
// (logrotate's, say) can be checked.
//
// When the log is where and as the daemon left it, Reopen does nothing. The
// daemon calls it on SIGHUP; external rotation tools must use that instead
// of copytruncate (docs/audit.md).
func (l *Log) Reopen() error {
	if l.pub == nil {
		return errors.New("audit log: Reopen needs checkpoints (Options.Signer)")
	}
	return l.do(l.reopen)
}

func (l *Log) reopen() error {
	if !l.started.Load() {
		return l.waitingError()
	}
	err := l.ready()
	var ve *VanishedError
	if err == nil || !errors.As(err, &ve) {
		return err
	}
	var fst unix.Stat_t
	if err := unix.Fstat(int(l.f.Fd()), &fst); err != nil {
		return unavailable("stat audit log", err)
	}
	// Something with content at the path that is not our file is not
	// ours to replace.
	var pst unix.Stat_t
	if err := unix.Lstat(l.path, &pst); err == nil && (pst.Dev != fst.Dev || pst.Ino != fst.Ino) && pst.Size > 0 {
		return fmt.Errorf("audit log %s: another file of %d bytes is at its path; move it away and reopen again", l.path, pst.Size)
	}
	closed := SegmentName(l.path, l.segFirst)
	first, last := l.segFirst, l.seq
	var note string
	keep := func(old *os.File) error {
		switch {
		case fst.Nlink == 0:
			if err := copyTo(old, l.off, closed); err != nil {
				return err
			}
			note = fmt.Sprintf("the active segment (records %d–%d) %s under the daemon; its content was written back from the open file to %s", first, last, ve.What, filepath.Base(closed))
		case fst.Size < l.off:
			left := "nothing was left of it"
			if fst.Size > 0 {
				if err := copyTo(old, fst.Size, closed); err != nil {
					return err
				}
				left = "what was left of it is " + filepath.Base(closed)
			}
			note = fmt.Sprintf("the active segment (records %d–%d) %s; %s. Records the cut removed are in no file of the log; the checkpoints up to record %d vouch for them, so a copy made before the cut can be checked with audit verify --segment", first, last, ve.What, left, last)
		default:
			if err := linkFD(old, closed); err != nil {
				return err
			}
			note = fmt.Sprintf("the active segment (records %d–%d) %s; it is %s now", first, last, ve.What, filepath.Base(closed))
		}
		return nil
	}
	if err := l.startSegment(checkpoint.ReasonReopen, keep); err != nil {
		return err
	}
	return l.commitInternal(Record{Kind: KindRecovered, Message: note})
}

// retain removes closed segments older than Options.Retain whose last
// record a checkpoint already out of the daemon's reach covers.
func (l *Log) retain() {
	if l.o.Retain <= 0 {
		return
	}
	out := l.wit.out(l)
	segs, err := Segments(l.path)
	if err != nil {
		return
	}
	removed := false
	for i, s := range segs {
		if s.Active || i+1 >= len(segs) {
			break
		}
		next := segs[i+1].First
		if segs[i+1].Active {
			next = l.segFirst
		}
		fi, err := os.Stat(s.Path)
		if err != nil || next == 0 || next-1 > out || l.now().Sub(fi.ModTime()) < l.o.Retain {
			break
		}
		if err := os.Remove(s.Path); err != nil {
			break
		}
		removed = true
		l.o.Journal.Send(journal.Entry{Priority: journal.Notice, Key: "audit-retain",
			Message: fmt.Sprintf("audit log: removed segment %s (records %d–%d, older than %v; a checkpoint of record %d is out)", filepath.Base(s.Path), s.First, next-1, l.o.Retain, out)})
	}
	if removed {
		syncDir(l.dir)
	}
}
