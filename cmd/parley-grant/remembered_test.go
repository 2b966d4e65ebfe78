package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"github.com/parley-keyd/parley-keyd/keyd"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// rememberPolicy asks the human for mail grants and lets them remember the
// approval for up to 2 hours, each grant under it living 10 minutes; it
// asks for calendar grants without letting them be remembered.
const rememberPolicy = `version = 1
[[agent]]
name = "mailer"
any = true
rate = 100000
pending = 8

[[rule]]
name = "ask-mail"
agents = ["mailer"]
action = "ask"
svc = ["mail.example"]
can = ["mail.*"]
max_exp = "1h"
channels = ["terminal"]
remember = "2h"
remember_exp = "10m"

[[rule]]
name = "ask-calendar"
agents = ["mailer"]
action = "ask"
can = ["calendar.*"]
max_exp = "1h"
channels = ["terminal"]
`

var mailRequest = []string{"issue", "--svc", "mail.example", "--can", "mail.read", "--exp", "5m"}

// stillPending fails the test unless request id is still waiting.
func stillPending(t *testing.T, env []string, id string) {
	t.Helper()
	r := cli(t, env, 0, "pending", "--json")
	var list []protocol.PendingView
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatal(err)
	}
	for _, v := range list {
		if v.ID == id {
			return
		}
	}
	t.Fatalf("request %s is no longer waiting: %s", id, r.stdout)
}

// TestApproveRememberNotOffered: approve --remember with a length the
// request does not offer is refused before anything is sent, naming the
// choices, and leaves the request waiting. 45m is within the rule's 2h, so
// the daemon alone would have accepted it; the human was never offered it.
// A request whose rule does not allow remembering says so.
func TestApproveRememberNotOffered(t *testing.T) {
	d := startDaemon(t, rememberPolicy, nil)
	keyPath, _ := writeAgentKey(t, t.TempDir())
	env := cliEnv(t, d.sock, keyPath)

	bg := startCLI(t, env, mailRequest...)
	id, code := bg.matchCode(t)
	r := cli(t, env, exitUsage, "approve", id, "--code", code, "--remember", "45m")
	wantLines(t, r.stderr, `request `+id+` may be remembered for 15m, 1h, 2h only, not 45m`,
		`choose one of them, such as --remember 2h, or approve it once without --remember`)
	r = cli(t, env, exitUsage, "approve", id, "--code", code, "--remember", "3h")
	if !strings.Contains(r.stderr, "15m, 1h, 2h only, not 3h") {
		t.Errorf("stderr: %s", r.stderr)
	}
	r = cli(t, env, exitUsage, "approve", id, "--code", code, "--remember", "soon")
	if !strings.Contains(r.stderr, `--remember "soon" is not a duration`) {
		t.Errorf("stderr: %s", r.stderr)
	}
	stillPending(t, env, id)
	if !strings.Contains(cli(t, env, 0, "pending").stdout, "--remember LENGTH, LENGTH one of 15m, 1h, 2h") {
		t.Error("pending does not offer the remember choices")
	}
	// The same length written another way is the choice.
	cli(t, env, 0, "approve", id, "--code", code, "--remember", "120m")
	if c := bg.wait(t); c != 0 {
		t.Fatalf("issue exited %d: %s", c, bg.stderr.String())
	}

	cal := startCLI(t, env, "issue", "--can", "calendar.read", "--exp", "5m")
	id, code = cal.matchCode(t)
	if strings.Contains(cli(t, env, 0, "pending").stdout, "--remember") {
		t.Error("pending offers remembering for a rule that does not allow it")
	}
	r = cli(t, env, exitUsage, "approve", id, "--code", code, "--remember", "1h")
	wantLines(t, r.stderr, `request `+id+` may not be remembered \(policy rule "ask-calendar" does not allow remembering\)`,
		`approve it once, without --remember: parley-grant approve `+id)
	stillPending(t, env, id)
}

// remembered runs parley-grant remembered --json and decodes it.
func rememberedJSON(t *testing.T, env []string) []protocol.RememberedView {
	t.Helper()
	r := cli(t, env, 0, "remembered", "--json")
	var list []protocol.RememberedView
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("remembered --json: %v\n%s", err, r.stdout)
	}
	return list
}

