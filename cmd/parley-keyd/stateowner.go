package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// Commands that root runs on the daemon's state folder (init, key, pair,
// devices, audit, status, pubkey) never touch it as root. The daemon's user
// owns that folder and may plant anything in it: a symbolic link to
// /etc/nologin where root's command creates a lock file, a named pipe where
// it reads the log (it would hang), a hard link to a file of root's. So,
// run as root, each of these commands first drops to the folder's owner
// for good (setgroups, setgid, setuid: Go applies them to every thread),
// then refuses a folder holding what the daemon never makes there. After
// the drop, whatever a planted link leads to is opened with the daemon
// user's rights, which are the rights the planter has anyway: the kernel,
// not a check of each path, keeps root's files out of reach. The check of
// the folder's entries only makes the refusal immediate and clear, and
// keeps a pipe from hanging the command.
//
// What the admin names outside the folder (a passphrase file, --out, a
// backup, --checkpoint, --key FILE, the configuration) is opened before
// the drop, as root; audit verify reads a --checkpoint, --after or --key
// file in a folder of the daemon's user's (a file witness's) after it.

// stateOwner returns the user root acts as in the folders dirs (those that
// exist): their owner, when that is not root. It returns nil when this
// process is not root, or when every folder is root's. Folders of two
// different users are refused: a command acts as one user only.
func stateOwner(dirs ...string) (*user.User, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	var owner uint32
	var first string
	for _, dir := range dirs {
		fi, err := os.Stat(dir)
		if err != nil {
			continue
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || st.Uid == 0 {
			continue
		}
		if owner != 0 && st.Uid != owner {
			return nil, withHint(fmt.Errorf("%s and %s belong to different users (uid %d and %d): root acts as one folder's owner only", first, dir, owner, st.Uid),
				"run the command as one of those users, or name each file so that one folder is used")
		}
		owner, first = st.Uid, dir
	}
	if owner == 0 {
		return nil, nil
	}
	u, err := user.LookupId(strconv.FormatUint(uint64(owner), 10))
	if err != nil {
		return nil, withHint(fmt.Errorf("the folder %s belongs to uid %d, which has no user", first, owner), "name the daemon's user with --user")
	}
	return u, nil
}

// inOthersFolder reports whether root would read path from a folder of
// another user's, who could have planted it: then a command reads it after
// dropping to that user (actAsOwnerOf), not as root. It is false for
// everyone but root.
func inOthersFolder(path string) bool {
	if os.Geteuid() != 0 {
		return false
	}
	fi, err := os.Stat(filepath.Dir(path))
	if err != nil {
		return false // the read says what is missing
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Uid != 0
}

// actAsOwnerOf drops from root to the owner of the folders dirs (see
// stateOwner) and checks each of them with checkStateFolder. Other users,
// and root in folders of its own, stay as they are.
func actAsOwnerOf(dirs ...string) error {
	u, err := stateOwner(dirs...)
	if err != nil || u == nil {
		return err
	}
	if err := dropTo(u); err != nil {
		return err
	}
	for _, dir := range dirs {
		if err := checkStateFolder(dir); err != nil {
			return err
		}
	}
	return nil
}

// dropTo makes this process u, for good: no supplementary groups, u's
// primary group, u's uid (real, effective and saved).
func dropTo(u *user.User) error {
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return fmt.Errorf("user %s: uid %q", u.Username, u.Uid)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return fmt.Errorf("user %s: gid %q", u.Username, u.Gid)
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("dropping to user %s: %w", u.Username, err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("dropping to user %s: %w", u.Username, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("dropping to user %s: %w", u.Username, err)
	}
	if os.Geteuid() != uid || os.Getuid() != uid || os.Getegid() != gid {
		return fmt.Errorf("dropping to user %s did not take", u.Username)
	}
	return nil
}

// errPlanted is wrapped by checkStateFolder's refusals.
var errPlanted = errors.New("the daemon never makes this in its state folder")

// checkStateFolder refuses a state folder dir that holds a symbolic link,
// a named pipe or a device, or a hard link to a file of another user than
// the folder's owner: the daemon makes none of these there, so one was
// planted. It reads the entries without following any. A folder that does
// not exist passes: the command itself says what is missing.
//
// Sockets pass (no open() reaches through one), as do the daemon's own
// hard links: a closed audit segment shares its file with the active one
// while the daemon rotates the log.
func checkStateFolder(dir string) error {
	// The folder itself is named by the admin, in a folder of root's: it
	// may be a link root made to a folder elsewhere.
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return nil // the command says what is wrong with it
	}
	owner := fi.Sys().(*syscall.Stat_t).Uid
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("%s: %w", dir, err)
	}
	for _, name := range names {
		path := filepath.Join(dir, name)
		fi, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since the listing
		}
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		what := ""
		switch m := fi.Mode(); {
		case m&fs.ModeSymlink != 0:
			what = "is a symbolic link"
		case m&fs.ModeNamedPipe != 0:
			what = "is a named pipe"
		case m&fs.ModeDevice != 0:
			what = "is a device"
		case m.IsRegular() && st.Nlink > 1 && st.Uid != owner:
			what = fmt.Sprintf("is a hard link to a file of %s", userName(st.Uid))
		}
		if what != "" {
			return withHint(fmt.Errorf("%s %s: %w, so someone who can write the folder planted it; refusing to touch the folder", path, what, errPlanted),
				"keep a copy for investigation, remove it (sudo rm "+path+"), and find how it came there")
		}
	}
	return nil
}
