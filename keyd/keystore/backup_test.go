package keystore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func passFunc(p string) func() ([]byte, error) {
	return func() ([]byte, error) { return []byte(p), nil }
}

func newState(t *testing.T, atRest string) (string, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	pub, err := Init(dir, []byte(atRest))
	if err != nil {
		t.Fatal(err)
	}
	return dir, formatPub(pub)
}

func TestBackupRestore(t *testing.T) {
	for _, atRest := range []string{"", "at rest"} {
		dir, pub := newState(t, atRest)
		var unlock func() ([]byte, error)
		if atRest != "" {
			unlock = passFunc(atRest)
			if _, err := Backup(dir, nil, []byte("backup pass")); err == nil {
				t.Error("an encrypted key was backed up without its passphrase")
			}
			if _, err := Backup(dir, passFunc("wrong"), []byte("backup pass")); !errors.Is(err, ErrWrongPassphrase) {
				t.Errorf("backup with a wrong passphrase: %v", err)
			}
		}
		b, err := Backup(dir, unlock, []byte("backup pass"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte(armorMagic)) || bytes.Contains(b, []byte(plainMagic)) {
			t.Fatalf("backup is not armored age:\n%s", b)
		}
		if _, err := Backup(dir, unlock, nil); err == nil {
			t.Error("a backup without a passphrase")
		}

		// Restore into a new state folder, plain and encrypted at rest.
		for _, newRest := range []string{"", "new rest"} {
			dir2 := filepath.Join(t.TempDir(), "restored")
			if _, err := Restore(dir2, b, []byte("wrong"), nil, nil); !errors.Is(err, ErrWrongPassphrase) {
				t.Errorf("restore with a wrong passphrase: %v", err)
			}
			got, err := Restore(dir2, b, []byte("backup pass"), []byte(newRest), nil)
			if err != nil {
				t.Fatal(err)
			}
			if formatPub(got) != pub {
				t.Errorf("restored %s, backed up %s", formatPub(got), pub)
			}
			s, err := Load(dir2, passFunc(newRest))
			if err != nil {
				t.Fatalf("load the restored key: %v", err)
			}
			if formatPub(s.PublicKey()) != pub {
				t.Error("the restored key signs as another key")
			}
			s.Close()
			if enc, _ := IsEncrypted(dir2); enc != (newRest != "") {
				t.Errorf("restored key encrypted = %v, want %v", enc, newRest != "")
			}
			// Never over an existing key.
			if _, err := Restore(dir2, b, []byte("backup pass"), nil, nil); !errors.Is(err, ErrKeyExists) {
				t.Errorf("restore over a key: %v", err)
			}
		}
	}
}

// TestBackupIsAKeyFile: a backup is an encrypted key file, so copied into a
// state folder it loads with the backup's passphrase, and age reads it.
func TestBackupIsAKeyFile(t *testing.T) {
	dir, pub := newState(t, "")
	b, err := Backup(dir, nil, []byte("backup pass"))
	if err != nil {
		t.Fatal(err)
	}
	dir2 := filepath.Join(t.TempDir(), "copy")
	os.Mkdir(dir2, 0o700)
	os.WriteFile(filepath.Join(dir2, KeyFileName), b, 0o600)
	s, err := Load(dir2, passFunc("backup pass"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if formatPub(s.PublicKey()) != pub {
		t.Error("the backup used as a key file is another key")
	}
}

func TestRestoreRefusesWhatIsNotABackup(t *testing.T) {
	dir, _ := newState(t, "")
	plain, err := os.ReadFile(filepath.Join(dir, KeyFileName))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{plain, nil, []byte("hello")} {
		if _, err := Restore(filepath.Join(t.TempDir(), "s"), b, []byte("x"), nil, nil); !errors.Is(err, ErrNotABackup) {
			t.Errorf("restore of %q: %v", b, err)
		}
	}
}

func TestRotate(t *testing.T) {
	dir, old := newState(t, "")
	now := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	oldKey, _ := os.ReadFile(filepath.Join(dir, KeyFileName))
	newPub, oldPub, err := Rotate(dir, nil, now.Add(24*time.Hour), now)
	if err != nil {
		t.Fatal(err)
	}
	if formatPub(oldPub) != old || formatPub(newPub) == old {
		t.Fatalf("rotate: old %s new %s, was %s", formatPub(oldPub), formatPub(newPub), old)
	}
	s, err := Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !s.PublicKey().Equal(newPub) {
		t.Error("the state folder does not hold the new key")
	}
	s.Close()
	// The old private key is gone from the state folder.
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		if bytes.Contains(b, oldKey[bytes.Index(oldKey, []byte(plainMagic)):]) {
			t.Errorf("%s still holds the old private key", e.Name())
		}
	}
	prev, err := Previous(dir)
	if err != nil || len(prev) != 1 || prev[0].Key != old || !prev[0].Until.Equal(now.Add(24*time.Hour)) {
		t.Fatalf("previous = %+v, %v", prev, err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, PreviousFileName)); fi.Mode().Perm() != 0o644 {
		t.Errorf("%s mode %v", PreviousFileName, fi.Mode().Perm())
	}
	// A second rotation after the first overlap ended keeps the first key
	// listed, oldest first: the audit log's old checkpoints are its.
	later := now.Add(48 * time.Hour)
	newer, _, err := Rotate(dir, []byte("at rest"), later.Add(time.Hour), later)
	if err != nil {
		t.Fatal(err)
	}
	prev, _ = Previous(dir)
	if len(prev) != 2 || prev[0].Key != old || prev[1].Key != formatPub(newPub) {
		t.Errorf("previous after the second rotation = %+v", prev)
	}
	s, err = Load(dir, passFunc("at rest"))
	if err != nil || !s.PublicKey().Equal(newer) {
		t.Fatalf("load after the second rotation: %v", err)
	}
	s.Close()
}

func TestPreviousRefusesMalformed(t *testing.T) {
	dir := t.TempDir()
	for _, content := range []string{"ed25519:abc until 2026-01-01T00:00:00Z\n", "ed25519:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n", "ed25519:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA until tomorrow\n"} {
		os.WriteFile(filepath.Join(dir, PreviousFileName), []byte(content), 0o644)
		if _, err := Previous(dir); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: %v", content, err)
		}
	}
}
