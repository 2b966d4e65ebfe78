// Package durable replaces small files so that a crash leaves the old file
// or the new one, whole, and never a part of either: the state files of the
// daemon (the lock, the audit head report, the principal's public key, the
// paired phones, the phone page's certificate).
package durable

import (
	"os"
	"path/filepath"
)

// ReplaceFile replaces path with data. It writes a temporary file beside
// path with the given mode, fsyncs it, renames it over path and fsyncs the
// folder, so that the rename is on disk when it returns. beforeRename, if
// not nil, is given the temporary file's path before the rename (to change
// its owner, say). On error the temporary file is removed and path is left
// as it was, unless only the folder's fsync failed.
func ReplaceFile(path string, data []byte, mode os.FileMode, beforeRename func(tmp string)) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = f.Chmod(mode)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && beforeRename != nil {
		beforeRename(tmp)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return SyncDir(dir)
}

// SyncDir fsyncs the folder dir, so that a file created, renamed or
// removed in it stays so after a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
