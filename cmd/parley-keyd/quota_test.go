package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// waitingIssue is a parley-grant issue that waits for a human.
type waitingIssue struct {
	stderr *syncBuffer
	done   chan error
}

// startIssue runs parley-grant issue as who in the background and returns
// once it waits for approval, or once it ended.
func (e *e2e) startIssue(who ids, args ...string) *waitingIssue {
	e.t.Helper()
	cmd := testpeer.RunAs(who.uid, who.gid, nil, filepath.Join(e.bin, "parley-grant"), append([]string{"issue"}, args...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", protocol.SocketEnv + "=" + e.sock, protocol.DaemonUserEnv + "=" + e2eDaemonUser}
	w := &waitingIssue{stderr: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { w.done <- cmd.Wait() }()
	e.t.Cleanup(func() { cmd.Process.Kill(); <-w.done })
	deadline := time.Now().Add(15 * time.Second)
	for !codeLine.MatchString(w.stderr.String()) && time.Now().Before(deadline) {
		select {
		case err := <-w.done:
			w.done <- err
			return w
		case <-time.After(10 * time.Millisecond):
		}
	}
	return w
}

// waiting reports whether the request waits for a human.
func (w *waitingIssue) waiting() bool { return codeLine.MatchString(w.stderr.String()) }

// TestLimitsQuotaPerUser is item 5 of the review: two OS users matched by
// one policy agent are two callers. One uses up its request rate and its
// approval slots; the other still has its own.
func TestLimitsQuotaPerUser(t *testing.T) {
	e := newE2E(t)
	secondUser := testpeer.Name("agentb")
	second := e.addAgentUsers(secondUser)[0]
	dir := filepath.Join(e.base, "agent2")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(dir, int(second.uid), int(second.gid))
	key2 := filepath.Join(dir, "agent.key")
	e.as(second, 0, "parley-grant", "keygen", "--out", key2)
	pol := strings.Replace(e2ePolicy, `user = ["`+e2eAgentUser+`"]
rate = 100000
pending = 8`, `user = ["`+e2eAgentUser+`", "`+secondUser+`"]
rate = 4
pending = 1`, 1)
	e.writeOwned(filepath.Join(e.etc, "policy.toml"), pol)
	e.start()

	auto := []string{"--svc", "cal.example", "--can", "calendar.*", "--exp", "30m"}
	ask := []string{"--svc", "mail.example", "--can", "mail.read"}
	// The first user: one request waits for the human, which is its
	// pending limit of 1.
	if w := e.startIssue(e.agent, append([]string{"--key", e.agentK}, ask...)...); !w.waiting() {
		t.Fatalf("the first user's request does not wait: %s", w.stderr)
	}
	// The second user, same policy agent, has a slot of its own.
	if w := e.startIssue(second, append([]string{"--key", key2}, ask...)...); !w.waiting() {
		t.Errorf("the second user's request does not wait for approval: %s", w.stderr)
	}
	// The first user's second request is issued; its third is over the
	// rate of 4 a minute: every request counts, and parley-grant issue
	// sends two (HELLO for the principal key, then GRANT).
	if r := e.try(e.agent, "parley-grant", append([]string{"issue", "--key", e.agentK}, auto...)...); r.code != 0 {
		t.Errorf("the first user's second request: exit %d, %s", r.code, r.stderr)
	}
	if r := e.try(e.agent, "parley-grant", append([]string{"issue", "--key", e.agentK}, auto...)...); r.code != 9 || !strings.Contains(r.stderr, "request rate") {
		t.Errorf("the first user's third request: exit %d, %s; want 9, over its rate", r.code, r.stderr)
	}
	// The second user has a rate of its own.
	if r := e.try(second, "parley-grant", append([]string{"issue", "--key", key2}, auto...)...); r.code != 0 {
		t.Errorf("the second user's second request: exit %d, %s", r.code, r.stderr)
	}
}
