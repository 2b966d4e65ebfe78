package audit

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// The log writes its active segment in one of two ways.
//
// Appending (the default): the file is opened with O_APPEND, each group of
// records is one write, and fsync makes it durable. The file's length is
// always the end of the last record. An admin can set the append-only
// attribute (chattr +a).
//
// Preallocated (Options.Preallocate > 0): the log writes zeros ahead of its
// last record, a chunk at a time, and fsyncs them once; records are then
// written in place and made durable with fdatasync, which has no size or
// block allocation to commit and costs about half of an fsync that appends
// (BenchmarkWriteSync; issue 15). The file then ends with zeros, which every
// reader here stops at; the log cuts them when it closes a segment and when
// it closes. A file with the append-only attribute is appended to
// regardless: the kernel refuses writes in place there.

// zeros is the source of preallocated space and of the bytes that take back
// a failed write in place.
var zeros = make([]byte, 64<<10)

// commitSync is the fdatasync that makes a group of records written in
// place durable; tests replace it to hold or fail a group's sync.
var commitSync = unix.Fdatasync

// appendSync is the fsync that makes a group of records appended to a
// segment that is not preallocated durable, with the file's new size;
// tests replace it as commitSync.
var appendSync = (*os.File).Sync

// setMode makes the active segment's file preallocated when the options ask
// for it and the file allows it.
func (l *Log) setMode() {
	l.pre = false
	if l.o.Preallocate <= 0 {
		return
	}
	fd := int(l.f.Fd())
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return
	}
	// Clearing O_APPEND fails with EPERM on an append-only file.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags&^unix.O_APPEND); err != nil {
		return
	}
	l.pre = true
}

// growSoon asks the writer goroutine to grow the reserve ahead (growAhead).
func (l *Log) growSoon() {
	select {
	case l.grow <- struct{}{}:
	default: // asked already
	}
}

// write appends b after the last record and makes it durable. On failure it
// takes back what it wrote; if that fails too, the next write tries again
// first (ready).
func (l *Log) write(b []byte, during *func()) error {
	if l.pre && l.off+int64(len(b)) > l.end {
		l.inline.Add(1)
		if err := l.extend(l.off + int64(len(b))); err != nil {
			return unavailable("preallocate audit log", err)
		}
	}
	var n int
	var err error
	if l.pre {
		n, err = pwrite(l.f, b, l.off)
		if err == nil {
			l.meanwhile(l.off, n, during)
			err = commitSync(int(l.f.Fd()))
		}
	} else {
		n, err = l.f.Write(b)
		if err == nil {
			l.meanwhile(l.off, n, during)
			err = appendSync(l.f)
		}
	}
	l.syncs.Add(1)
	end := l.off + int64(n)
	if l.pre {
		end = l.end
	}
	if err == nil {
		// Another writer between ready and our write, or a truncation
		// under us: the file is not the length we expect.
		if st, serr := statFD(l.f); serr == nil && st.size != end {
			ve := &VanishedError{Path: l.path, What: fmt.Sprintf("changed during a write (%d bytes, %d expected): another process writes to or truncates it", st.size, end)}
			if !l.pre {
				// Take back exactly our bytes, at the end of the file
				// (O_APPEND), and leave the rest for ready to report.
				l.cutTo(st.size - int64(n))
			} else {
				l.dirty = int64(n)
				l.undo()
			}
			return ve
		}
	}
	if err != nil {
		l.dirty = max(int64(n), 1)
		l.undo()
		return unavailable("write audit log", err)
	}
	l.off += int64(n)
	if !l.pre {
		l.end = l.off
	} else if l.end-l.off < l.o.Preallocate/2 {
		l.growSoon()
	}
	return nil
}

// meanwhile runs *during, if any, once the n bytes written at off are on
// their way to the disk: sync_file_range starts their writeback without
// waiting for it, so the fsync after during waits for less. It is a
// head start only; the fsync decides durability, so its error is ignored.
func (l *Log) meanwhile(off int64, n int, during *func()) {
	if during == nil || *during == nil {
		return
	}
	_ = unix.SyncFileRange(int(l.f.Fd()), off, int64(n), unix.SYNC_FILE_RANGE_WRITE)
	f := *during
	*during = nil
	f()
}

// growAhead runs on the writer goroutine, holding wmu, when a commit left
// less than half of the reserve: it writes the next chunk of zeros and
// fsyncs them there, between requests, so that a request's own commit
// finds its space written and has no size or allocation for fdatasync to
// commit (issue 25). The reserve is then between half a chunk and one and
// a half. A failure (a full disk) is tried again a second later at the
// earliest; meanwhile records go on into what is left, and a commit that
// finds too little tries to grow it itself, and fails as unavailable when
// it cannot.
func (l *Log) growAhead() {
	// A deferred log writes nothing before Start (l.waiting).
	if !l.pre || l.f == nil || l.waiting != nil || l.end-l.off >= l.o.Preallocate/2 {
		return
	}
	// The clock is read only after a failure: a test's clock moves on
	// each reading, and records' times must not depend on when this ran.
	if !l.growRetry.IsZero() && l.now().Before(l.growRetry) {
		return
	}
	if err := l.ready(); err != nil {
		return // the next commit reports it
	}
	if err := l.extend(l.end + 1); err != nil {
		l.growRetry = l.now().Add(time.Second)
		return
	}
	l.growRetry = time.Time{}
}

