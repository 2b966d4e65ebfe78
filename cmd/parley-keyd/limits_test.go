package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// These tests are the attacks of a hostile agent on the daemon's
// connections and memory (DESIGN.md property 7), run against the real
// binary as real OS users: the daemon as its own user, attackers as agent
// users of their own, the human and a served agent as others.

// limitsHelperEnv tells TestLimitsHelper what to do: "mode,n,socket".
const limitsHelperEnv = "PARLEY_LIMITS_HELPER"

// halfFrame is the start of a frame of almost 1 MiB that never ends.
var halfFrame = append([]byte(`{"parley":1,"id":"half","verb":"HELLO","pad":"`), bytes.Repeat([]byte("x"), protocol.MaxFrame-100)...)

// TestLimitsHelper runs as an attacking agent user in a child process. It
// opens n connections one after the other, each of which sends HELLO and
// waits for its answer, and prints
//
//	admitted A refused R
//
// once all n have been answered (R were refused at accept). Mode "idle"
// then keeps the admitted ones open and silent. Mode "half" sends each
// admitted connection the first 1 MiB − 100 bytes of a frame, never its
// end, and prints "written W failed F" once every write has returned; then
// "closed CODE" (or "closed eof") for each connection the daemon ends.
// The helper lives until it is killed.
func TestLimitsHelper(t *testing.T) {
	arg := os.Getenv(limitsHelperEnv)
	if arg == "" {
		return // an ordinary test run: this runs only as a helper process
	}
	parts := strings.Split(arg, ",")
	n, err := strconv.Atoi(parts[1])
	if len(parts) != 3 || err != nil {
		fmt.Fprintln(os.Stderr, "bad", limitsHelperEnv, arg)
		os.Exit(2)
	}
	mode, sock := parts[0], parts[2]
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		fmt.Printf(format+"\n", args...)
		mu.Unlock()
	}
	type held struct {
		nc net.Conn
		br *bufio.Reader
	}
	var conns []held
	refused := 0
	for i := 0; i < n; i++ {
		nc, err := net.Dial("unix", sock)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dial:", err)
			os.Exit(2)
		}
		nc.SetDeadline(time.Now().Add(30 * time.Second))
		br := bufio.NewReader(nc)
		_, werr := nc.Write([]byte(`{"parley":1,"id":"h","verb":"HELLO"}` + "\n"))
		line, rerr := br.ReadBytes('\n')
		nc.SetDeadline(time.Time{})
		switch {
		case werr == nil && rerr == nil && bytes.Contains(line, []byte(`"kind":"BRIEF"`)):
			conns = append(conns, held{nc, br})
		case bytes.Contains(line, []byte(`"code":"limit"`)) || werr != nil:
			refused++
			nc.Close()
		default:
			fmt.Fprintf(os.Stderr, "connection %d: HELLO answered %q: %v %v\n", i, line, werr, rerr)
			os.Exit(2)
		}
	}
	say("admitted %d refused %d", len(conns), refused)
	if mode == "half" {
		var wg sync.WaitGroup
		var written, failed atomic.Int64
		for _, h := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := h.nc.Write(halfFrame); err != nil {
					failed.Add(1)
				} else {
					written.Add(1)
				}
			}()
		}
		wg.Wait()
		say("written %d failed %d", written.Load(), failed.Load())
		for _, h := range conns {
			go func() {
				line, err := h.br.ReadBytes('\n')
				var f protocol.Frame
				if err == nil && json.Unmarshal(line, &f) == nil && f.Kind == protocol.KindError {
					say("closed %s %s", f.Code, f.Message)
					return
				}
				say("closed eof")
			}()
		}
	}
	select {} // until killed
}

// limitsUsers are the attacking agent users, one OS user each.
var limitsUsers = []string{testpeer.Name("agentb"), testpeer.Name("agentc"), testpeer.Name("agentd"), testpeer.Name("agente")}

// addAgentUsers lets more OS users connect as agents (config.toml).
func (e *e2e) addAgentUsers(names ...string) []ids {
	e.t.Helper()
	var out []ids
	list := strconv.Quote(e2eAgentUser)
	for _, n := range names {
		out = append(out, osUser(e.t, n))
		list += fmt.Sprintf(", %q", n)
	}
	e.editConfig("agent_users = ["+strconv.Quote(e2eAgentUser)+"]", "agent_users = ["+list+"]")
	return out
}

// editConfig replaces old with new in the daemon's config.toml.
func (e *e2e) editConfig(old, new string) {
	e.t.Helper()
	path := filepath.Join(e.etc, "config.toml")
	b, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		e.t.Fatalf("config.toml has no %q:\n%s", old, b)
	}
	e.writeOwned(path, strings.Replace(string(b), old, new, 1))
}

// startLimits runs TestLimitsHelper as who.
func (e *e2e) startLimits(who ids, mode string, n int) *agentRun {
	e.t.Helper()
	r := &agentRun{t: e.t, done: make(chan struct{})}
	r.cmd = testpeer.Helper(e.t, who.uid, who.gid, nil, "TestLimitsHelper",
		fmt.Sprintf("%s=%s,%d,%s", limitsHelperEnv, mode, n, e.sock))
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
	}()
	e.t.Cleanup(func() { r.kill() })
	return r
}

