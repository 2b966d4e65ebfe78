package keystore

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/durable"
)

// Backups, restores and rotations of the file key.
//
// A backup is the plain key file encrypted with age to a passphrase (scrypt
// recipient, ASCII armor): exactly the format of an encrypted key file, so
// that age -d reads it, and a backup copied into a state folder as
// KeyFileName is a working key whose passphrase is the backup's.
//
// A rotation replaces the key with a new one and lists the old public key
// in PreviousFileName with the time until which services should still
// trust it: grants the old key signed live until then at most. The old
// private key is not kept: it will never sign again, and a copy is only
// something to steal. Back it up first if it must be kept.

// PreviousFileName lists the principal keys rotated out, one a line:
//
//	ed25519:<base64url> until <RFC 3339 time>
//
// mode 0644, like PublicKeyFileName: it is public.
const PreviousFileName = "principal.previous"

// PreviousKey is a principal key rotated out, still to be trusted by
// services until Until.
type PreviousKey struct {
	Key   string // "ed25519:…"
	Until time.Time
}

// Export returns the plain key file of the principal key in dir, decrypting
// it with passphrase when it is encrypted. The caller zeroes the bytes.
func Export(dir string, passphrase func() ([]byte, error)) ([]byte, error) {
	if err := CheckPerms(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, KeyFileName)
	data, err := readSecret(path)
	if err != nil {
		return nil, err
	}
	plain := data
	if isEncrypted(data) {
		defer clear(data)
		if passphrase == nil {
			return nil, fmt.Errorf("principal key %s is encrypted and no passphrase was given", path)
		}
		pass, err := passphrase()
		defer clear(pass)
		if err != nil {
			return nil, fmt.Errorf("read passphrase: %w", err)
		}
		if plain, err = decrypt(data, pass); err != nil {
			return nil, fmt.Errorf("principal key %s: %w", path, err)
		}
	}
	var seed [ed25519.SeedSize]byte
	defer clear(seed[:])
	if _, err := parse(plain, &seed); err != nil {
		clear(plain)
		return nil, fmt.Errorf("principal key %s: %w", path, err)
	}
	return plain, nil
}

// IsEncrypted reports whether the key file in dir is encrypted at rest.
func IsEncrypted(dir string) (bool, error) {
	f, err := os.OpenFile(filepath.Join(dir, KeyFileName), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return false, err
	}
	defer f.Close()
	head := make([]byte, len(armorMagic))
	n, _ := io.ReadFull(f, head)
	return isEncrypted(head[:n]), nil
}

func isEncrypted(data []byte) bool {
	return bytes.HasPrefix(data, []byte(armorMagic)) || bytes.HasPrefix(data, []byte(ageMagic))
}

// Backup returns the principal key of dir encrypted to backupPass (see the
// comment at the top of this file). passphrase unlocks a key encrypted at
// rest; it may be nil for a plain key.
func Backup(dir string, passphrase func() ([]byte, error), backupPass []byte) ([]byte, error) {
	if len(backupPass) == 0 {
		return nil, errors.New("a backup needs a passphrase")
	}
	plain, err := Export(dir, passphrase)
	if err != nil {
		return nil, err
	}
	defer clear(plain)
	return encrypt(plain, backupPass)
}

// ErrNotABackup is returned by Restore for bytes that are not an age file.
var ErrNotABackup = errors.New("not a parley-keyd key backup (an age-encrypted key file)")

// Restore writes the principal key held in backup into dir (made 0700 when
// missing), encrypted at rest with atRest when it is not empty, and returns
// its public key. Like Init it never overwrites a key: it fails with
// ErrKeyExists when dir holds one. allow, when not nil, is asked about the
// backup's public key before anything is written; its error is Restore's.
func Restore(dir string, backup, backupPass, atRest []byte, allow func(ed25519.PublicKey) error) (ed25519.PublicKey, error) {
	if !isEncrypted(backup) {
		return nil, ErrNotABackup
	}
	plain, err := decrypt(backup, backupPass)
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	defer clear(plain)
	var seed [ed25519.SeedSize]byte
	defer clear(seed[:])
	comment, err := parse(plain, &seed)
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	priv := ed25519.NewKeyFromSeed(seed[:])
	defer clear(priv)
	pub := append(ed25519.PublicKey(nil), priv.Public().(ed25519.PublicKey)...)
	if comment != nil && !comment.Equal(pub) {
		return nil, errors.New("backup: its public key comment does not match the key")
	}
	if allow != nil {
		if err := allow(pub); err != nil {
			return nil, err
		}
	}
	if err := makeStateDir(dir); err != nil {
		return nil, err
	}
	if err := writeKeyFile(dir, marshal(seed[:], pub), atRest, false); err != nil {
		return nil, err
	}
	if err := writePub(dir, pub); err != nil {
		return nil, err
	}
	return pub, durable.SyncDir(dir)
}

