package keyd

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/filetrust"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
)

// TestLoadConfigRefusesWitnessInterpreterOthersOwn: a witness_command that
// is a script of root's, in a folder of root's, whose "#!" line names an
// interpreter in a folder another user owns. The kernel runs that
// interpreter, as the daemon's user, with the checkpoint on its input: it
// is a program the daemon runs as much as the script (property 12). Its
// owner replaces it with anything. A second level (the interpreter itself
// a script, as Linux allows) is checked too.
func TestLoadConfigRefusesWitnessInterpreterOthersOwn(t *testing.T) {
	testpeer.RequireRoot(t)
	const other = 4207 // a uid with no account: chown needs none
	for _, depth := range []int{1, 2} {
		dir := t.TempDir()
		os.Chmod(dir, 0o755)
		theirs := filepath.Join(dir, "theirs")
		os.Mkdir(theirs, 0o755)
		os.Chown(theirs, other, other)
		interp := filepath.Join(theirs, "interp")
		sh, err := os.ReadFile("/bin/sh")
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(interp, sh, 0o755)
		os.Chown(interp, other, other)
		first := interp
		if depth == 2 {
			// A script of root's in a folder of root's, whose own
			// interpreter is the other user's.
			first = filepath.Join(dir, "wrapper")
			os.WriteFile(first, []byte("#!"+interp+" -e\nexec \"$@\"\n"), 0o755)
		}
		script := filepath.Join(dir, "ship-checkpoint")
		os.WriteFile(script, []byte("#! "+first+"\ncat >/dev/null\n"), 0o755)
		os.WriteFile(filepath.Join(dir, "policy.toml"), []byte(testPolicy), 0o600)
		path := filepath.Join(dir, "config.toml")
		os.WriteFile(path, []byte("[audit]\nwitness_command = [\""+script+"\"]\n"), 0o600)
		_, err = LoadConfig(path)
		var te *TrustError
		var ue *filetrust.UnsafeError
		if !errors.As(err, &te) || !errors.As(err, &ue) || te.Problems[0].What != "audit.witness_command" {
			t.Fatalf("depth %d: LoadConfig = %v, want the witness interpreter %s (owned by uid %d) refused", depth, err, interp, other)
		}
		if ue.File != interp && ue.Path != theirs && ue.Path != interp {
			t.Errorf("depth %d: refused %s at %s, want the interpreter %s", depth, ue.File, ue.Path, interp)
		}
		// The same script with an interpreter of root's passes.
		os.WriteFile(script, []byte("#!/bin/sh\ncat >/dev/null\n"), 0o755)
		if _, err := LoadConfig(path); err != nil {
			t.Fatalf("depth %d: a script for /bin/sh: %v", depth, err)
		}
	}
}
