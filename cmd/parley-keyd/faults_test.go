package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/keyd/audit"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
)

// These tests break the daemon while agents use it: kill -9 at random points
// of a burst, a full audit filesystem, policy reloads, a flood of approval
// requests. They extend the end-to-end tests of e2e_test.go and use their
// set-up: real binaries, real OS users.

// faultHelperEnv tells TestFaultAgentHelper what to do: "mode,socket,key".
const faultHelperEnv = "PARLEY_FAULT_AGENT"

// TestFaultAgentHelper runs as the agent user in a child process and prints
// one line per request it finishes:
//
//	grant <grant id> <rule>
//	refused <code> <rule> <message>
//	waiting <request id>
//
// Mode "loop" asks for calendar grants from 8 connections, each one request
// at a time, through refusals, until the daemon goes away. Mode "flood"
// sends 40 requests that need a human at once on one connection, then waits
// to be killed.
func TestFaultAgentHelper(t *testing.T) {
	arg := os.Getenv(faultHelperEnv)
	if arg == "" {
		return // an ordinary test run: this runs only as a helper process
	}
	parts := strings.Split(arg, ",")
	if len(parts) != 3 {
		fmt.Fprintln(os.Stderr, "bad", faultHelperEnv, arg)
		os.Exit(2)
	}
	mode, sock, keyPath := parts[0], parts[1], parts[2]
	b, err := os.ReadFile(keyPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	key, err := grant.ParseKeyFile(b)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		fmt.Printf(format+"\n", args...)
		mu.Unlock()
	}
	// refused prints a refusal and reports whether the daemon is still
	// there to ask again.
	refused := func(err error) bool {
		var e *protocol.Error
		if !errors.As(err, &e) {
			return false
		}
		say("refused %s %s %s", e.Code, orDash(e.Rule), e.Message)
		return true
	}
	var wg sync.WaitGroup
	switch mode {
	case "loop":
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := client.Dial(sock)
				if err != nil {
					return
				}
				defer c.Close()
				for {
					cavs := []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find"), grant.Exp(time.Now().Unix() + 600)}
					res, err := c.Grant(context.Background(), key, cavs, nil)
					if err == nil {
						say("grant %s %s", res.GrantID, orDash(res.Rule))
					} else if !refused(err) {
						return
					}
				}
			}()
		}
		wg.Wait()
		os.Exit(0)
	case "flood":
		c, err := client.Dial(sock)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		for i := 0; i < 40; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := c.Grant(context.Background(), key, []grant.Caveat{grant.Can(fmt.Sprintf("mail.read%d", i))},
					func(e protocol.Event) { say("waiting %s", e.Request) })
				if err == nil {
					say("grant")
				} else {
					refused(err)
				}
			}()
		}
		wg.Wait()
		select {} // until killed: leaving withdraws what still waits
	}
	fmt.Fprintln(os.Stderr, "unknown mode", mode)
	os.Exit(2)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// agentRun is a TestFaultAgentHelper process and the lines it printed.
type agentRun struct {
	t     *testing.T
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	done  chan struct{} // closed when its output ends
}

func (e *e2e) startAgent(mode, key string) *agentRun {
	e.t.Helper()
	r := &agentRun{t: e.t, done: make(chan struct{})}
	r.cmd = testpeer.Helper(e.t, e.agent.uid, e.agent.gid, nil, "TestFaultAgentHelper",
		faultHelperEnv+"="+mode+","+e.sock+","+key, protocol.DaemonUserEnv+"="+e2eDaemonUser)
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	r.cmd.Stderr = os.Stderr
	if err := r.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() {
		defer close(r.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			r.mu.Lock()
			r.lines = append(r.lines, sc.Text())
			r.mu.Unlock()
		}
		io.Copy(io.Discard, out)
	}()
	e.t.Cleanup(func() { r.kill() })
	return r
}

// snapshot returns the lines printed so far.
func (r *agentRun) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

