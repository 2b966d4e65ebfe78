package peercred

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Identity is who is on the other end of a Unix socket connection.
//
// UID, GID and PID come from the kernel (SO_PEERCRED) and are those of the
// process that called connect, fixed at that moment: a client cannot choose
// or change them, so they are what authorization is based on. GroupIDs are
// the primary group followed by the supplementary groups that process had
// when it connected (SO_PEERGROUPS), also from the kernel. User and Groups
// are the names of those ids, or the numbers when they have no name.
//
// Exe and Unit are informative only. They are read from /proc/PID after the
// connection was accepted, when the process may have exec'd another program
// or exited and its PID been reused; Get checks through a pidfd
// (SO_PEERPIDFD) that the connecting process was still alive after reading
// them and leaves them empty otherwise, but a live process can still exec.
// Exe is empty when the daemon may not read another user's /proc/PID/exe.
// Unit is the innermost systemd unit (*.service or *.scope) of the process's
// cgroup; a user can name cgroups below its own user@.service as it likes,
// so Unit is only as trustworthy as that user. Never grant authority from
// Exe or Unit alone.
//
// The connecting process can pass its connection to another process; the
// identity stays that of the process that connected.
type Identity struct {
	UID, GID uint32
	PID      int32
	User     string
	Groups   []string
	GroupIDs []uint32
	Exe      string
	Unit     string
}

// String returns "user (uid 1000, pid 4242)" for messages.
func (id Identity) String() string {
	return fmt.Sprintf("%s (uid %d, pid %d)", id.User, id.UID, id.PID)
}

// InGroup reports whether the peer had group gid when it connected.
func (id Identity) InGroup(gid uint32) bool {
	for _, g := range id.GroupIDs {
		if g == gid {
			return true
		}
	}
	return false
}

// maxGroups caps the supplementary groups read from the kernel
// (NGROUPS_MAX on Linux).
const maxGroups = 65536

// Get returns the identity of the process at the other end of c,
// as the kernel reports it. It fails only when the kernel's credentials
// cannot be read; the informative fields are left empty when their source
// cannot be read.
func Get(c *net.UnixConn) (Identity, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return Identity{}, fmt.Errorf("peer credentials: %w", err)
	}
	var (
		cred      *unix.Ucred
		credErr   error
		groups    []uint32
		groupsErr error
		pidfd     = -1
	)
	err = raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if credErr != nil {
			return
		}
		groups, groupsErr = socketGroups(int(fd))
		if n, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD); err == nil {
			pidfd = n
		}
	})
	if err == nil {
		err = credErr
	}
	if err != nil {
		return Identity{}, fmt.Errorf("peer credentials: %w", err)
	}
	if pidfd >= 0 {
		defer unix.Close(pidfd)
	}

	id := Identity{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid}
	id.User = userName(cred.Uid)

	// Informative fields from /proc. The PID is 0 when the peer lives in
	// another PID namespace; then there is nothing to read.
	var exe, unit string
	var procGroups []uint32
	procOK := false
	if cred.Pid > 0 {
		dir := "/proc/" + strconv.Itoa(int(cred.Pid))
		exe, _ = os.Readlink(dir + "/exe")
		if data, err := os.ReadFile(dir + "/cgroup"); err == nil {
			unit = unitFromCgroup(data)
		}
		if groupsErr != nil {
			procGroups, procOK = statusGroups(dir+"/status", cred.Uid)
		}
		// PID reuse: if the connecting process died and its PID went to
		// another process, what we just read describes that other process.
		if !stillAlive(pidfd, dir, cred.Uid) {
			exe, unit, procGroups, procOK = "", "", nil, false
		}
	}
	id.Exe, id.Unit = exe, unit

	switch {
	case groupsErr == nil:
	case procOK:
		groups = procGroups
	default:
		groups = nil // only the primary group is known for sure
	}
	id.GroupIDs = append(id.GroupIDs, cred.Gid)
	for _, g := range groups {
		if !id.InGroup(g) {
			id.GroupIDs = append(id.GroupIDs, g)
		}
	}
	for _, g := range id.GroupIDs {
		id.Groups = append(id.Groups, groupName(g))
	}
	return id, nil
}

