// Package filetrust decides whether a file the daemon trusts could be
// changed by anyone but root and the daemon's own user (DESIGN.md property
// 12), and reads such files only after deciding it.
//
// # What is checked
//
// Check walks the path from "/" one name at a time, as the kernel does,
// following every symbolic link (at most 40) to its target and walking that
// too. Every file, folder and link met on the way must be owned by root or
// by the daemon's user. No file or folder on the way may be writable by
// anyone else:
//
//   - not by others (mode o+w);
//   - not by its group (g+w) unless every member of that group is root or
//     the daemon's user: members listed in /etc/group and users whose
//     primary group it is in /etc/passwd. A group that /etc/group does not
//     list counts as having other members, since who is in it cannot be
//     known;
//   - not through a POSIX ACL (system.posix_acl_access): a named user or
//     named group entry with write for anyone else is refused whatever the
//     mask, since its owner's next chmod g+w would make it effective. An
//     ACL that does not parse, or an NFSv4 ACL, is refused.
//
// One exception, as for /tmp: a folder others may write is accepted when it
// has the sticky bit, because the kernel then lets only the owner of an entry
// (and the folder's owner and root) remove or rename it, and the next name
// on the path must be owned by root or the daemon's user anyway. A name that
// does not exist is accepted only in a folder nobody else may write at all,
// sticky or not: in a sticky folder anyone may create it.
//
// Open then opens the file the walk ended at, without following a link, and
// checks that it is the very file the walk checked (same device and inode).
package filetrust

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// maxLinks bounds the symbolic links one walk follows, as the kernel's
// ELOOP limit does.
const maxLinks = 40

// UnsafeError says that someone other than root and the daemon's user could
// change a trusted file: which file was asked for, which file, folder or
// link on its way is at fault, what is wrong with it and a command that
// makes it safe. Fix never weakens a permission: it names the owner and the
// mode that are safe.
type UnsafeError struct {
	File    string // the trusted file asked about
	Path    string // the file, folder or link at fault
	Problem string // such as "is owned by calbot"
	Fix     string
}

func (e *UnsafeError) Error() string {
	at := e.Path
	if e.Path != e.File {
		at = fmt.Sprintf("%s (on the way to %s)", e.Path, e.File)
	}
	return fmt.Sprintf("%s %s: only root and the daemon's user may be able to change what the daemon trusts", at, e.Problem)
}

// Check returns nil when nobody but root and the user uid can change what
// path names: its content, or which file it is. A path that does not exist
// is reported with an error wrapping fs.ErrNotExist, after checking that
// nobody else could create it. Any other failure is an *UnsafeError or an
// error from the file system.
func Check(path string, uid uint32) error {
	_, _, err := walk(path, uid)
	return err
}

// Open checks path as Check does and opens it for reading. The file opened
// is the one checked.
func Open(path string, uid uint32) (*os.File, error) {
	real, fi, err := walk(path, uid)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	f, err := os.OpenFile(real, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	got, err := f.Stat()
	if err == nil && !os.SameFile(got, fi) {
		err = fmt.Errorf("%s changed while it was checked", path)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ReadFile checks path as Check does and returns its content, at most max
// bytes: a larger file is an error.
func ReadFile(path string, uid uint32, max int64) ([]byte, error) {
	f, err := Open(path, uid)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, max)
	}
	return b, nil
}

// walker holds one walk's state: whom to trust, and the user and group
// lists, read once when first needed.
type walker struct {
	file  string
	uid   uint32
	links int
	db    *accounts
}

// walk resolves path name by name and checks each step; it returns the
// resolved path and what it names.
func walk(path string, uid uint32) (string, fs.FileInfo, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", nil, err
	}
	w := &walker{file: path, uid: uid}
	cur := "/"
	fi, err := os.Lstat(cur)
	if err != nil {
		return "", nil, err
	}
	if err := w.checkNode(cur, fi); err != nil {
		return "", nil, err
	}
	pending := strings.Split(abs, "/")
	for len(pending) > 0 {
		name := pending[0]
		pending = pending[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			// cur has no links in it and every folder above it was
			// checked on the way down.
			cur = filepath.Dir(cur)
			if fi, err = os.Lstat(cur); err != nil {
				return "", nil, err
			}
			continue
		}
		if !fi.IsDir() {
			return "", nil, &fs.PathError{Op: "open", Path: path, Err: syscall.ENOTDIR}
		}
		next := filepath.Join(cur, name)
		nfi, err := os.Lstat(next)
		if errors.Is(err, fs.ErrNotExist) {
			// Whoever may create the name decides what it will be.
			if who := w.othersWrite(cur, fi); who != "" {
				return "", nil, w.unsafe(cur, fi, fmt.Sprintf("lets %s create %s in it", who, name))
			}
			return "", nil, &fs.PathError{Op: "open", Path: path, Err: syscall.ENOENT}
		}
		if err != nil {
			return "", nil, err
		}
		if err := w.checkNode(next, nfi); err != nil {
			return "", nil, err
		}
		if nfi.Mode()&fs.ModeSymlink != 0 {
			w.links++
			if w.links > maxLinks {
				return "", nil, &fs.PathError{Op: "open", Path: path, Err: syscall.ELOOP}
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", nil, err
			}
			if filepath.IsAbs(target) {
				cur = "/"
				if fi, err = os.Lstat(cur); err != nil {
					return "", nil, err
				}
			}
			pending = append(strings.Split(target, "/"), pending...)
			continue
		}
		cur, fi = next, nfi
	}
	return cur, fi, nil
}

