package keyfile

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testkeys"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"

	"github.com/parley-keyd/parley-keyd/grant"
)

func testKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, ed25519.SeedSize))
}

func TestWriteRead(t *testing.T) {
	k := testKey(t)
	path := filepath.Join(t.TempDir(), "a", "b", "agent.key")
	if err := WriteKeyFile(path, k); err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		path string
		mode fs.FileMode
	}{{path, 0o600}, {filepath.Dir(path), 0o700 | fs.ModeDir}, {filepath.Dir(filepath.Dir(path)), 0o700 | fs.ModeDir}} {
		fi, err := os.Stat(p.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != p.mode {
			t.Errorf("%s: mode %v, want %v", p.path, fi.Mode(), p.mode)
		}
	}
	got, err := ReadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(k) {
		t.Error("ReadKeyFile does not give back the written key")
	}
	data, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(data), "# parley agent key\n") {
		t.Errorf("file starts %q", data)
	}
}

func TestWriteRefuses(t *testing.T) {
	k := testKey(t)
	dir := t.TempDir()

	t.Run("fail/exists", func(t *testing.T) {
		path := filepath.Join(dir, "exists.key")
		if err := os.WriteFile(path, []byte("precious"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := WriteKeyFile(path, k); !errors.Is(err, fs.ErrExist) {
			t.Errorf("WriteKeyFile over an existing file = %v, want fs.ErrExist", err)
		}
		if data, _ := os.ReadFile(path); string(data) != "precious" {
			t.Error("the existing file was changed")
		}
	})
	t.Run("fail/symlink", func(t *testing.T) {
		target := filepath.Join(dir, "target")
		link := filepath.Join(dir, "link.key")
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
		if err := WriteKeyFile(link, k); err == nil {
			t.Error("WriteKeyFile followed a symbolic link")
		}
		if _, err := os.Stat(target); !errors.Is(err, fs.ErrNotExist) {
			t.Error("the link target was created")
		}
	})
	t.Run("fail/shared-directory", func(t *testing.T) {
		shared := filepath.Join(dir, "shared")
		if err := os.Mkdir(shared, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(shared, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := WriteKeyFile(filepath.Join(shared, "agent.key"), k); err == nil {
			t.Error("WriteKeyFile wrote into a world-writable directory")
		}
	})
	t.Run("fail/not-a-key", func(t *testing.T) {
		if err := WriteKeyFile(filepath.Join(dir, "short.key"), k[:10]); err == nil {
			t.Error("WriteKeyFile accepted a short key")
		}
	})
}

func TestReadRefuses(t *testing.T) {
	k := testKey(t)
	dir := t.TempDir()
	write := func(name string, mode fs.FileMode) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, grant.MarshalKeyFile(k), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tt := range []struct {
		name string
		mode fs.FileMode
	}{
		{"fail/world-readable", 0o644},
		{"fail/group-readable", 0o640},
		{"fail/group-writable", 0o620},
		{"fail/other-executable", 0o601},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := write(strings.TrimPrefix(tt.name, "fail/"), tt.mode)
			_, err := ReadKeyFile(path)
			if err == nil || !strings.Contains(err.Error(), "chmod 600") {
				t.Errorf("ReadKeyFile of a %04o file = %v, want a refusal with a chmod hint", tt.mode, err)
			}
		})
	}
	t.Run("fail/directory", func(t *testing.T) {
		if _, err := ReadKeyFile(dir); err == nil {
			t.Error("ReadKeyFile read a directory")
		}
	})
	t.Run("fail/fifo", func(t *testing.T) {
		fifo := filepath.Join(dir, "fifo")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			testpeer.Unavailable(t, "cannot make a FIFO: "+err.Error())
		}
		if _, err := ReadKeyFile(fifo); err == nil {
			t.Error("ReadKeyFile read a FIFO")
		}
	})
	t.Run("fail/garbage", func(t *testing.T) {
		path := filepath.Join(dir, "garbage.key")
		if err := os.WriteFile(path, []byte("hello\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadKeyFile(path); err == nil {
			t.Error("ReadKeyFile accepted a file without a key")
		}
	})
	t.Run("fail/missing", func(t *testing.T) {
		if _, err := ReadKeyFile(filepath.Join(dir, "nope")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("ReadKeyFile of a missing file = %v", err)
		}
	})
	t.Run("ok/private", func(t *testing.T) {
		if _, err := ReadKeyFile(write("private.key", 0o600)); err != nil {
			t.Error(err)
		}
		if _, err := ReadKeyFile(write("readonly.key", 0o400)); err != nil {
			t.Error(err)
		}
	})
}

// TestReadRefusesKeylessKeys: a key file whose public key line names a
// small-order key, in any encoding, or a key in a non-canonical spelling,
// is refused with the key error, not read past (issue 10 item 1).
func TestReadRefusesKeylessKeys(t *testing.T) {
	dir := t.TempDir()
	keyLine := "PARLEY-AGENT-KEY-1 AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI\n"
	for i, k := range append(testkeys.SmallOrder(), testkeys.NonCanonical()...) {
		t.Run("fail/"+k.Name, func(t *testing.T) {
			path := filepath.Join(dir, "k"+strings.Repeat("x", i))
			data := "# public key: " + grant.FormatPublicKey(k.Key) + "\n" + keyLine
			if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := ReadKeyFile(path)
			// The refusal is CheckPublicKey's own reason for this key:
			// small order, or not canonical.
			if want := errors.Unwrap(grant.CheckPublicKey(k.Key)); want == nil || !errors.Is(err, want) {
				t.Errorf("ReadKeyFile = %v, want the key refusal %v", err, want)
			}
		})
	}
}