// waitLines waits until cond holds for the lines printed so far.
func (r *agentRun) waitLines(what string, cond func([]string) bool) []string {
	r.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		lines := r.snapshot()
		if cond(lines) {
			return lines
		}
		select {
		case <-r.done:
			if lines := r.snapshot(); cond(lines) {
				return lines
			}
			r.t.Fatalf("agent helper ended before %s; its last lines: %q", what, tail(r.snapshot(), 5))
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %s; last lines: %q", what, tail(lines, 5))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// wait waits for the helper to end on its own (the daemon went away).
func (r *agentRun) wait() {
	r.t.Helper()
	select {
	case <-r.done:
		r.cmd.Wait()
	case <-time.After(30 * time.Second):
		r.t.Fatal("agent helper did not end after the daemon went away")
	}
}

func (r *agentRun) kill() {
	if r.cmd.ProcessState == nil {
		r.cmd.Process.Kill()
		<-r.done
		r.cmd.Wait()
	}
}

func tail(lines []string, n int) []string {
	return lines[max(0, len(lines)-n):]
}

func countPrefix(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

// grantIDs returns the ids of the grants in lines.
func grantIDs(lines []string) []string {
	var ids []string
	for _, l := range lines {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "grant" {
			ids = append(ids, f[1])
		}
	}
	return ids
}

// kill9 kills the daemon with SIGKILL and waits for it to be gone.
func (e *e2e) kill9() {
	e.t.Helper()
	e.proc.Process.Signal(syscall.SIGKILL)
	<-e.exited
	e.proc = nil
}

// TestFaultKill9Repeated kills the daemon with SIGKILL at a random point of a
// burst of grants from 8 connections, five times in a row, restarting it
// after each kill without a clean stop in between. After every restart the
// audit log verifies, and it holds every grant any client received
// (property 2: no grant leaves before its record is fsynced).
func TestFaultKill9Repeated(t *testing.T) {
	e := newE2E(t)
	var received []string
	rounds := 5
	if testing.Short() {
		rounds = 2
	}
	for round := 0; round < rounds; round++ {
		e.start()
		e.verifyAudit()
		agent := e.startAgent("loop", e.agentK)
		// Round 0 kills as soon as the agent runs, before or during its
		// first requests; later rounds after a random number of grants.
		killAt := 0
		if round > 0 {
			killAt = 1 + rand.IntN(300)
		}
		agent.waitLines(fmt.Sprintf("%d grants", killAt), func(l []string) bool { return countPrefix(l, "grant ") >= killAt })
		e.kill9()
		agent.wait()
		lines := agent.snapshot()
		for _, l := range lines {
			if !strings.HasPrefix(l, "grant ") {
				t.Errorf("round %d: agent saw %q", round, l)
			}
		}
		received = append(received, grantIDs(lines)...)
	}
	e.start()
	e.verifyAudit()
	issued := map[string]bool{}
	recovered := 0
	for _, r := range e.auditRecords() {
		switch r.Kind {
		case audit.KindIssue:
			issued[r.GrantID] = true
		case audit.KindRecovered:
			recovered++
		}
	}
	for _, id := range received {
		if !issued[id] {
			t.Errorf("grant %s reached a client but is not in the audit log", id)
		}
	}
	t.Logf("%d rounds: %d grants received, %d issued in the log, %d torn tails recovered", rounds, len(received), len(issued), recovered)
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Errorf("daemon exit: %v", err)
	}
	e.verifyAudit()
}

// auditAfter waits until the audit log holds a record for which first
// returns true and then records of at least n requests (issue or deny; a
// folded record stands for its count), and returns those records.
func (e *e2e) auditAfter(what string, first func(audit.Record) bool, n int) []audit.Record {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		recs := e.auditRecords()
		var after []audit.Record
		found, requests := false, 0
		for _, r := range recs {
			if !found {
				found = first(r)
				continue
			}
			if r.Kind == audit.KindIssue || r.Kind == audit.KindDeny {
				after = append(after, r)
				requests += requestsOf(r)
			}
		}
		if found && requests >= n {
			return after
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s (found: %v, records of %d requests after it)", what, found, requests)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// requestsOf is how many requests r stands for: its fold's count, or one.
func requestsOf(r audit.Record) int {
	if r.Folded != nil {
		return r.Folded.Count
	}
	return 1
}

// recString names a request record's kind, deciding rule and sequence number.
func recString(r audit.Record) string {
	rule := ""
	if r.DecidedBy != nil {
		rule = r.DecidedBy.Rule
	}
	return fmt.Sprintf("record %d: %s by rule %q", r.Seq, r.Kind, rule)
}

// TestFaultReloadUnderLoad sends SIGHUP while 8 connections ask for grants
// as fast as they can. An invalid policy changes nothing: requests go on
// being issued by the old rule, and none fails. A valid one decides every
// request after it: past the at most 8 requests that were already being
// decided when it was swapped in, each is refused by the new rule (property
// 6).
func TestFaultReloadUnderLoad(t *testing.T) {
	e := newE2E(t)
	e.start()
	agent := e.startAgent("loop", e.agentK)
	agent.waitLines("50 grants", func(l []string) bool { return countPrefix(l, "grant ") >= 50 })
	policyPath := filepath.Join(e.etc, "policy.toml")

	e.writeOwned(policyPath, "version = 1\n[[rule]]\nbogus = 1\n")
	e.proc.Process.Signal(syscall.SIGHUP)
	after := e.auditAfter("a refused reload and 100 requests after it", func(r audit.Record) bool {
		return r.Kind == audit.KindPolicyReload && r.Decision == "refused"
	}, 100)
	for _, r := range after {
		if r.Kind != audit.KindIssue || r.DecidedBy == nil || r.DecidedBy.Rule != "calendar-auto" {
			t.Fatalf("after an invalid policy: %s", recString(r))
		}
	}

	const closed = `
[[rule]]
name = "calendar-closed"
agents = ["bot"]
action = "deny"
svc = ["cal.example"]
`
	e.writeOwned(policyPath, strings.Replace(e2ePolicy, "[[rule]]", closed+"\n[[rule]]", 1))
	e.proc.Process.Signal(syscall.SIGHUP)
	const inflight = 8 // one request per connection of the agent
	after = e.auditAfter("a loaded reload and 100 requests after it", func(r audit.Record) bool {
		return r.Kind == audit.KindPolicyReload && r.Decision == "loaded"
	}, inflight+100)
	// Identical refusals fold (docs/audit.md): a record may stand for many.
	seen := 0
	for _, r := range after {
		if seen >= inflight && (r.Kind != audit.KindDeny || r.DecidedBy == nil || r.DecidedBy.Rule != "calendar-closed") {
			t.Fatalf("request %d after a valid reload: %s", seen, recString(r))
		}
		seen += requestsOf(r)
	}
	agent.kill()
	lines := agent.snapshot()
	t.Logf("agent: %d grants, %d refusals", countPrefix(lines, "grant "), countPrefix(lines, "refused "))
	// The agent saw grants, then refusals by the new rule, and nothing else.
	for _, l := range lines {
		if !strings.HasPrefix(l, "grant ") && !strings.HasPrefix(l, "refused forbidden calendar-closed ") {
			t.Errorf("agent saw %q", l)
		}
	}
	e.verifyAudit()
}

// TestFaultAuditDiskFullUnderLoad fills the audit log's filesystem while 8
// connections ask for grants. Every request is then refused as unavailable
// with a message naming the audit log, the daemon stays up, and grants flow
// again once space returns. Records whose write failed part-way, in groups
// committed together, leave nothing behind that breaks verification, and
// every grant a client received is in the log.
func TestFaultAuditDiskFullUnderLoad(t *testing.T) {
	e := newE2E(t)
	small := e.onSmallFS("1m")
	e.start()
	agent := e.startAgent("loop", e.agentK)
	agent.waitLines("20 grants", func(l []string) bool { return countPrefix(l, "grant ") >= 20 })

	filler := filepath.Join(small, "filler")
	exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=4k").Run()
	full := len(agent.snapshot())
	agent.waitLines("50 refusals on a full disk", func(l []string) bool {
		return countPrefix(l[full:], "refused unavailable ") >= 50
	})
	// Still up and answering.
	e.as(e.agent, 0, "parley-grant", "status")
	os.Remove(filler)
	freed := len(agent.snapshot())
	agent.waitLines("50 grants after space returned", func(l []string) bool {
		return countPrefix(l[freed:], "grant ") >= 50
	})
	agent.kill()
	lines := agent.snapshot()
	t.Logf("agent: %d grants, %d refusals", countPrefix(lines, "grant "), countPrefix(lines, "refused "))
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "grant "):
		case strings.HasPrefix(l, "refused unavailable ") && strings.Contains(l, "audit log cannot be written"):
		default:
			t.Errorf("agent saw %q", l)
		}
	}
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Errorf("daemon exit: %v", err)
	}
	e.verifyAudit()
	issued := map[string]bool{}
	for _, r := range e.auditRecords() {
		issued[r.GrantID] = true
	}
	for _, id := range grantIDs(lines) {
		if !issued[id] {
			t.Errorf("grant %s reached a client but is not in the audit log", id)
		}
	}
}