// checkNode checks one file, folder or link met on the way: its owner, and
// who else may write it.
func (w *walker) checkNode(path string, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: cannot read its owner", path)
	}
	if !w.trusted(st.Uid) {
		// Its owner may chmod it, or replace it (a link in a sticky
		// folder), at will.
		return w.unsafe(path, fi, "is owned by "+userName(st.Uid))
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil // a link's own mode means nothing
	}
	who := w.othersWrite(path, fi)
	if who == "" {
		return nil
	}
	if fi.IsDir() && fi.Mode()&fs.ModeSticky != 0 && !strings.HasPrefix(who, "an ACL") {
		// As /tmp: others may add names, but not remove or rename one
		// they do not own, and every name on the path is checked to be
		// root's or the daemon's user's.
		return nil
	}
	return w.unsafe(path, fi, "lets "+who+" change it")
}

func (w *walker) trusted(uid uint32) bool { return uid == 0 || uid == w.uid }

// othersWrite says who besides root and the daemon's user may write the
// file or folder at path, or "" when nobody may.
func (w *walker) othersWrite(path string, fi fs.FileInfo) string {
	st, _ := fi.Sys().(*syscall.Stat_t)
	mode := fi.Mode().Perm()
	if mode&0o002 != 0 {
		return fmt.Sprintf("every user (mode %04o)", mode)
	}
	if mode&0o020 != 0 && st != nil {
		if m := w.otherMember(st.Gid); m != "" {
			return fmt.Sprintf("group %s (mode %04o), %s,", groupName(st.Gid), mode, m)
		}
	}
	if who := w.aclWriters(path, st); who != "" {
		return who
	}
	return ""
}

// aclWriters says who else an ACL on path lets write it.
func (w *walker) aclWriters(path string, st *syscall.Stat_t) string {
	b, err := getxattr(path, "system.posix_acl_access")
	if err == nil {
		entries, perr := parseACL(b)
		if perr != nil {
			return "an ACL that cannot be read"
		}
		for _, e := range entries {
			if e.perm&aclWrite == 0 {
				continue
			}
			switch e.tag {
			case aclUser:
				if !w.trusted(e.id) {
					return "an ACL entry for user " + userName(e.id)
				}
			case aclGroup:
				if m := w.otherMember(e.id); m != "" {
					return fmt.Sprintf("an ACL entry for group %s, %s,", groupName(e.id), m)
				}
			case aclGroupObj:
				if st != nil {
					if m := w.otherMember(st.Gid); m != "" {
						return fmt.Sprintf("an ACL entry for group %s, %s,", groupName(st.Gid), m)
					}
				}
			}
		}
	} else if !noXattr(err) {
		return "an ACL that cannot be read (" + err.Error() + ")"
	}
	if _, err := getxattr(path, "system.nfs4_acl"); err == nil {
		return "an NFSv4 ACL, which is not checked,"
	}
	return ""
}

