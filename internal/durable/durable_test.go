package durable

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReplaceFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := os.WriteFile(path, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var seen string
	if err := ReplaceFile(path, []byte("new\n"), 0o600, func(tmp string) { seen = tmp }); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "new\n" {
		t.Fatalf("read %q, %v; want the new contents", b, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", fi.Mode(), err)
	}
	if filepath.Dir(seen) != dir {
		t.Errorf("beforeRename got %q, not a file beside %s", seen, path)
	}
	assertOnly(t, dir, "state.json")
}

// TestReplaceFileFailsWhole: a rename that cannot happen (path is a
// folder) leaves path as it was and no temporary file behind.
func TestReplaceFileFailsWhole(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "taken")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(path, "inside"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ReplaceFile(path, []byte("x"), 0o600, nil); err == nil {
		t.Fatal("replaced a folder that is not empty")
	}
	if fi, err := os.Stat(path); err != nil || !fi.IsDir() {
		t.Fatalf("the folder is gone: %v", err)
	}
	assertOnly(t, dir, "taken")
	if err := ReplaceFile(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600, nil); err == nil {
		t.Fatal("wrote into a folder that does not exist")
	}
}

func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if len(got) != len(names) {
		t.Fatalf("%s holds %q, want only %q", dir, got, names)
	}
	for i := range names {
		if got[i] != names[i] {
			t.Fatalf("%s holds %q, want only %q", dir, got, names)
		}
	}
}