// extend writes zeros from the end of the file up to at least need, in
// whole chunks, and fsyncs them.
func (l *Log) extend(need int64) error {
	end := l.end
	for end < need {
		end += l.o.Preallocate
	}
	// On failure, the zeros written so far are cut; if even that fails
	// they stay, counted as ours (zeros are what readers stop at anyway),
	// so that the next write does not take them for someone else's.
	fail := func(err error) error {
		if l.f.Truncate(l.end) != nil {
			if st, err := statFD(l.f); err == nil && st.size > l.end {
				l.end = st.size
			}
		}
		return err
	}
	for off := l.end; off < end; {
		n := min(int64(len(zeros)), end-off)
		if _, err := pwrite(l.f, zeros[:n], off); err != nil {
			return fail(err)
		}
		off += n
	}
	if err := l.f.Sync(); err != nil {
		return fail(err)
	}
	l.syncs.Add(1)
	l.end = end
	return nil
}

// undo takes back the bytes a failed write may have left after the last
// record: it cuts them when appending, and overwrites them with zeros when
// writing in place. It clears l.dirty when it succeeds.
func (l *Log) undo() error {
	if l.dirty == 0 {
		return nil
	}
	if !l.pre {
		if err := l.cutTo(l.off); err != nil {
			return err
		}
		return nil
	}
	for off, left := l.off, min(l.dirty, l.end-l.off); left > 0; {
		n := min(int64(len(zeros)), left)
		if _, err := pwrite(l.f, zeros[:n], off); err != nil {
			return err
		}
		off, left = off+n, left-n
	}
	if err := unix.Fdatasync(int(l.f.Fd())); err != nil {
		return err
	}
	l.syncs.Add(1)
	l.dirty = 0
	return nil
}

// cutTo truncates the file to size, when it is longer. It never makes the
// file longer: a file truncated under the log (to less than size) stays as
// it is, for ready to find.
func (l *Log) cutTo(size int64) error {
	st, err := statFD(l.f)
	if err != nil {
		return err
	}
	if size < 0 || st.size <= size {
		l.dirty = 0
		return nil
	}
	if err := l.f.Truncate(size); err != nil {
		return err
	}
	if err := l.f.Sync(); err != nil {
		return err
	}
	l.syncs.Add(1)
	l.dirty = 0
	return nil
}

// trim cuts the preallocated zeros after the last record, so that a file the
// log leaves (closed, or at rest) ends with its last record. Like cutTo, it
// never makes the file longer.
func (l *Log) trim() error {
	if l.end <= l.off {
		return nil
	}
	// Bytes after the preallocated space are someone else's; leave the
	// file as it is for whoever investigates.
	if st, err := statFD(l.f); err == nil && st.size > l.end {
		return nil
	}
	if err := l.cutTo(l.off); err != nil {
		return fmt.Errorf("cut the preallocated tail of audit log %s: %w", l.path, err)
	}
	l.end = l.off
	return nil
}

// pwrite writes b at off with pwrite(2). (os.File.WriteAt refuses a file
// opened with O_APPEND, even after setMode cleared the flag.)
func pwrite(f *os.File, b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		m, err := unix.Pwrite(int(f.Fd()), b[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, &os.PathError{Op: "write", Path: f.Name(), Err: err}
		}
		if m == 0 {
			return n, &os.PathError{Op: "write", Path: f.Name(), Err: unix.EIO}
		}
		n += m
	}
	return n, nil
}

// fileStat is what the log checks of its file: which file it is, how many
// names it has and its length. Never its times.
type fileStat struct {
	dev, ino uint64
	nlink    uint32
	size     int64
}

// statMask asks statx for the identity, link count and size only. Asking
// for a file's ctime or mtime (fstat and lstat always do) marks them read,
// and a kernel with multigrain timestamps (Linux 6.13) then stamps the next
// write with a fine-grained time, so that the fdatasync after it must write
// the inode too: 80–100 µs of every record on ext4 here, a third of the
// write (issue 25, TestCommitLeavesTimestampsUnread).
const statMask = unix.STATX_TYPE | unix.STATX_INO | unix.STATX_NLINK | unix.STATX_SIZE

// statFD is fstat without the times.
func statFD(f *os.File) (fileStat, error) {
	return statx(int(f.Fd()), "", unix.AT_EMPTY_PATH)
}

// statName is lstat without the times.
func statName(path string) (fileStat, error) {
	return statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW)
}

func statx(dirfd int, path string, flags int) (fileStat, error) {
	var sx unix.Statx_t
	for {
		err := unix.Statx(dirfd, path, flags|unix.AT_STATX_SYNC_AS_STAT, statMask, &sx)
		if err == unix.EINTR {
			continue
		}
		if err == unix.ENOSYS {
			// A kernel before statx (Linux 4.11): the times are read
			// too, which costs only time.
			var st unix.Stat_t
			if path == "" {
				err = unix.Fstat(dirfd, &st)
			} else {
				err = unix.Lstat(path, &st)
			}
			return fileStat{dev: st.Dev, ino: st.Ino, nlink: uint32(st.Nlink), size: st.Size}, err
		}
		if err != nil {
			return fileStat{}, err
		}
		return fileStat{dev: unix.Mkdev(sx.Dev_major, sx.Dev_minor), ino: sx.Ino, nlink: sx.Nlink, size: int64(sx.Size)}, nil
	}
}