// socketGroups reads the peer's supplementary groups with SO_PEERGROUPS.
func socketGroups(fd int) ([]uint32, error) {
	n := 64
	for {
		buf := make([]uint32, n)
		size := uint32(n * 4)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
		switch {
		case errno == 0:
			return buf[:size/4], nil
		case errno == unix.ERANGE && int(size/4) > n && size/4 <= maxGroups:
			n = int(size / 4)
		default:
			return nil, errno
		}
	}
}

// stillAlive reports whether the process that connected still exists,
// so that what was read from /proc described it. With a pidfd the answer is
// exact; without one (kernels before 6.5), it only checks that the process
// now at dir has the peer's uid.
func stillAlive(pidfd int, dir string, uid uint32) bool {
	if pidfd >= 0 {
		err := unix.PidfdSendSignal(pidfd, 0, nil, 0)
		// EPERM: the process exists but belongs to another user.
		return err == nil || errors.Is(err, unix.EPERM)
	}
	data, err := os.ReadFile(dir + "/status")
	if err != nil {
		return false
	}
	euid, ok := statusField(data, "Uid:", 1)
	return ok && euid == uid
}

// statusGroups reads the "Groups:" line of /proc/PID/status, the
// fallback when SO_PEERGROUPS is not available. It reports false when the
// file cannot be read or belongs to a process with another effective uid.
func statusGroups(path string, uid uint32) ([]uint32, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	if euid, ok := statusField(data, "Uid:", 1); !ok || euid != uid {
		return nil, false
	}
	return parseStatusGroups(data)
}

// statusField returns the index-th number of the status line key.
func statusField(status []byte, key string, index int) (uint32, bool) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(rest)
			if index >= len(f) {
				return 0, false
			}
			n, err := strconv.ParseUint(f[index], 10, 32)
			return uint32(n), err == nil
		}
	}
	return 0, false
}

func parseStatusGroups(status []byte) ([]uint32, bool) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Groups:")
		if !ok {
			continue
		}
		var groups []uint32
		for _, f := range strings.Fields(rest) {
			n, err := strconv.ParseUint(f, 10, 32)
			if err != nil {
				return nil, false
			}
			groups = append(groups, uint32(n))
		}
		return groups, true
	}
	return nil, false
}

// unitFromCgroup returns the innermost systemd unit named in the
// unified (cgroup v2) line of /proc/PID/cgroup, or in the name=systemd line
// of cgroup v1. Path elements that are not valid unit names are ignored.
func unitFromCgroup(data []byte) string {
	var path string
	for _, line := range strings.Split(string(data), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			path = p
			break
		}
		if _, p, ok := strings.Cut(line, ":name=systemd:"); ok {
			path = p
		}
	}
	elems := strings.Split(path, "/")
	for i := len(elems) - 1; i >= 0; i-- {
		e := elems[i]
		if (strings.HasSuffix(e, ".service") || strings.HasSuffix(e, ".scope")) && validUnitName(e) {
			return e
		}
	}
	return ""
}

// validUnitName reports whether s uses only the characters systemd
// allows in unit names; cgroup names below a user's delegated subtree can
// be anything, including terminal escapes.
func validUnitName(s string) bool {
	if len(s) == 0 || len(s) > 255 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case r == ':', r == '-', r == '_', r == '.', r == '\\', r == '@':
		default:
			return false
		}
	}
	return true
}

func userName(uid uint32) string {
	s := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(s); err == nil {
		return u.Username
	}
	return s
}

func groupName(gid uint32) string {
	s := strconv.FormatUint(uint64(gid), 10)
	if g, err := user.LookupGroupId(s); err == nil {
		return g.Name
	}
	return s
}
