// Package keyfile reads and writes agent key files (docs/key-file.md) on
// disk, with the permission checks that keep them private. It moves bytes
// only: the format is grant.MarshalKeyFile and grant.ParseKeyFile, which
// its callers apply, so that package grant stays pure and this helper links
// nothing above it.
package keyfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// maxSize bounds what Read reads: a key file is about 150 bytes.
const maxSize = 4096

// Read reads the agent key file at path. It refuses a file that is not a
// regular file, that is not owned by the effective user, or that grants any
// permission to group or others: a key another user can read is no longer
// this agent's alone, and a key another user can write could be swapped.
func Read(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Check the opened file, not the path, so that a swap between the
	// check and the read cannot slip another file in.
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("key file %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("key file %s is accessible by group or others (mode %04o); run chmod 600 %s", path, perm, path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("key file %s is owned by uid %d, not by this user (uid %d)", path, st.Uid, os.Geteuid())
	}
	data, err := io.ReadAll(io.LimitReader(f, maxSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxSize {
		return nil, fmt.Errorf("key file %s is too large to be a key file", path)
	}
	return data, nil
}

// Write writes data, a key file, to a new file at path, mode 0600, creating
// missing parent directories with mode 0700. It never overwrites: if path
// exists, even as a symbolic link, it fails with an error that wraps
// fs.ErrExist. It refuses a parent directory that group or others can
// write, where another user could replace the file. The file is synced to
// disk before Write returns.
func Write(path string, data []byte) (err error) {
	if len(data) == 0 {
		return errors.New("write key file: nothing to write")
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	di, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if di.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("directory %s is writable by group or others (mode %04o); keep keys in a private directory", dir, di.Mode().Perm())
	}
	// O_EXCL with O_NOFOLLOW: never follow a link planted at path, never
	// truncate an existing key.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(path)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if d, derr := os.Open(dir); derr == nil {
		// Make the new directory entry durable too; some file systems
		// refuse to sync a directory, which is not worth failing for.
		_ = d.Sync()
		d.Close()
	}
	return nil
}
