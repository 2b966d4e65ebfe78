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

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
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
	for _, sh := range Shells {
		t.Run(sh, func(t *testing.T) {
			got := Complete(t, dir, sh, bin, nil, "")
			for _, s := range subs {
				if !slices.Contains(got, s) {
					t.Errorf("%s completion of %q does not offer %s; it offers %q", sh, name+" ", s, got)
				}
			}
			for _, h := range hidden {
				if slices.Contains(got, h) {
					t.Errorf("%s completion offers the hidden command %s", sh, h)
				}
			}
		})
	}
}

// Shells are the shells whose completion scripts Write makes.
var Shells = []string{"bash", "zsh", "fish"}

// Complete runs the real shell's completion for the command line
// "NAME words…" (the last word is the one being completed; "" completes a
// new word) with the script that gendocs wrote into dir for bin, whose name
// is NAME, and returns the words it offers, without descriptions. env is
// added to a minimal environment. The script asks the real binary
// (NAME __complete …), so this checks the script and the binary together.
// A shell that is missing skips the test (testpeer.Unavailable).
func Complete(t *testing.T, dir, shell, bin string, env []string, words ...string) []string {
	t.Helper()
	name := filepath.Base(bin)
	path := filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")
	var script string
	var need []string
	var args []string
	line := append([]string{name}, words...)
	switch shell {
	case "bash":
		script = filepath.Join(dir, "completion", "bash", name)
		need = []string{"/usr/share/bash-completion/bash_completion"}
		args = append([]string{"-c", `source /usr/share/bash-completion/bash_completion; source "$1"; shift
COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
"__start_$1" 2>/dev/null; printf '%s\n' "${COMPREPLY[@]}"`, "bash", script}, line...)
	case "zsh":
		// The script runs as written; only zsh's display functions,
		// which work only inside a completion widget, print instead.
		script = filepath.Join(dir, "completion", "zsh", "_"+name)
		args = append([]string{"-f", "-c", `compdef() { :; }; compadd() { :; }; _arguments() { :; }
_describe() { local c; for c in $completions; do [[ $c == "${words[CURRENT]}"* ]] && print -r -- ${c%%:*}; done; return 0; }
source "$1"; shift; words=("$@"); CURRENT=$#; "_$1"`, "zsh", script}, line...)
	case "fish":
		script = filepath.Join(dir, "completion", "fish", name+".fish")
		args = []string{"--no-config", "-c", `source $argv[1]; complete --do-complete "$argv[2]"`, script, strings.Join(line, " ")}
	default:
		t.Fatalf("no shell %q", shell)
	}
	b, err := os.ReadFile(script)
	if err != nil {
		t.Fatalf("no %s completion: %v", shell, err)
	}
	if !bytes.Contains(b, []byte("__complete")) {
		t.Fatalf("the %s completion does not ask the binary:\n%s", shell, b)
	}
	exe, err := exec.LookPath(shell)
	if err != nil {
		testpeer.Unavailable(t, "needs "+shell+" to run its completion script")
	}
	for _, f := range need {
		if _, err := os.Stat(f); err != nil {
			testpeer.Unavailable(t, "needs "+f+" (bash-completion)")
		}
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append([]string{"PATH=" + path, "HOME=" + t.TempDir(), "TERM=dumb"}, env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", shell, err, out)
	}
	var got []string
	for _, l := range strings.Split(string(out), "\n") {
		// bash shows a description after spaces, fish after a tab.
		if f := strings.Fields(l); len(f) > 0 {
			got = append(got, f[0])
		}
	}
	switch {
	case shell == "bash" && len(got) == 1:
		// The one completion bash inserts is quoted for the command
		// line (printf %q): ask\,intent is ask,intent.
		got[0] = unquoteBash(got[0])
	case shell == "fish" && len(got) == 2 && got[1] == got[0]+".":
		// cobra's fish script keeps fish from adding a space (a
		// completion that wants none) with a second candidate that
		// has a dot more: fish inserts their common prefix.
		got = got[:1]
	}
	return got
}

// unquoteBash undoes the backslashes of printf %q for a word without
// quotes.
func unquoteBash(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