// TestRememberedLifecycle: approve --remember 1h, then the same request
// is issued at once under it, remembered lists it (terminal and JSON) with
// its agent, uid, end, approver, channel and grants, forget ends it, and the
// next request waits for a human again.
func TestRememberedLifecycle(t *testing.T) {
	d := startDaemon(t, rememberPolicy, nil)
	keyPath, _ := writeAgentKey(t, t.TempDir())
	env := cliEnv(t, d.sock, keyPath)

	bg := startCLI(t, env, mailRequest...)
	id, code := bg.matchCode(t)
	r := cli(t, env, 0, "approve", id, "--code", code, "--remember", "1h")
	if !strings.Contains(r.stderr, "remembered for 1 h") {
		t.Errorf("approve says: %s", r.stderr)
	}
	if c := bg.wait(t); c != 0 {
		t.Fatalf("issue exited %d: %s", c, bg.stderr.String())
	}
	start := time.Now()
	r = cli(t, env, 0, mailRequest...)
	if strings.Contains(r.stderr, "waiting for approval") {
		t.Fatalf("the remembered request waited for a human: %s", r.stderr)
	}
	if !regexp.MustCompile(`under remembered approval m_\S+ \(until `).MatchString(r.stderr) {
		t.Errorf("issue does not say it was remembered: %s", r.stderr)
	}
	if _, err := grant.Decode(strings.TrimSpace(r.stdout)); err != nil {
		t.Fatal(err)
	}
	// explain says so too, though the rule asks.
	r = cli(t, env, 0, append([]string{"explain"}, mailRequest[1:]...)...)
	if !regexp.MustCompile(`^rule "ask-mail" asks the human, but remembered approval m_\S+ \(until \S+\) covers this; it would issue at once:`).MatchString(r.stdout) {
		t.Errorf("explain under a remembered approval says:\n%s", r.stdout)
	}

	list := rememberedJSON(t, env)
	if len(list) != 1 {
		t.Fatalf("remembered lists %d, want 1", len(list))
	}
	m := list[0]
	if m.Agent != "mailer" || m.UID != uint32(os.Getuid()) || m.Channel != "terminal" || m.ApprovedBy == "" || m.Issued < 1 {
		t.Errorf("remembered: %+v", m)
	}
	if end := time.Unix(m.Until, 0); end.Before(start.Add(59*time.Minute)) || end.After(start.Add(61*time.Minute)) {
		t.Errorf("until %s, want an hour from %s", end, start)
	}
	text := cli(t, env, 0, "remembered").stdout
	for _, want := range []string{m.ID + " — agent mailer", "until ", "left)", "Approved by " + m.ApprovedBy + " on the terminal",
		"issued under it", "mail.read", "End it with: parley-grant forget " + m.ID} {
		if !strings.Contains(text, want) {
			t.Errorf("remembered does not show %q:\n%s", want, text)
		}
	}

	r = cli(t, env, exitFail, "forget", "m_nosuch")
	if !strings.Contains(r.stderr, "hint: ") {
		t.Errorf("forget of an unknown id: %s", r.stderr)
	}
	r = cli(t, env, 0, "forget", m.ID, "--reason", "done for today")
	if !strings.Contains(r.stderr, "forgot "+m.ID) {
		t.Errorf("forget says: %s", r.stderr)
	}
	if l := rememberedJSON(t, env); len(l) != 0 {
		t.Fatalf("still remembered after forget: %+v", l)
	}
	if !strings.Contains(cli(t, env, 0, "remembered").stderr, "no approvals are remembered") {
		t.Error("remembered does not say the list is empty")
	}
	again := startCLI(t, env, mailRequest...)
	again.matchCode(t) // a human decides again
}

