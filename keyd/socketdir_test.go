package keyd

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestCheckSocketDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give folders to other owners") // the e2e test covers it as real users
	}
	const daemon, other = 4242, 4343
	tests := []struct {
		name   string
		build  func(base string) string // returns the socket path
		refuse string                   // the folder refused, relative to base; "" = accepted
	}{
		{"ok/own-0755", func(b string) string { return mk(t, b, "run", 0o755, daemon) }, ""},
		{"ok/root-0755", func(b string) string { return mk(t, b, "run", 0o755, 0) }, ""},
		{"fail/world-writable", func(b string) string { return mk(t, b, "run", 0o777, daemon) }, "run"},
		{"fail/sticky-world-writable", func(b string) string { return mk(t, b, "run", 0o777|os.ModeSticky, 0) }, "run"},
		{"fail/group-writable", func(b string) string { return mk(t, b, "run", 0o775, daemon) }, "run"},
		{"fail/owned-by-another-user", func(b string) string { return mk(t, b, "run", 0o755, other) }, "run"},
		{"ok/below-a-sticky-parent", func(b string) string {
			mk(t, b, "tmp", 0o777|os.ModeSticky, 0)
			return mk(t, b, "tmp/run", 0o755, daemon)
		}, ""},
		{"fail/below-a-world-writable-parent", func(b string) string {
			mk(t, b, "open", 0o777, 0)
			return mk(t, b, "open/run", 0o755, daemon)
		}, "open"},
		{"fail/link-to-a-writable-folder", func(b string) string {
			mk(t, b, "open", 0o777, 0)
			if err := os.Symlink(filepath.Join(b, "open"), filepath.Join(b, "link")); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(b, "link", "agent.sock")
		}, "open"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			os.Chmod(base, 0o755)
			path := tc.build(base)
			err := checkSocketDir(path, daemon)
			var de *SocketDirError
			switch {
			case tc.refuse == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.refuse != "" && (!errors.As(err, &de) || de.Dir != filepath.Join(base, tc.refuse)):
				t.Errorf("got %v, want a SocketDirError for %s", err, tc.refuse)
			}
		})
	}
}

// mk makes the folder base/rel with mode and owner, and returns the path of
// a socket in it.
func mk(t *testing.T, base, rel string, mode os.FileMode, owner int) string {
	t.Helper()
	dir := filepath.Join(base, rel)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, owner, owner); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "agent.sock")
}
