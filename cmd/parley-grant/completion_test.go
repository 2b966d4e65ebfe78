package main

import (
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testkit/clidocstest"
)

// TestCompletionValues runs each shell's real completion script, as make
// install installs it, against the real binary: flag values and request
// ids, the latter asked of a real daemon.
func TestCompletionValues(t *testing.T) {
	bin := cliBinary(t)
	dir := t.TempDir()
	if out, err := exec.Command(bin, "gendocs", "--dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("gendocs: %v\n%s", err, out)
	}
	d := startDaemon(t, journeyPolicy, nil)
	keyPath, _ := writeAgentKey(t, t.TempDir())
	env := cliEnv(t, d.sock, keyPath)
	waiting := startCLI(t, env, "issue", "--can", "mail.read")
	id, _ := waiting.matchCode(t)
	defer approve(t, d, id, "", false)
	noDaemon := []string{"PARLEY_KEYD_SOCKET=" + filepath.Join(t.TempDir(), "none.sock")}
	daemon := []string{"PARLEY_KEYD_SOCKET=" + d.sock}

	cases := []struct {
		name  string
		env   []string
		words []string
		want  []string
	}{
		{"ok/risk", nil, []string{"issue", "--risk", ""}, riskLevels},
		{"ok/risk-prefix", nil, []string{"explain", "--risk", "m"}, []string{"medium"}},
		{"ok/verb", nil, []string{"proof", "--verb", ""}, grantVerbs()},
		{"ok/verbs-next", nil, []string{"attenuate", "-", "--verbs", "ASK,"}, []string{"ASK,INTENT", "ASK,COMMIT", "ASK,UNDO", "ASK,EXPAND"}},
		{"ok/verbs-lower", nil, []string{"issue", "--verbs", "ask,in"}, []string{"ask,intent"}},
		{"ok/approve-id", daemon, []string{"approve", ""}, []string{id}},
		{"ok/deny-id-prefix", daemon, []string{"deny", id[:3]}, []string{id}},
		{"ok/pending-qr-id", daemon, []string{"pending", "--qr", ""}, []string{id}},
		{"ok/socket-flag", noDaemon, []string{"--socket", d.sock, "approve", ""}, []string{id}},
		{"ok/one-id-only", daemon, []string{"approve", id, ""}, nil},
		{"ok/no-daemon-no-ids", noDaemon, []string{"approve", ""}, nil},
	}
	for _, sh := range clidocstest.Shells {
		t.Run(sh, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					got := clidocstest.Complete(t, dir, sh, bin, tc.env, tc.words...)
					if len(got) == 0 {
						got = nil
					}
					if !slices.Equal(sorted(got), sorted(tc.want)) {
						t.Errorf("%s completion of %q offers %q, want %q", sh, tc.words, got, tc.want)
					}
				})
			}
		})
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