func getxattr(path, name string) ([]byte, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Lgetxattr(path, name, buf)
		if errors.Is(err, unix.ERANGE) && len(buf) < 1<<16 {
			buf = make([]byte, len(buf)*4)
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

// noXattr reports whether err means "no such attribute here".
func noXattr(err error) bool {
	return errors.Is(err, unix.ENODATA) || errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP)
}

// The tags and the write bit of a POSIX ACL in its xattr form
// (linux/posix_acl_xattr.h): a 4-byte version, then 8-byte entries of tag,
// perm (16 bits each) and id (32 bits), little-endian.
const (
	aclVersion  = 2
	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclGroup    = 0x08
	aclMask     = 0x10
	aclOther    = 0x20
	aclWrite    = 0x02
)

type aclEntry struct {
	tag, perm uint16
	id        uint32
}

// parseACL reads a system.posix_acl_access value strictly: a wrong version,
// a length that is not whole entries or an unknown tag is an error.
func parseACL(b []byte) ([]aclEntry, error) {
	if len(b) < 4 || (len(b)-4)%8 != 0 {
		return nil, fmt.Errorf("ACL of %d bytes", len(b))
	}
	if v := binary.LittleEndian.Uint32(b); v != aclVersion {
		return nil, fmt.Errorf("ACL version %d", v)
	}
	var out []aclEntry
	for p := b[4:]; len(p) > 0; p = p[8:] {
		e := aclEntry{tag: binary.LittleEndian.Uint16(p), perm: binary.LittleEndian.Uint16(p[2:]), id: binary.LittleEndian.Uint32(p[4:])}
		switch e.tag {
		case aclUserObj, aclUser, aclGroupObj, aclGroup, aclMask, aclOther:
		default:
			return nil, fmt.Errorf("ACL entry tag %#x", e.tag)
		}
		out = append(out, e)
	}
	return out, nil
}

// otherMember names a member of group gid who is neither root nor the
// daemon's user, or returns "" when there is none.
func (w *walker) otherMember(gid uint32) string {
	if w.db == nil {
		w.db = readAccounts()
	}
	return w.db.otherMember(gid, w.trusted)
}

func (w *walker) unsafe(path string, fi fs.FileInfo, problem string) *UnsafeError {
	return &UnsafeError{File: w.file, Path: path, Problem: problem, Fix: w.fix(path, fi)}
}

// fix is a command that makes path safe, naming the owner and the mode
// that are: a file root's, readable by the daemon's group; a program and a
// folder root's, written by nobody else. What belongs to another user is
// not taken from them: the trusted file moves instead.
func (w *walker) fix(path string, fi fs.FileInfo) string {
	st, _ := fi.Sys().(*syscall.Stat_t)
	sudo := ""
	if os.Geteuid() != 0 {
		sudo = "sudo "
	}
	q := shellQuote(path)
	acl := ""
	if _, err := getxattr(path, "system.posix_acl_access"); err == nil {
		acl = " && " + sudo + "setfacl -b " + q
	}
	switch {
	case st != nil && !w.trusted(st.Uid) && path != w.file:
		return fmt.Sprintf("%s belongs to %s: move %s to a folder of root's, such as /etc/parley-keyd (%schown root:%s FILE && %schmod 0640 FILE)",
			path, userName(st.Uid), w.file, sudo, w.daemonGroup(), sudo)
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Sprintf("replace the link %s with the file itself, root's: %scp --remove-destination \"$(readlink -f %s)\" %s && %schown root:%s %s && %schmod 0640 %s",
			path, sudo, q, q, sudo, w.daemonGroup(), q, sudo, q)
	case fi.IsDir():
		return fmt.Sprintf("%schown root:root %s && %schmod 0755 %s%s", sudo, q, sudo, q, acl)
	case fi.Mode().Perm()&0o111 != 0:
		return fmt.Sprintf("%schown root:root %s && %schmod 0755 %s%s", sudo, q, sudo, q, acl)
	}
	return fmt.Sprintf("%schown root:%s %s && %schmod 0640 %s%s", sudo, w.daemonGroup(), q, sudo, q, acl)
}

// daemonGroup names the daemon's user's primary group.
func (w *walker) daemonGroup() string {
	if w.uid == 0 {
		return "root"
	}
	u, err := user.LookupId(strconv.FormatUint(uint64(w.uid), 10))
	if err != nil {
		return "root"
	}
	if g, err := user.LookupGroupId(u.Gid); err == nil {
		return g.Name
	}
	return u.Gid
}

func shellQuote(s string) string {
	if strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func userName(uid uint32) string {
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		return u.Username
	}
	return "uid " + strconv.FormatUint(uint64(uid), 10)
}

func groupName(gid uint32) string {
	if g, err := user.LookupGroupId(strconv.FormatUint(uint64(gid), 10)); err == nil {
		return g.Name
	}
	return "gid " + strconv.FormatUint(uint64(gid), 10)
}

// aclRead is the read bit of a POSIX ACL entry.
const aclRead = 0x04

// OthersRead says who besides root and the user uid may read the file f
// (opened from path): every user (o+r), its group when anyone else is in
// it (g+r), or a user or group an ACL entry names. It returns "" when
// nobody else may. For secrets: a key service token or PIN that an agent
// can read lets the agent sign as the principal without the daemon.
func OthersRead(f *os.File, uid uint32) (string, error) {
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", fmt.Errorf("%s: cannot read its owner", f.Name())
	}
	w := &walker{file: f.Name(), uid: uid}
	mode := fi.Mode().Perm()
	switch {
	case !w.trusted(st.Uid):
		return "its owner " + userName(st.Uid), nil
	case mode&0o004 != 0:
		return fmt.Sprintf("every user (mode %04o)", mode), nil
	case mode&0o040 != 0:
		if m := w.otherMember(st.Gid); m != "" {
			return fmt.Sprintf("group %s (mode %04o), %s", groupName(st.Gid), mode, m), nil
		}
	}
	buf := make([]byte, 1<<16)
	n, err := unix.Fgetxattr(int(f.Fd()), "system.posix_acl_access", buf)
	if noXattr(err) {
		return "", nil
	}
	if err != nil {
		return "an ACL that cannot be read", nil
	}
	entries, err := parseACL(buf[:n])
	if err != nil {
		return "an ACL that cannot be read", nil
	}
	for _, e := range entries {
		if e.perm&aclRead == 0 {
			continue
		}
		switch e.tag {
		case aclUser:
			if !w.trusted(e.id) {
				return "an ACL entry for user " + userName(e.id), nil
			}
		case aclGroup:
			if m := w.otherMember(e.id); m != "" {
				return fmt.Sprintf("an ACL entry for group %s, %s", groupName(e.id), m), nil
			}
		}
	}
	return "", nil
}