// Rotate replaces the principal key of dir with a new one from crypto/rand,
// encrypted at rest with atRest when it is not empty, and lists the old
// public key in PreviousFileName as trusted until until, after the keys
// listed there already. It returns both public keys. A daemon
// running on dir goes on signing with the key it loaded until it restarts.
func Rotate(dir string, atRest []byte, until, now time.Time) (newPub, oldPub ed25519.PublicKey, err error) {
	if err := CheckPerms(dir); err != nil {
		return nil, nil, err
	}
	if _, err := os.Lstat(filepath.Join(dir, KeyFileName)); err != nil {
		return nil, nil, fmt.Errorf("no principal key to rotate: %w", err)
	}
	if oldPub, err = PublicKey(dir); err != nil {
		return nil, nil, err
	}
	seed := make([]byte, ed25519.SeedSize)
	defer clear(seed)
	if _, err := io.ReadFull(rand.Reader, seed); err != nil {
		return nil, nil, fmt.Errorf("generate principal key: %w", err)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	defer clear(priv)
	newPub = append(ed25519.PublicKey(nil), priv.Public().(ed25519.PublicKey)...)

	prev, err := Previous(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	// Every key rotated out stays listed, its overlap ended or not: the
	// audit log's older checkpoints are signed by it. Readers of the list
	// (HELLO, pubkey --trust) leave out the ended ones.
	keep := prev[:0]
	for _, p := range prev {
		if p.Key != formatPub(oldPub) {
			keep = append(keep, p)
		}
	}
	keep = append(keep, PreviousKey{Key: formatPub(oldPub), Until: until.UTC().Truncate(time.Second)})
	// The old key is listed before it is replaced: a crash in between
	// leaves it both current and previous, which trusts nothing new.
	if err := writePrevious(dir, keep); err != nil {
		return nil, nil, err
	}
	plain := marshal(seed, newPub)
	defer clear(plain)
	if err := writeKeyFile(dir, plain, atRest, true); err != nil {
		return nil, nil, err
	}
	if err := writePub(dir, newPub); err != nil {
		return nil, nil, err
	}
	return newPub, oldPub, durable.SyncDir(dir)
}

// Previous returns the keys of PreviousFileName in dir, in the file's
// order, expired ones included.
func Previous(dir string) ([]PreviousKey, error) {
	path := filepath.Join(dir, PreviousFileName)
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []PreviousKey
	sc := bufio.NewScanner(io.LimitReader(f, maxFile))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, until, ok := strings.Cut(line, " until ")
		if !ok {
			return nil, fmt.Errorf("%s line %d: want \"ed25519:… until TIME\"", path, n)
		}
		if _, err := parsePub([]byte(key)); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, n, err)
		}
		t, err := time.Parse(time.RFC3339, until)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, n, err)
		}
		out = append(out, PreviousKey{Key: key, Until: t})
	}
	return out, sc.Err()
}

func writePrevious(dir string, keys []PreviousKey) error {
	var b strings.Builder
	b.WriteString("# principal keys rotated out; services trust each until its time, then drop it\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s until %s\n", k.Key, k.Until.UTC().Format(time.RFC3339))
	}
	return durable.ReplaceFile(filepath.Join(dir, PreviousFileName), []byte(b.String()), 0o644, nil)
}

func makeStateDir(dir string) error {
	if err := os.Mkdir(dir, 0o700); err == nil {
		if err := os.Chmod(dir, 0o700); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("state folder: %w", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, KeyFileName)); err == nil {
		return fmt.Errorf("%w in %s (refusing to overwrite it)", ErrKeyExists, filepath.Join(dir, KeyFileName))
	}
	return CheckPerms(dir)
}

// writeKeyFile writes plain (encrypted with atRest when it is not empty)
// as the key file of dir: a new file when replace is false (failing if one
// exists), else a temporary file renamed over the old one.
func writeKeyFile(dir string, plain, atRest []byte, replace bool) error {
	contents := plain
	if len(atRest) > 0 {
		var err error
		if contents, err = encrypt(plain, atRest); err != nil {
			return err
		}
	}
	if !replace {
		path := filepath.Join(dir, KeyFileName)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("%w in %s (refusing to overwrite it)", ErrKeyExists, path)
			}
			return fmt.Errorf("write principal key: %w", err)
		}
		err = f.Chmod(0o600)
		if err == nil {
			_, err = f.Write(contents)
		}
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
			return fmt.Errorf("write principal key: %w", err)
		}
		return nil
	}
	return durable.ReplaceFile(filepath.Join(dir, KeyFileName), contents, 0o600, nil)
}
