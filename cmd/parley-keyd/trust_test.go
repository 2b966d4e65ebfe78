package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
)

// Property 12 (DESIGN.md): everything the daemon trusts can be changed only
// by root and the daemon's own user. These tests play the agent of issue 20
// item 1: a mistake of the admin's leaves a trusted file, a folder above it
// or a link on the way writable by the agent; the agent rewrites the policy
// (or the configuration) to issue itself a 30-day bank transfer grant by
// policy, and the admin reloads. The daemon must refuse the reload, keep
// the old policy, say why, and status must report the file as failed.

// evilPolicy is what the agent writes: its own rule first, then the rest.
var evilPolicy = strings.Replace(e2ePolicy, "[[rule]]", `[[rule]]
name = "evil"
agents = ["bot"]
action = "auto"
svc = ["bank.example"]
can = ["bank.transfer"]
max_exp = "720h"

[[rule]]`, 1)

// asAgent runs a shell command line as the agent and fails the test when it
// fails: the agent really can do what the test says it does.
func (e *e2e) asAgent(script string, args ...string) {
	e.t.Helper()
	cmd := testpeer.RunAs(e.agent.uid, e.agent.gid, nil, "/bin/sh", append([]string{"-c", script, "sh"}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		e.t.Fatalf("as the agent: %s: %v: %s", script, err, out)
	}
}

// agentWrites writes content to path as the agent: through a new file
// renamed over it, which needs only write access to its folder, or in
// place when the agent may write the file itself.
func (e *e2e) agentWrites(path, content string, replace bool) {
	e.t.Helper()
	f, err := os.CreateTemp("", "evil-")
	if err != nil {
		e.t.Fatal(err)
	}
	f.WriteString(content)
	f.Close()
	os.Chmod(f.Name(), 0o644)
	defer os.Remove(f.Name())
	if replace {
		e.asAgent(`cat "$1" > "$2.new" && mv -f "$2.new" "$2"`, f.Name(), path)
	} else {
		e.asAgent(`cat "$1" > "$2"`, f.Name(), path)
	}
}

// reloadRecords counts the policy-reload records so far.
func (e *e2e) reloadRecords() int {
	n := 0
	for _, r := range e.auditRecords() {
		if r.Kind == "policy-reload" {
			n++
		}
	}
	return n
}

// sighup reloads the daemon as systemctl reload does and waits for the
// reload's record.
func (e *e2e) sighup() {
	e.t.Helper()
	before := e.reloadRecords()
	e.proc.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(10 * time.Second)
	for e.reloadRecords() == before {
		if time.Now().After(deadline) {
			e.t.Fatalf("no policy-reload record after SIGHUP:\n%s", e.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serveFor runs serve as the daemon's user for at most d: a set-up it
// refuses makes it exit at once with an error; one it serves is killed
// after d and reported with exit code -1.
func (e *e2e) serveFor(d time.Duration) result {
	e.t.Helper()
	cmd := testpeer.RunAs(e.daemon.uid, e.daemon.gid, nil, filepath.Join(e.bin, "parley-keyd"), "serve", "--state", e.state)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "PARLEY_KEYD_CONFIG_DIR=" + e.etc}
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return result{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
	case <-time.After(d):
		cmd.Process.Signal(syscall.SIGTERM)
		<-done
		return result{out.String(), errb.String() + "(stopped after " + d.String() + ")", -1}
	}
}

// agentDir is the agent's own folder (its home, as it were).
func (e *e2e) agentDir() string { return filepath.Dir(e.agentK) }

func TestTrustAgentWritableConfiguration(t *testing.T) {
	for _, tc := range []struct {
		name string
		// weaken is the admin's mistake, made as root; it returns the
		// file that became unsafe, as status and the reload name it.
		weaken func(e *e2e) string
		// attack is what the agent then does.
		attack func(e *e2e)
	}{
		{"policy-mode-0666", func(e *e2e) string {
			p := filepath.Join(e.etc, "policy.toml")
			os.Chmod(p, 0o666)
			return p
		}, func(e *e2e) { e.agentWrites(filepath.Join(e.etc, "policy.toml"), evilPolicy, false) }},

		{"policy-owned-by-agent", func(e *e2e) string {
			p := filepath.Join(e.etc, "policy.toml")
			os.Chown(p, int(e.agent.uid), int(e.daemon.gid))
			return p
		}, func(e *e2e) { e.agentWrites(filepath.Join(e.etc, "policy.toml"), evilPolicy, false) }},

		{"policy-symlink-into-agent-home", func(e *e2e) string {
			p := filepath.Join(e.etc, "policy.toml")
			mine := filepath.Join(e.agentDir(), "policy.toml")
			b, _ := os.ReadFile(p)
			os.WriteFile(mine, b, 0o644)
			os.Chown(mine, int(e.agent.uid), int(e.agent.gid))
			os.Remove(p)
			os.Symlink(mine, p)
			return e.agentDir()
		}, func(e *e2e) { e.agentWrites(filepath.Join(e.agentDir(), "policy.toml"), evilPolicy, false) }},

		{"config-folder-0777", func(e *e2e) string {
			os.Chmod(e.etc, 0o777)
			return e.etc
		}, func(e *e2e) { e.agentWrites(filepath.Join(e.etc, "policy.toml"), evilPolicy, true) }},

		{"config-owned-by-agent", func(e *e2e) string {
			p := filepath.Join(e.etc, "config.toml")
			os.Chown(p, int(e.agent.uid), int(e.daemon.gid))
			return p
		}, func(e *e2e) {
			// The agent points the daemon at a policy of its own.
			p := filepath.Join(e.etc, "config.toml")
			b, _ := os.ReadFile(p)
			mine := filepath.Join(e.agentDir(), "mine.toml")
			e.agentWrites(mine, evilPolicy, false)
			e.agentWrites(p, strings.Replace(string(b), `policy = "policy.toml"`, `policy = "`+mine+`"`, 1), false)
		}},

		{"policy-group-writable-by-agents-group", func(e *e2e) string {
			p := filepath.Join(e.etc, "policy.toml")
			os.Chown(p, 0, int(e.agent.gid))
			os.Chmod(p, 0o664)
			return p
		}, func(e *e2e) { e.agentWrites(filepath.Join(e.etc, "policy.toml"), evilPolicy, false) }},

		{"policy-acl-for-agent", func(e *e2e) string {
			p := filepath.Join(e.etc, "policy.toml")
			if _, err := exec.LookPath("setfacl"); err != nil {
				testpeer.Unavailable(e.t, "setfacl (package acl) is not installed")
			}
			if out, err := exec.Command("setfacl", "-m", "u:"+e2eAgentUser+":rw", p).CombinedOutput(); err != nil {
				testpeer.Unavailable(e.t, "setfacl: "+err.Error()+": "+string(out))
			}
			return p
		}, func(e *e2e) { e.agentWrites(filepath.Join(e.etc, "policy.toml"), evilPolicy, false) }},

		{"symlink-in-a-parent-folder", func(e *e2e) string {
			// The configuration folder moves into the agent's folder,
			// and a link is left where it was.
			moved := filepath.Join(e.agentDir(), "etc")
			if err := os.Rename(e.etc, moved); err != nil {
				e.t.Fatal(err)
			}
			os.Chown(moved, int(e.agent.uid), int(e.agent.gid))
			os.Symlink(moved, e.etc)
			return e.agentDir()
		}, func(e *e2e) { e.agentWrites(filepath.Join(e.etc, "policy.toml"), evilPolicy, true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newE2E(t)
			e.start()
			explain := func() string {
				return e.try(e.agent, "parley-grant", "explain", "--key", e.agentK, "--svc", "bank.example", "--can", "bank.transfer", "--exp", "720h").stdout
			}
			if out := explain(); strings.Contains(out, "evil") {
				t.Fatalf("before the attack: %s", out)
			}
			// The agent may enter the configuration folder (which is not
			// a trust problem by itself); the mistake is what follows.
			os.Chmod(e.etc, 0o755)
			unsafe := tc.weaken(e)
			tc.attack(e)
			e.sighup()

			// The old policy stays in force: no evil rule, no grant.
			if out := explain(); strings.Contains(out, "evil") {
				t.Errorf("after the reload the agent's rule is in force: %s", out)
			}
			if r := e.tryFor(3*time.Second, e.agent, "parley-grant", "issue", "--key", e.agentK, "--svc", "bank.example", "--can", "bank.transfer", "--exp", "720h"); r.code == 0 || r.stdout != "" {
				t.Errorf("the agent got a bank.transfer grant: exit %d, stdout %q", r.code, r.stdout)
			}
			// The reload was refused, recorded and logged with the reason.
			last := e.lastOfKind("policy-reload")
			if last.Decision != "refused" || !strings.Contains(last.Message, unsafe) {
				t.Errorf("reload record = %+v, want refused naming %s", last, unsafe)
			}
			if !strings.Contains(e.stderr.String(), "reload refused") {
				t.Errorf("the daemon did not log the refusal:\n%s", e.stderr)
			}
			// status fails, naming the file, and says neither ok config
			// nor ok policy.
			r := e.as(ids{0, 0}, 1, "parley-keyd", "status", "--skip", "units", "--state", e.state)
			if strings.Contains(r.stdout, "ok    config") || strings.Contains(r.stdout, "ok    policy") || !strings.Contains(r.stdout, unsafe) {
				t.Errorf("status:\n%s", r.stdout)
			}
			if strings.Contains(r.stdout, "chmod 0666") || strings.Contains(r.stdout, "chown "+e2eAgentUser) || strings.Contains(r.stdout, "chgrp "+e2eAgentUser) {
				t.Errorf("status suggests weakening a permission:\n%s", r.stdout)
			}
			// A restart refuses the set-up as well.
			e.stop(syscall.SIGTERM)
			if r := e.serveFor(5 * time.Second); r.code == 0 || !strings.Contains(r.stderr, unsafe) {
				t.Errorf("serve on the unsafe set-up: exit %d\n%s", r.code, r.stderr)
			}
		})
	}
}

// TestTrustWitnessCommandOfTheAgent: a witness_command the agent may change
// is a program the agent runs as the daemon's user, which can read the key.
func TestTrustWitnessCommandOfTheAgent(t *testing.T) {
	e := newE2E(t)
	drop := filepath.Join(e.base, "drop")
	os.Mkdir(drop, 0o777)
	os.Chmod(drop, 0o777)
	ship := filepath.Join(e.agentDir(), "ship")
	os.WriteFile(ship, []byte("#!/bin/sh\ncat >/dev/null\n"), 0o755)
	os.Chown(ship, int(e.agent.uid), int(e.agent.gid))
	cfg := filepath.Join(e.etc, "config.toml")
	b, _ := os.ReadFile(cfg)
	e.writeOwned(cfg, strings.Replace(string(b), "[audit]\n", "[audit]\nwitness_command = [\""+ship+"\"]\n", 1))
	// The agent's program copies the key where the agent reads it.
	e.agentWrites(ship, "#!/bin/sh\ncat >/dev/null\ncat "+filepath.Join(e.state, "principal.key")+" > "+filepath.Join(drop, "stolen")+"\n", true)
	e.asAgent(`chmod 755 "$1"`, ship)
	r := e.serveFor(5 * time.Second)
	if b, err := os.ReadFile(filepath.Join(drop, "stolen")); err == nil && len(b) > 0 {
		t.Fatalf("the agent's witness read the principal key (%d bytes)", len(b))
	}
	if r.code == 0 || !strings.Contains(r.stderr, ship) {
		t.Errorf("serve with the agent's witness: exit %d\n%s", r.code, r.stderr)
	}
	st := e.as(ids{0, 0}, 1, "parley-keyd", "status", "--skip", "units", "--state", e.state)
	if !strings.Contains(st.stdout, "fail") || !strings.Contains(st.stdout, ship) {
		t.Errorf("status:\n%s", st.stdout)
	}
}

// TestTrustDaemonUserIsAnAgent: init refuses a daemon user that is also an
// agent's or an approver's before it writes anything, and serve refuses
// such a configuration when an admin wrote it by hand.
func TestTrustDaemonUserIsAnAgent(t *testing.T) {
	e := newE2E(t)
	for _, flags := range [][]string{
		{"--agent-user", e2eDaemonUser},
		{"--approver-user", e2eDaemonUser},
		{"--agent-user", e2eAgentUser, "--approver-user", strconv.Itoa(int(e.daemon.uid))},
	} {
		dir := filepath.Join(e.base, "fresh")
		args := append([]string{"init", "--user", e2eDaemonUser, "--state", filepath.Join(dir, "state"), "--config-dir", filepath.Join(dir, "etc"), "--socket", e.sock}, flags...)
		r := e.try(ids{0, 0}, "parley-keyd", args...)
		if r.code == 0 || !strings.Contains(r.stderr, e2eDaemonUser) {
			t.Errorf("init %v: exit %d\n%s", flags, r.code, r.stderr)
		}
		if _, err := os.Lstat(dir); err == nil {
			t.Errorf("init %v wrote %s", flags, dir)
			os.RemoveAll(dir)
		}
	}
	// By hand: the daemon's user as an agent, as a dual-role user, or
	// through an agent group it is in.
	cfg := filepath.Join(e.etc, "config.toml")
	good, _ := os.ReadFile(cfg)
	for _, edit := range [][2]string{
		{`agent_users = ["` + e2eAgentUser + `"]`, `agent_users = ["` + e2eAgentUser + `", "` + e2eDaemonUser + `"]`},
		{`agent_groups = []`, `agent_groups = ["` + e2eDaemonUser + `"]`},
		{`approver_users = ["` + e2eHumanUser + `"]`, `approver_users = ["` + strconv.Itoa(int(e.daemon.uid)) + `"]`},
	} {
		e.writeOwned(cfg, strings.Replace(string(good), edit[0], edit[1], 1))
		r := e.serveFor(5 * time.Second)
		if r.code == 0 || !strings.Contains(r.stderr, e2eDaemonUser) {
			t.Errorf("serve with %s: exit %d\n%s", edit[1], r.code, r.stderr)
		}
		st := e.as(ids{0, 0}, 1, "parley-keyd", "status", "--skip", "units", "--state", e.state)
		if strings.Contains(st.stdout, "ok    config") {
			t.Errorf("status with %s:\n%s", edit[1], st.stdout)
		}
	}
	// A reload that makes the daemon's user an agent is refused.
	e.writeOwned(cfg, string(good))
	e.start()
	e.writeOwned(cfg, strings.Replace(string(good), `agent_users = ["`+e2eAgentUser+`"]`, `agent_users = ["`+e2eDaemonUser+`"]`, 1))
	e.sighup()
	if last := e.lastOfKind("policy-reload"); last.Decision != "refused" || !strings.Contains(last.Message, e2eDaemonUser) {
		t.Errorf("reload record = %+v", last)
	}
	// The state folder cannot be shared through a group either: one the
	// agent is in, given read access to the daemon's folder, stops the
	// daemon.
	e.stop(syscall.SIGTERM)
	e.writeOwned(cfg, string(good))
	os.Chown(e.state, int(e.daemon.uid), int(e.agent.gid))
	os.Chmod(e.state, 0o750)
	if r := e.serveFor(5 * time.Second); r.code == 0 || !strings.Contains(r.stderr, e.state) {
		t.Errorf("serve with a state folder the agent's group reads: exit %d\n%s", r.code, r.stderr)
	}
}

// TestTrustStateFolderAbove: a folder above the state folder that the agent
// may write lets it swap the whole folder, key and log; serve refuses it.
func TestTrustStateFolderAbove(t *testing.T) {
	e := newE2E(t)
	above := filepath.Join(e.base, "above")
	os.Mkdir(above, 0o777)
	os.Chmod(above, 0o777)
	if err := os.Rename(e.state, filepath.Join(above, "state")); err != nil {
		t.Fatal(err)
	}
	e.state = filepath.Join(above, "state")
	if r := e.serveFor(5 * time.Second); r.code == 0 || !strings.Contains(r.stderr, above+" (on the way to "+e.state+") lets every user (mode 0777) change it") {
		t.Errorf("serve under a folder every user may write: exit %d\n%s", r.code, r.stderr)
	}
	st := e.as(ids{0, 0}, 1, "parley-keyd", "status", "--skip", "units", "--state", e.state)
	if !strings.Contains(st.stdout, "fail  state   state folder") && !strings.Contains(st.stdout, "fail  state   "+above) {
		t.Errorf("status:\n%s", st.stdout)
	}
	// Made safe as the hint says, it serves.
	os.Chmod(above, 0o755)
	if r := e.serveFor(2 * time.Second); r.code != -1 {
		t.Errorf("serve after the fix: exit %d\n%s", r.code, r.stderr)
	}
}

// TestTrustDaemonProgram: a parley-keyd binary the agent may replace is
// refused by itself.
func TestTrustDaemonProgram(t *testing.T) {
	e := newE2E(t)
	b, err := os.ReadFile(filepath.Join(e.bin, "parley-keyd"))
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(e.agentDir(), "parley-keyd")
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(exe, int(e.agent.uid), int(e.agent.gid))
	cmd := testpeer.RunAs(e.daemon.uid, e.daemon.gid, nil, exe, "serve", "--state", e.state)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "PARLEY_KEYD_CONFIG_DIR=" + e.etc}
	done := make(chan []byte, 1)
	go func() { out, _ := cmd.CombinedOutput(); done <- out }()
	select {
	case out := <-done:
		if cmd.ProcessState.ExitCode() == 0 || !strings.Contains(string(out), "the daemon's program: "+e.agentDir()) {
			t.Errorf("serve from the agent's copy: exit %d\n%s", cmd.ProcessState.ExitCode(), out)
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("the daemon served from a program the agent may replace")
	}
}
