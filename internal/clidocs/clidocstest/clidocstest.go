// Package clidocstest checks what clidocs.Write produced for a binary, for
// the binaries' tests: a man page for every visible command, and completion
// scripts that, run by the real shells, offer every visible subcommand and
// no hidden one.
//
// A shell that is missing skips its check (testpeer.Unavailable), so CI,
// which sets PARLEY_REQUIRE_PEERS=1, must install bash, bash-completion, zsh
// and fish.
package clidocstest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testpeer"
	"github.com/spf13/cobra"
)

// Check runs "bin gendocs --dir DIR" and checks DIR against the command tree
// root, whose man pages are in section. bin must be the binary root builds.
func Check(t *testing.T, root *cobra.Command, bin, section string) {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command(bin, "gendocs", "--dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("%s gendocs: %v\n%s", bin, err, out)
	}
	name := root.Name()
	var subs, hidden []string
	for _, c := range root.Commands() {
		switch {
		case c.IsAvailableCommand():
			subs = append(subs, c.Name())
		case c.Hidden:
			hidden = append(hidden, c.Name())
		}
	}
	if len(subs) == 0 {
		t.Fatal("no subcommands")
	}

	t.Run("man", func(t *testing.T) {
		var walk func(c *cobra.Command)
		walk = func(c *cobra.Command) {
			page := strings.ReplaceAll(c.CommandPath(), " ", "-")
			b, err := os.ReadFile(filepath.Join(dir, "man", "man"+section, page+"."+section))
			if err != nil {
				t.Errorf("no man page for %q: %v", c.CommandPath(), err)
			} else if !bytes.Contains(b, []byte(".TH \""+strings.ToUpper(page)+"\" \""+section+"\"")) ||
				!bytes.Contains(b, []byte(page+" - ")) {
				t.Errorf("man page %s has no title or NAME line:\n%s", page, b)
			}
			for _, s := range c.Commands() {
				if !s.IsAvailableCommand() {
					continue
				}
				if err == nil && !bytes.Contains(b, []byte("\\fB"+page+"-"+s.Name()+"("+section+")\\fP")) {
					t.Errorf("man page %s does not refer to %s", page, s.Name())
				}
				walk(s)
			}
		}
		walk(root)
		for _, h := range hidden {
			if _, err := os.Stat(filepath.Join(dir, "man", "man"+section, name+"-"+h+"."+section)); err == nil {
				t.Errorf("a man page for the hidden command %s", h)
			}
		}
	})

	// Each shell runs the real script, which asks the real binary
	// (NAME __complete) what to offer after "NAME ".
	path := filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")
	shells := []struct {
		shell, script string
		need          []string
		args          func(script string) []string
	}{
		{"bash", filepath.Join(dir, "completion", "bash", name),
			[]string{"/usr/share/bash-completion/bash_completion"},
			func(script string) []string {
				return []string{"-c", `source /usr/share/bash-completion/bash_completion; source "$1"
COMP_WORDS=("$2" ""); COMP_CWORD=1; COMP_LINE="$2 "; COMP_POINT=${#COMP_LINE}
"__start_$2" 2>/dev/null; printf '%s\n' "${COMPREPLY[@]}"`, "bash", script, name}
			}},
		{"zsh", filepath.Join(dir, "completion", "zsh", "_"+name), nil,
			// The script runs as written; only zsh's display functions,
			// which work only inside a completion widget, print instead.
			func(script string) []string {
				return []string{"-f", "-c", `compdef() { :; }; compadd() { :; }; _arguments() { :; }
_describe() { print -l -- ${completions%%:*}; }
source "$1"; words=("$2" ""); CURRENT=2; "_$2"`, "zsh", script, name}
			}},
		{"fish", filepath.Join(dir, "completion", "fish", name+".fish"), nil,
			func(script string) []string {
				return []string{"--no-config", "-c", `source $argv[1]; complete --do-complete "$argv[2] "`, script, name}
			}},
	}
	for _, sh := range shells {
		t.Run(sh.shell, func(t *testing.T) {
			b, err := os.ReadFile(sh.script)
			if err != nil {
				t.Fatalf("no %s completion: %v", sh.shell, err)
			}
			if !bytes.Contains(b, []byte("__complete")) {
				t.Fatalf("the %s completion does not ask the binary:\n%s", sh.shell, b)
			}
			exe, err := exec.LookPath(sh.shell)
			if err != nil {
				testpeer.Unavailable(t, "needs "+sh.shell+" to run its completion script")
			}
			for _, f := range sh.need {
				if _, err := os.Stat(f); err != nil {
					testpeer.Unavailable(t, "needs "+f+" (bash-completion)")
				}
			}
			cmd := exec.Command(exe, sh.args(sh.script)...)
			cmd.Env = []string{"PATH=" + path, "HOME=" + t.TempDir(), "TERM=dumb"}
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("%s: %v\n%s", sh.shell, err, out)
			}
			var got []string
			for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				w, _, _ := strings.Cut(l, "\t") // fish adds the description
				got = append(got, strings.TrimSpace(w))
			}
			for _, s := range subs {
				if !slices.Contains(got, s) {
					t.Errorf("%s completion of %q does not offer %s; it offers %q", sh.shell, name+" ", s, got)
				}
			}
			for _, h := range hidden {
				if slices.Contains(got, h) {
					t.Errorf("%s completion offers the hidden command %s", sh.shell, h)
				}
			}
		})
	}
}
