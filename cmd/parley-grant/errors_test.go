package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"github.com/parley-keyd/parley-keyd/keyd"
)

// The errors a newcomer meets in the first ten minutes are pinned in
// testdata/script/daemon-errors.txtar. What stays here needs a second OS
// user, which a script cannot be.

// wantLines checks that stderr holds exactly the message line and the hint
// line given as regular expressions (anchored), with nothing after them.
func wantLines(t *testing.T, stderr string, message, hint string) {
	t.Helper()
	re := regexp.MustCompile(`(?m)^parley-grant: ` + message + `\nhint: ` + hint + `\n\z`)
	if !re.MatchString(stderr) {
		t.Errorf("stderr:\n%s\nwant it to end with\nparley-grant: %s\nhint: %s", stderr, message, hint)
	}
}

// TestErrorSocketPermission connects as a real second OS user to a socket
// that user may not open.
func TestErrorSocketPermission(t *testing.T) {
	testpeer.RequirePeers(t)
	agent, human := testpeer.Name("agent"), testpeer.Name("human")
	agentUID, agentGID := testpeer.EnsureUser(t, agent)
	humanUID, humanGID := testpeer.EnsureUser(t, human)
	shared := testpeer.SharedDir(t)
	sock := filepath.Join(shared, "agent.sock")
	startDaemon(t, journeyPolicy, func(c *keyd.Config) { c.Socket = sock })

	// The agent user runs a copy of the binary it can read.
	bin := filepath.Join(shared, "parley-grant")
	copyExecutable(t, cliBinary(t), bin)

	a, h := regexp.QuoteMeta(agent), regexp.QuoteMeta(human)
	cases := []struct {
		name string
		uid  int
		gid  int
		mode os.FileMode
		hint string
	}{
		// The daemon's own group can read its configuration: never the
		// group to join.
		{"fail/daemons-own-group", int(humanUID), int(humanGID), 0o660,
			`the socket's group is the daemon's own group ` + h + `, which can read its configuration: an admin sets socket_group = "parley-agents" in parley-keyd's config\.toml \(SocketGroup= in parley-keyd\.socket under systemd\), restarts it, and runs: sudo usermod -aG parley-agents ` + a + `, then you log in again`},
		{"fail/owner-only-root-group", 0, 0, 0o600,
			`the socket's group is root: an admin gives it the group parley-agents \(SocketGroup= in parley-keyd\.socket\) and runs: sudo usermod -aG parley-agents ` + a + `, then you log in again`},
		{"fail/not-in-group", 0, int(humanGID), 0o660,
			`ask an admin to run: sudo usermod -aG ` + h + ` ` + a + `, then log in again \(or run: newgrp ` + h + `\)`},
		{"fail/group-may-not-write", 0, int(humanGID), 0o640,
			`the socket is mode 0640, so only its owner may connect: an admin sets socket_mode = "0660" in parley-keyd's config\.toml, restarts it, and runs: sudo usermod -aG ` + h + ` ` + a + `, then log in again \(or run: newgrp ` + h + `\)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.Chown(sock, tc.uid, tc.gid); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(sock, tc.mode); err != nil {
				t.Fatal(err)
			}
			cmd := testpeer.RunAs(agentUID, agentGID, nil, bin, "status")
			cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", protocol.SocketEnv + "=" + sock}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != exitNoDaemon {
				t.Fatalf("status as another user: %v, want exit %d\n%s", err, exitNoDaemon, stderr.String())
			}
			wantLines(t, stderr.String(), `permission denied on the parley-keyd socket `+regexp.QuoteMeta(sock), tc.hint)
		})
	}
}

func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