// admitted waits for a helper's "admitted A refused R" line.
func (r *agentRun) admitted() (a, refused int) {
	r.t.Helper()
	lines := r.waitLines("its connections", func(l []string) bool { return countPrefix(l, "admitted ") > 0 })
	for _, l := range lines {
		if _, err := fmt.Sscanf(l, "admitted %d refused %d", &a, &refused); err == nil {
			return a, refused
		}
	}
	r.t.Fatalf("no admitted line in %q", lines)
	return
}

// procStatus reads a "kB" or count field of /proc/PID/status.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, field+":"); ok {
			v, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

// limitsRSSBound is what the daemon may hold resident, at its peak, under
// TestLimitsConnectionFlood (KiB, as /proc says): the frame budget (64 MiB),
// each connection's own 4 KiB of frame bytes, 4096 connections of about
// 24 KiB, the garbage collector's slack, and the 15 MiB the daemon uses at
// rest (docs/protocol.md, Limits).
const limitsRSSBound = 256 << 10

// unitLimit returns the value of setting in dist/parley-keyd.service.
func unitLimit(t *testing.T, setting string) string {
	t.Helper()
	b, err := os.ReadFile("../../dist/parley-keyd.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, setting+"="); ok {
			return v
		}
	}
	t.Fatalf("dist/parley-keyd.service sets no %s", setting)
	return ""
}

// TestLimitsConnectionFlood is item 4 of the review: two agent users open
// 1,024 connections each and leave a frame of almost 1 MiB half-sent on
// every one; a third fills its share of connections with idle ones.
// Meanwhile another agent is issued a grant and the human lists pending
// requests; the daemon's resident memory stays under limitsRSSBound and
// its threads under the unit's TasksMax. Then a fourth agent user takes
// every connection agents may hold: it is refused some, and still the human
// and an agent that holds no connection are served.
func TestLimitsConnectionFlood(t *testing.T) {
	e := newE2E(t)
	attackers := e.addAgentUsers(limitsUsers...)
	// The half frames are held for the whole test (TestLimitsSlowFrame
	// checks that they are cut off in time).
	e.editConfig(`approval_timeout = "120s"`, "approval_timeout = \"120s\"\nframe_timeout = \"10m\"")
	e.start()
	pid := e.proc.Process.Pid
	rss0 := procStatus(t, pid, "VmRSS")

	for i, mode := range []string{"half", "half", "idle"} {
		r := e.startLimits(attackers[i], mode, 1024)
		a, refused := r.admitted()
		t.Logf("attacker %d (%s): %d admitted, %d refused", i+1, mode, a, refused)
		if mode == "half" {
			r.waitLines("every half frame written", func(l []string) bool { return countPrefix(l, "written ") > 0 })
		}
	}
	e.as(e.agent, 0, "parley-grant", "issue", "--key", e.agentK, "--svc", "cal.example", "--can", "calendar.*", "--exp", "30m")
	e.as(e.human, 0, "parley-grant", "pending")
	peak, threads := procStatus(t, pid, "VmHWM"), procStatus(t, pid, "Threads")
	t.Logf("daemon resident: %d MiB at start, %d MiB at peak; %d threads", rss0>>10, peak>>10, threads)
	if peak > limitsRSSBound {
		t.Errorf("the daemon's resident memory peaked at %d MiB, over the bound of %d MiB", peak>>10, limitsRSSBound>>10)
	}
	if max, _ := strconv.ParseInt(unitLimit(t, "TasksMax"), 10, 64); threads >= max {
		t.Errorf("the daemon runs %d threads; its unit allows %d", threads, max)
	}

	// Every connection an agent may hold.
	last := e.startLimits(attackers[3], "idle", 1024)
	a, r := last.admitted()
	t.Logf("attacker 4 (idle): %d admitted, %d refused", a, r)
	if r == 0 {
		t.Error("agents took every connection")
	}
	if res := e.try(e.human, "parley-grant", "pending"); res.code != 0 {
		t.Errorf("the human's pending with every agent slot taken: exit %d: %s", res.code, res.stderr)
	}
	if res := e.try(e.agent, "parley-grant", "issue", "--key", e.agentK, "--svc", "cal.example", "--can", "calendar.*", "--exp", "30m"); res.code != 0 {
		t.Errorf("an agent with no connection, with every agent slot taken: exit %d: %s", res.code, res.stderr)
	}
}

// TestLimitsSlowFrame: once a frame's first byte has arrived, the daemon
// waits at most frame_timeout for the rest. A half-sent one is cut off with
// an error that says so, and the daemon serves on.
func TestLimitsSlowFrame(t *testing.T) {
	e := newE2E(t)
	attacker := e.addAgentUsers(limitsUsers[0])[0]
	e.editConfig(`approval_timeout = "120s"`, "approval_timeout = \"120s\"\nframe_timeout = \"2s\"")
	e.start()
	half := e.startLimits(attacker, "half", 8)
	if a, _ := half.admitted(); a != 8 {
		t.Fatalf("%d of 8 connections admitted", a)
	}
	lines := half.waitLines("8 connections cut off", func(l []string) bool { return countPrefix(l, "closed ") >= 8 })
	for _, l := range lines {
		if strings.HasPrefix(l, "closed ") && !strings.HasPrefix(l, "closed limit the rest of the frame did not arrive within 2s") {
			t.Errorf("helper saw %q", l)
		}
	}
	e.as(e.agent, 0, "parley-grant", "issue", "--key", e.agentK, "--svc", "cal.example", "--can", "calendar.*", "--exp", "30m")
}
