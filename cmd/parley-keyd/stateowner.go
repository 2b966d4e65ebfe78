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
// different users (root included) are refused: a command acts as one user
// only, and root's folder may be closed to the other.
func stateOwner(dirs ...string) (*user.User, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	var owner uint32
	var ownerDir, rootDir string
	conflict := func(a, b string) error {
		return withHint(fmt.Errorf("%s and %s belong to different users: root reads a folder of another user's only as that user, and acts as one user only", a, b),
			"copy the files into one folder; for audit verify, name the principal key with --key (parley-keyd pubkey prints it)")
	}
	for _, dir := range dirs {
		fi, err := os.Stat(dir)
		if err != nil {
			continue
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		switch {
		case !ok:
		case st.Uid == 0:
			if rootDir == "" {
				rootDir = dir
			}
		case owner == 0:
			owner, ownerDir = st.Uid, dir
		case st.Uid != owner:
			return nil, conflict(ownerDir, dir)
		}
	}
	if owner != 0 && rootDir != "" {
		return nil, conflict(rootDir, ownerDir)
	}
	if owner == 0 {
		return nil, nil
	}
	u, err := user.LookupId(strconv.FormatUint(uint64(owner), 10))
	if err != nil {
		return nil, withHint(fmt.Errorf("the folder %s belongs to uid %d, which has no user", ownerDir, owner), "name the daemon's user with --user")
	}
	return u, nil
}

// inOthersFolder reports whether root would read path from a folder of
// another user's, who could have planted it: then a command reads it after
// dropping to that user (actAsOwnerOf), or not at all. It is false for
// everyone but root.
func inOthersFolder(path string) bool { return folderOwner(path) != 0 }

// folderOwner returns the owner of the folder holding path when this
// process is root and that is another user; else 0.
func folderOwner(path string) uint32 {
	if os.Geteuid() != 0 {
		return 0
	}
	fi, err := os.Stat(filepath.Dir(path))
	if err != nil {
		return 0 // the read says what is missing
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Uid
	}
	return 0
}

// openNamed opens a file the admin named, for reading, before any drop: it
// never waits on a named pipe, and in a folder of another user's it follows
// no symbolic link and refuses a hard link to a file not that user's. It
// refuses anything but a regular file.
func openNamed(path string) (*os.File, error) {
	flags := os.O_RDONLY | syscall.O_NONBLOCK
	owner := folderOwner(path)
	if owner != 0 {
		flags |= syscall.O_NOFOLLOW
	}
	f, err := os.OpenFile(path, flags, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link in a folder of %s: refusing to follow it as root", path, userName(owner))
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil {
		if what := planted(fi, owner, owner != 0); what != "" {
			err = fmt.Errorf("%s %s: refusing to read it", path, what)
		} else if !fi.Mode().IsRegular() {
			err = fmt.Errorf("%s is not a regular file", path)
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// planted says what fi is when the daemon never makes it in a folder of
// owner's: a symbolic link, a named pipe, a device, or, with links, a hard
// link to a file of another user. It returns "" for anything else.
func planted(fi fs.FileInfo, owner uint32, links bool) string {
	st := fi.Sys().(*syscall.Stat_t)
	switch m := fi.Mode(); {
	case m&fs.ModeSymlink != 0:
		return "is a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "is a named pipe"
	case m&fs.ModeDevice != 0:
		return "is a device"
	case links && m.IsRegular() && st.Nlink > 1 && st.Uid != owner:
		return "is a hard link to a file of " + userName(st.Uid)
	}
	return ""
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
		if what := planted(fi, owner, true); what != "" {
			return withHint(fmt.Errorf("%s %s: %w, so someone who can write the folder planted it; refusing to touch the folder", path, what, errPlanted),
				"keep a copy for investigation, remove it (sudo rm "+path+"), and find how it came there")
		}
	}
	return nil
}
