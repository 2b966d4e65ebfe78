package checkpoint

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// Latest reads the last checkpoint of a file of checkpoints (one JSON line
// each, as a file witness or a Keeper writes them, or audit records of kind
// "checkpoint"). It reads the file from its end, so its cost does not grow
// with the file. A missing file has none: nil, nil.
func Latest(path string) (*Checkpoint, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	line, err := lastLine(f, fi.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if line == nil {
		return nil, nil
	}
	cp, err := Parse(line)
	if err != nil {
		return nil, fmt.Errorf("%s: last line: %w", path, err)
	}
	return cp, nil
}

// maxLine bounds a line of a checkpoint file: Parse refuses longer ones.
const maxLine = 4096

// lastLine returns the last line of f (size bytes) that is not blank, or nil.
func lastLine(f io.ReaderAt, size int64) ([]byte, error) {
	const chunk = 8 << 10
	var tail []byte
	for pos := size; pos > 0; {
		n := min(int64(chunk), pos)
		pos -= n
		b := make([]byte, n)
		if _, err := f.ReadAt(b, pos); err != nil && err != io.EOF {
			return nil, err
		}
		tail = append(b, tail...)
		trimmed := bytes.TrimRight(tail, " \t\r\n")
		if i := bytes.LastIndexByte(trimmed, '\n'); i >= 0 {
			return bytes.TrimSpace(trimmed[i+1:]), nil
		}
		if pos == 0 {
			if len(trimmed) == 0 {
				return nil, nil
			}
			return bytes.TrimSpace(trimmed), nil
		}
		if len(tail) > maxLine+chunk {
			return nil, fmt.Errorf("last line longer than %d bytes", maxLine)
		}
	}
	return nil, nil
}

// ReadFile reads every checkpoint of a file of checkpoints (one JSON object
// per line; blank lines are skipped).
func ReadFile(path string) ([]*Checkpoint, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*Checkpoint
	for i, line := range bytes.Split(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		cp, err := Parse(line)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, i+1, err)
		}
		out = append(out, cp)
	}
	return out, nil
}

// Keeper keeps the latest checkpoint of a log in a file, for an approver
// (or anyone outside the daemon's reach) that receives checkpoints as the
// daemon makes them. Keep refuses, and leaves the file as it is, a
// checkpoint that does not verify under the principal key or that
// contradicts the one kept (an older seq, another hash at the same seq,
// another log): that is a daemon showing a rolled-back, rewritten or
// replaced log, and the error says so.
type Keeper struct{ Path string }

// Latest returns the checkpoint kept, or nil.
func (k Keeper) Latest() (*Checkpoint, error) { return Latest(k.Path) }

// Keep verifies cp under key and keeps it when it is newer than the one
// kept. The file is replaced atomically and fsynced.
func (k Keeper) Keep(cp *Checkpoint, key ed25519.PublicKey) error {
	if key == nil {
		return fmt.Errorf("%w: no key to check it against", ErrCheckpoint)
	}
	if err := cp.Verify(key); err != nil {
		return err
	}
	kept, err := k.Latest()
	if err != nil {
		return err
	}
	if kept != nil {
		if err := Consistent(kept, cp); err != nil {
			return err
		}
		if cp.Seq == kept.Seq {
			return nil
		}
	}
	tmp := k.Path + ".tmp"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(cp.Marshal(), '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, k.Path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("keep checkpoint: %w", err)
	}
	d, err := os.Open(filepath.Dir(k.Path))
	if err != nil {
		return fmt.Errorf("keep checkpoint: %w", err)
	}
	defer d.Close()
	return d.Sync()
}