// TestFaultPendingFlood has one agent (told apart by its key) send 40
// requests that need a human at once. Its pending limit of 3 lets three
// wait and refuses the rest with "limit"; another agent of the same OS user
// is still issued grants by policy, and its own request that needs a human
// still waits and is approved. When the flooding agent goes away, its
// requests are withdrawn and it may ask again.
func TestFaultPendingFlood(t *testing.T) {
	e := newE2E(t)
	floodK := filepath.Join(e.base, "agent", "flood.key")
	e.as(e.agent, 0, "parley-grant", "keygen", "--out", floodK)
	floodPub := strings.TrimSpace(e.as(e.agent, 0, "parley-grant", "pubkey", "--key", floodK).stdout)
	if _, err := grant.ParsePublicKey(floodPub); err != nil {
		t.Fatalf("pubkey printed %q: %v", floodPub, err)
	}
	flooder := fmt.Sprintf(`[[agent]]
name = "flooder"
key = [%q]
rate = 100000
pending = 3

`, floodPub)
	pol := strings.Replace(e2ePolicy, "[[agent]]", flooder+"[[agent]]", 1)
	pol = strings.ReplaceAll(pol, `agents = ["bot"]`, `agents = ["bot", "flooder"]`)
	e.writeOwned(filepath.Join(e.etc, "policy.toml"), pol)
	e.start()

	flood := e.startAgent("flood", floodK)
	lines := flood.waitLines("40 answers", func(l []string) bool { return len(l) >= 40 })
	if w, r := countPrefix(lines, "waiting "), countPrefix(lines, "refused limit "); w != 3 || r != 37 {
		t.Fatalf("flood: %d waiting, %d refused with limit; want 3 and 37: %q", w, r, lines)
	}

	// The other agent is served: by policy at once, and by the human.
	e.as(e.agent, 0, "parley-grant", "issue", "--key", e.agentK, "--svc", "cal.example", "--can", "calendar.*", "--exp", "30m")
	cmd := testpeer.RunAs(e.agent.uid, e.agent.gid, nil, filepath.Join(e.bin, "parley-grant"), "issue", "--key", e.agentK, "--can", "mail.read")
	cmd.Env = []string{"PATH=/usr/bin:/bin", protocol.SocketEnv + "=" + e.sock, protocol.DaemonUserEnv + "=" + e2eDaemonUser}
	errb := &syncBuffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var m []string
	deadline := time.Now().Add(15 * time.Second)
	for m == nil {
		if m = codeLine.FindStringSubmatch(errb.String()); m == nil {
			if time.Now().After(deadline) {
				t.Fatalf("the other agent's request did not wait for approval: %q", errb.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if r := e.as(e.human, 0, "parley-grant", "pending"); strings.Count(r.stdout, "flooder") < 3 || !strings.Contains(r.stdout, m[1]) {
		t.Errorf("pending = %q", r.stdout)
	}
	e.as(e.human, 0, "parley-grant", "approve", m[1], "--code", m[2])
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the other agent's approved request: %v\n%s", err, errb.String())
	}

	// The flooder is still at its limit, until it goes away.
	r := e.try(e.agent, "parley-grant", "issue", "--key", floodK, "--can", "mail.more")
	if r.code != 9 || !strings.Contains(r.stderr, "already has 3 requests waiting") {
		t.Errorf("flooder over its limit: exit %d, stderr %q", r.code, r.stderr)
	}
	flood.kill()
	deadline = time.Now().Add(15 * time.Second)
	for {
		withdrawn := 0
		for _, rec := range e.auditRecords() {
			if rec.Kind == audit.KindWithdrawn && rec.Holder == floodPub {
				withdrawn++
			}
		}
		if withdrawn == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the flooder's 3 waiting requests withdrawn", withdrawn)
		}
		time.Sleep(10 * time.Millisecond)
	}
	flood = e.startAgent("flood", floodK)
	lines = flood.waitLines("40 answers", func(l []string) bool { return len(l) >= 40 })
	if w := countPrefix(lines, "waiting "); w != 3 {
		t.Errorf("after withdrawal the flooder has %d waiting, want 3", w)
	}
	flood.kill()
	e.verifyAudit()
}