// TestRememberedShowsScopeSafely: an agent's scope with a bidi isolate, a
// C1 CSI and a tag character in its pattern (the daemon refuses C0
// controls, spaces and bidi overrides there) is shown by remembered, and by
// remembered --json, with none of them reaching the terminal: each is
// shown as its code point, as pending shows it.
func TestRememberedShowsScopeSafely(t *testing.T) {
	d := startDaemon(t, rememberPolicy, nil)
	keyPath, _ := writeAgentKey(t, t.TempDir())
	env := cliEnv(t, d.sock, keyPath)
	hostile := "mail.x\u2067daer\u009b31m\U000e0041"
	bg := startCLI(t, env, "issue", "--svc", "mail.example", "--can", hostile, "--exp", "5m")
	id, code := bg.matchCode(t)
	cli(t, env, 0, "approve", id, "--code", code, "--remember", "15m")
	if c := bg.wait(t); c != 0 {
		t.Fatalf("issue exited %d: %s", c, bg.stderr.String())
	}
	shown := "mail.x⟨U+2067⟩daer⟨U+009B⟩31m⟨U+E0041⟩"
	for _, args := range [][]string{{"remembered"}, {"remembered", "--json"}} {
		out := cli(t, env, 0, args...).stdout
		if r, i, bad := forbidden(out); bad {
			t.Errorf("%v printed U+%04X at %d: %q", args, r, i, out)
		}
		if !strings.Contains(out, shown) {
			t.Errorf("%v does not show the pattern as %s:\n%s", args, shown, out)
		}
	}
}

// TestForgetAnotherUsersRemembered: two OS users run the same policy
// agent. The second may neither see nor forget the first one's remembered
// approval, which goes on working; the first may forget its own.
func TestForgetAnotherUsersRemembered(t *testing.T) {
	testpeer.RequirePeers(t)
	other := testpeer.Name("rider")
	uid, gid := testpeer.EnsureUser(t, other)
	shared := testpeer.SharedDir(t)
	sock := filepath.Join(shared, "agent.sock")
	d := startDaemon(t, rememberPolicy, func(c *keyd.Config) {
		c.Socket = sock
		c.Access.AgentUsers = append(c.Access.AgentUsers, other)
	})
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	keyPath, _ := writeAgentKey(t, t.TempDir())
	env := cliEnv(t, d.sock, keyPath)
	bg := startCLI(t, env, mailRequest...)
	id, code := bg.matchCode(t)
	cli(t, env, 0, "approve", id, "--code", code, "--remember", "1h")
	if c := bg.wait(t); c != 0 {
		t.Fatalf("issue exited %d: %s", c, bg.stderr.String())
	}
	m := rememberedJSON(t, env)[0]

	bin := filepath.Join(shared, "parley-grant")
	copyExecutable(t, cliBinary(t), bin)
	otherKey := filepath.Join(shared, "other.key")
	writeKeyAs(t, otherKey, uid, gid)
	run := func(args ...string) (string, string, int) {
		cmd := testpeer.RunAs(uid, gid, nil, bin, args...)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", protocol.SocketEnv + "=" + sock, agentKeyEnv + "=" + otherKey}
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		cmd.Run()
		return out.String(), errb.String(), cmd.ProcessState.ExitCode()
	}
	out, stderr, c := run("remembered", "--json")
	if c != 0 || strings.Contains(out, m.ID) {
		t.Fatalf("the other user's remembered: exit %d\n%s%s", c, out, stderr)
	}
	_, stderr, c = run("forget", m.ID)
	if c == 0 {
		t.Fatalf("the other user forgot the first one's remembered approval: %s", stderr)
	}
	if l := rememberedJSON(t, env); len(l) != 1 || l[0].ID != m.ID {
		t.Fatalf("after the other user's forget: %+v", l)
	}
	if r := cli(t, env, 0, mailRequest...); strings.Contains(r.stderr, "waiting for approval") {
		t.Fatalf("the first user's remembered approval stopped working: %s", r.stderr)
	}
	cli(t, env, 0, "forget", m.ID)
}

// writeKeyAs writes a new agent key file at path owned by uid.
func writeKeyAs(t *testing.T, path string, uid, gid uint32) {
	t.Helper()
	if err := writeAgentKeyFile(path, newTestKey(t)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
}
