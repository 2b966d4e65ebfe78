package main

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
)

// TestCheckStateFolder: what the daemon makes in its folder passes (files,
// its socket, a closed audit segment sharing the active one's file while
// it rotates); each thing it never makes is refused, named.
func TestCheckStateFolder(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "audit.log"), []byte("{}\n"), 0o600))
	must(t, os.Link(filepath.Join(dir, "audit.log"), filepath.Join(dir, "audit-000001.log")))
	l, err := net.Listen("unix", filepath.Join(dir, "agent.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o700))
	if err := checkStateFolder(dir); err != nil {
		t.Fatalf("the daemon's own folder: %v", err)
	}
	if err := checkStateFolder(filepath.Join(dir, "none")); err != nil {
		t.Errorf("a folder that does not exist: %v", err)
	}

	for _, c := range []struct {
		name, says string
		plant      func(path string) error
	}{
		{"link", "is a symbolic link", func(path string) error { return os.Symlink("/etc/nologin", path) }},
		{"pipe", "is a named pipe", func(path string) error { return syscall.Mkfifo(path, 0o600) }},
		{"device", "is a device", func(path string) error {
			if os.Geteuid() != 0 {
				t.Skip("mknod needs root")
			}
			return syscall.Mknod(path, syscall.S_IFCHR|0o600, 0x0103) // /dev/null's 1:3
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := t.TempDir()
			path := filepath.Join(d, "phone-devices.lock")
			must(t, c.plant(path))
			err := checkStateFolder(d)
			if !errors.Is(err, errPlanted) || !strings.Contains(err.Error(), path+" "+c.says) {
				t.Errorf("checkStateFolder = %v, want %q", err, path+" "+c.says)
			}
		})
	}

	t.Run("hardlink", func(t *testing.T) {
		testpeer.RequireRoot(t)
		d := t.TempDir()
		other := filepath.Join(t.TempDir(), "others")
		must(t, os.WriteFile(other, []byte("x"), 0o600))
		must(t, os.Chown(other, 4242, 4242))
		path := filepath.Join(d, "principal.pub")
		must(t, os.Link(other, path))
		err := checkStateFolder(d)
		if !errors.Is(err, errPlanted) || !strings.Contains(err.Error(), path+" is a hard link to a file of ") {
			t.Errorf("checkStateFolder = %v, want a hard link refused", err)
		}
	})
}
