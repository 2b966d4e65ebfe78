package keyd

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// SocketDirError is a socket folder that a user other than root and the
// daemon's own could write to.
type SocketDirError struct {
	Dir   string      // the folder
	Mode  os.FileMode // its mode
	Owner uint32      // its owner's uid
}

func (e *SocketDirError) Error() string {
	mode := uint32(e.Mode.Perm())
	if e.Mode&os.ModeSticky != 0 {
		mode |= 0o1000
	}
	return fmt.Sprintf("the socket folder %s (mode %04o, owner uid %d) can be written by users other than root and the daemon's, who could replace the daemon's socket with their own",
		e.Dir, mode, e.Owner)
}

// Fix says how to make the folder safe.
func (e *SocketDirError) Fix() string {
	return fmt.Sprintf("chmod go-w %s and give it to root or the daemon's user, or put the socket in a folder that only they may write, such as /run/parley-keyd", e.Dir)
}

// checkSocketDir refuses a socket path in a folder that anyone but root or
// uid could write to. Attack: another local user removes or renames the
// daemon's socket, binds one of its own at the same path, and receives
// what agents and the human send: proofs, requests, approvals. The socket's
// own folder must not be writable by group or others at all (a sticky bit
// protects the daemon's socket while it exists, but not its name while the
// daemon restarts); every folder above it must be writable by no one else
// either, or sticky, so that the folder itself cannot be renamed away.
// Every folder on the way must belong to root or uid. Symbolic links are
// followed, and the folders of the link and of its target are both checked.
func checkSocketDir(path string, uid uint32) error {
	dir := filepath.Dir(filepath.Clean(path))
	if !filepath.IsAbs(dir) {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		dir = abs
	}
	if err := checkDirChain(dir, uid); err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	if real != dir {
		return checkDirChain(real, uid)
	}
	return nil
}

// checkDirChain checks dir as the socket's folder, and each of its parents.
func checkDirChain(dir string, uid uint32) error {
	for d, own := dir, true; ; d, own = filepath.Dir(d), false {
		fi, err := os.Lstat(d)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("cannot read the owner of %s", d)
		}
		mode := fi.Mode()
		if mode&os.ModeSymlink == 0 {
			open := mode.Perm()&0o022 != 0
			if st.Uid != 0 && st.Uid != uid || open && (own || mode&os.ModeSticky == 0) {
				return &SocketDirError{Dir: d, Mode: mode, Owner: st.Uid}
			}
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}
