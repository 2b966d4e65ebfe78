package main

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
)

// socketFolderHint says what lets the daemon create its socket at path
// when it may not write the socket's folder: as after a trial with
// systemd-socket-activate run as root, which leaves the folder root's with
// its socket in it. The safe owner is the daemon's user, with the folder's
// mode kept (checkSocketDir has refused a folder others may write); a
// stale socket of another user's is removed by root. "" when the folder
// cannot be read or is the daemon's own.
func socketFolderHint(path string) string {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	if err != nil {
		return ""
	}
	uid, _ := ownerOf(fi)
	if uid == uint32(os.Getuid()) {
		return ""
	}
	owner := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(owner); err == nil {
		owner = u.Username
	}
	me := currentUserName()
	chown := fmt.Sprintf("give the folder to the daemon's user, keeping its mode: sudo chown %s: %s", me, dir)
	where := fmt.Sprintf("the socket folder %s belongs to %s (mode %04o), which the daemon's user %s may not write", dir, owner, fi.Mode().Perm(), me)
	if _, err := os.Lstat(path); err == nil {
		return fmt.Sprintf("%s, so it cannot replace the socket left there (by systemd-socket-activate, or a daemon run as root): remove it with: sudo rm %s, and %s; under systemd, RuntimeDirectory= makes that folder the service's", where, path, chown)
	}
	return fmt.Sprintf("%s: %s; under systemd, RuntimeDirectory= makes that folder the service's", where, chown)
}
