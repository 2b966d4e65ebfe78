package main

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// These are the attacks of issue 20, items 2 and 3, on the audit log's size
// (DESIGN.md property 14): a caller that makes the daemon write records
// faster than its rate allows fills the disk, and a full disk stops
// issuance for everyone.

// rateHelperEnv tells TestRateHelper what to do: "seconds,lock,socket".
const rateHelperEnv = "PARLEY_RATE_HELPER"

// TestRateHelper runs as a hostile caller in a child process. For the
// given seconds, on four connections with eight requests in flight on
// each, it sends every verb in turn, each with fresh values in every field
// it chooses (holder keys, request ids, match codes, seqs, reasons, verb
// names), while two more goroutines send malformed frames on connections
// they open and close again, and open and drop WATCHes. With lock "1" it
// also sends LOCK and UNLOCK in the second half. It prints "sent N" and
// one "code C N" line per reply code, then exits.
func TestRateHelper(t *testing.T) {
	arg := os.Getenv(rateHelperEnv)
	if arg == "" {
		return // an ordinary test run: this runs only as a helper process
	}
	parts := strings.SplitN(arg, ",", 3)
	secs, err := strconv.Atoi(parts[0])
	if len(parts) != 3 || err != nil {
		fmt.Fprintln(os.Stderr, "bad", rateHelperEnv, arg)
		os.Exit(2)
	}
	lock, sock := parts[1] == "1", parts[2]
	start := time.Now()
	deadline := start.Add(time.Duration(secs) * time.Second)
	var sent atomic.Int64
	var mu sync.Mutex
	codes := map[string]int{}
	note := func(err error) {
		code := "ok"
		var pe *protocol.Error
		switch {
		case err == nil:
		case errors.As(err, &pe):
			code = string(pe.Code)
		case errors.Is(err, context.DeadlineExceeded):
			code = "waiting"
		default:
			code = "client"
		}
		mu.Lock()
		codes[code]++
		mu.Unlock()
	}
	fresh := func() string {
		b := make([]byte, 8)
		rand.Read(b)
		return hex.EncodeToString(b)
	}
	freshKey := func() ed25519.PrivateKey {
		_, k, _ := ed25519.GenerateKey(rand.Reader)
		return k
	}
	send := func(c *client.Client, i int) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		sent.Add(1)
		var err error
		switch i % 13 {
		case 0:
			_, err = c.Hello(ctx)
		case 1:
			_, err = c.Grant(ctx, freshKey(), []grant.Caveat{grant.Can("mail." + fresh())}, nil)
		case 2:
			k := freshKey()
			_, err = c.Explain(ctx, grant.FormatPublicKey(k.Public().(ed25519.PublicKey)), []grant.Caveat{grant.Can("mail." + fresh())})
		case 3:
			k := freshKey()
			_, err = c.Do(ctx, &protocol.Frame{Verb: protocol.VerbConsent, Service: fresh() + ".example",
				Holder: grant.FormatPublicKey(k.Public().(ed25519.PublicKey)), Consent: json.RawMessage(`{"hash":"` + fresh() + `"}`),
				Proposal: json.RawMessage(`{"id":"` + fresh() + `"}`)}, nil)
		case 4:
			_, err = c.Pending(ctx)
		case 5:
			err = c.Approve(ctx, "r_"+fresh(), fresh(), "")
		case 6:
			err = c.Deny(ctx, "r_"+fresh(), "")
		case 7:
			_, err = c.Audit(ctx, protocol.AuditQuery{From: uint64(i), Grant: fresh(), Limit: 1})
		case 8:
			if lock && time.Since(start) > time.Duration(secs)*time.Second/2 {
				_, _, err = c.Lock(ctx, "reason "+fresh())
			} else {
				_, err = c.Hello(ctx)
			}
		case 9:
			if lock && time.Since(start) > time.Duration(secs)*time.Second/2 {
				_, err = c.Unlock(ctx)
			} else {
				_, err = c.Pending(ctx)
			}
		case 10:
			_, err = c.Do(ctx, &protocol.Frame{Verb: "V" + fresh()}, nil)
		case 11:
			k := freshKey()
			body, _ := json.Marshal(protocol.GrantBody{Holder: grant.FormatPublicKey(k.Public().(ed25519.PublicKey)),
				Caveats: []grant.Caveat{grant.Can("mail." + fresh())}})
			_, err = c.Do(ctx, &protocol.Frame{Verb: protocol.VerbGrant, Grant: body,
				Proof: &grant.Proof{Key: grant.FormatPublicKey(k.Public().(ed25519.PublicKey)), Ts: time.Now().Unix(), Sig: fresh()}}, nil)
		case 12:
			body, _ := json.Marshal(map[string]any{"holder": "ed25519:" + fresh(), "caveats": []any{}})
			_, err = c.Do(ctx, &protocol.Frame{Verb: protocol.VerbExplain, Grant: body}, nil)
		}
		note(err)
	}
	var wg sync.WaitGroup
	for n := 0; n < 4; n++ {
		c, err := client.Dial(sock)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dial:", err)
			os.Exit(2)
		}
		defer c.Close()
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; time.Now().Before(deadline); i += 8 {
					send(c, i)
				}
			}()
		}
	}
	// Malformed frames, each with a member name or id of its own, on
	// connections opened and closed again; and WATCHes opened and dropped.
	raw := []func() string{
		func() string { return `{"parley":1,"id":"` + fresh() + `","verb":"HELLO","m` + fresh() + `":1}` },
		func() string { return `{not json ` + fresh() },
		func() string { return `{"parley":2,"id":"` + fresh() + `","verb":"HELLO"}` },
		func() string { return `{"parley":1,"verb":"V` + fresh() + `"}` },
		func() string { return `{"parley":1,"id":"w` + fresh() + `","verb":"WATCH"}` },
		func() string { return `{"parley":1,"id":"w` + fresh() + `","verb":"WATCH"}` },
	}
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				nc, err := net.Dial("unix", sock)
				if err != nil {
					continue
				}
				go func() { bufio.NewReader(nc).WriteTo(discard{}) }()
				for _, f := range raw {
					sent.Add(1)
					nc.Write([]byte(f() + "\n"))
				}
				time.Sleep(5 * time.Millisecond)
				nc.Close()
			}
		}()
	}
	wg.Wait()
	fmt.Printf("sent %d\n", sent.Load())
	for code, n := range codes {
		fmt.Printf("code %s %d\n", code, n)
	}
	os.Exit(0)
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

var knownVerbs = map[string]bool{}

func init() {
	for _, v := range []string{protocol.VerbHello, protocol.VerbGrant, protocol.VerbExplain, protocol.VerbConsent,
		protocol.VerbPending, protocol.VerbApprove, protocol.VerbDeny, protocol.VerbWatch, protocol.VerbAudit,
		protocol.VerbLock, protocol.VerbUnlock} {
		knownVerbs[v] = true
	}
}

// callerGrowth is what one caller's requests added to the log.
type callerGrowth struct {
	records, bytes int
	// keys counts the records by kind, verb and decision: every field
	// of a record that no caller chooses.
	keys map[string]int
}

func (e *e2e) growthByUID() map[uint32]*callerGrowth {
	e.t.Helper()
	out := map[uint32]*callerGrowth{}
	err := audit.Read(filepath.Join(e.state, "audit.log"), audit.Filter{}, func(line []byte, r *audit.Record) error {
		if r.Caller == nil || r.Caller.Device != "" {
			return nil
		}
		g := out[r.Caller.UID]
		if g == nil {
			g = &callerGrowth{keys: map[string]int{}}
			out[r.Caller.UID] = g
		}
		g.records++
		g.bytes += len(line) + 1
		verb := r.Verb
		if verb != "" && !knownVerbs[verb] {
			verb = "(unknown)" // a name the caller chose
		}
		g.keys[r.Kind+" "+verb+" "+r.Decision]++
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// TestRateEveryVerb is issue 20 item 2: three hostile callers, each a real
// OS user on real connections (an agent user, an agent user that is also
// an approver, and an approver that is no agent), send every verb, every
// kind of malformed frame and WATCHes they drop, with fresh values in every
// field they choose, as fast as the daemon answers, under a rate of 30
// requests a minute. Each grows the log by at most what its rate allows
// (a full bucket of one minute's requests, and what refills meanwhile),
// plus the counted records its refusals past the rate fold into: at most
// two for each kind, verb and outcome. The served agent is still issued a
// grant afterwards.
func TestRateEveryVerb(t *testing.T) {
	e := newE2E(t)
	names := []string{testpeer.Name("ratea"), testpeer.Name("rated")}
	users := e.addAgentUsers(names...)
	approverName := testpeer.Name("ratev")
	approver := osUser(t, approverName)
	e.editConfig("approver_users = ["+strconv.Quote(e2eHumanUser)+"]",
		fmt.Sprintf("approver_users = [%q, %q, %q]", e2eHumanUser, names[1], approverName))
	e.editConfig("dual_role_users = []", fmt.Sprintf("dual_role_users = [%q]", names[1]))
	pol := strings.Replace(e2ePolicy, "[[rule]]", fmt.Sprintf(`[[agent]]
name = "hostile"
user = [%q, %q]
rate = 30
pending = 3

[[rule]]`, names[0], names[1]), 1)
	pol = strings.Replace(pol, `agents = ["bot"]
action = "ask"`, `agents = ["bot", "hostile"]
action = "ask"`, 1)
	e.writeOwned(filepath.Join(e.etc, "policy.toml"), pol)
	e.start()

	const secs = 5
	type attacker struct {
		name string
		who  ids
		rate int
		lock string
	}
	attackers := []attacker{
		{"agent", users[0], 30, "0"},
		{"agent and approver", users[1], 30, "1"},
		{"approver", approver, 60, "0"}, // the daemon's rate for a caller the policy names no agent for
	}
	for _, a := range attackers {
		cmd := testpeer.Helper(t, a.who.uid, a.who.gid, nil, "TestRateHelper",
			fmt.Sprintf("%s=%d,%s,%s", rateHelperEnv, secs, a.lock, e.sock), protocol.DaemonUserEnv+"="+e2eDaemonUser)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s helper: %v\n%s", a.name, err, out)
		}
		t.Logf("%s: %s", a.name, strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", ", "))
	}
	// The daemon is still there for the others: the human unlocks what
	// the weak approver locked, and the served agent is issued a grant.
	e.as(e.human, 0, "parley-grant", "unlock")
	e.as(e.agent, 0, "parley-grant", "issue", "--key", e.agentK, "--svc", "cal.example", "--can", "calendar.*", "--exp", "30m")
	// A clean stop writes what folds still count.
	if err := e.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("daemon: %v\n%s", err, e.stderr)
	}
	growth := e.growthByUID()
	for _, a := range attackers {
		g := growth[a.who.uid]
		if g == nil {
			t.Errorf("%s: no record at all", a.name)
			continue
		}
		// The attackers ran one after the other, each for secs seconds
		// (and its last replies); a bucket holds a minute's requests.
		allowed := a.rate + (secs+2)*a.rate/60 + 1
		folded := 2 * len(g.keys)
		var keys []string
		for k, n := range g.keys {
			keys = append(keys, fmt.Sprintf("%s: %d", k, n))
		}
		sort.Strings(keys)
		if len(keys) > 60 {
			keys = append(keys[:60], "…")
		}
		t.Logf("%s: %d records, %d bytes, %d kinds of record (allowed %d, plus %d folded)\n\t%s",
			a.name, g.records, g.bytes, len(g.keys), allowed, folded, strings.Join(keys, "\n\t"))
		if len(g.keys) > 48 {
			t.Errorf("%s: %d kinds of record (kind, verb, decision); the outcomes of requests are a small fixed set", a.name, len(g.keys))
		}
		if g.records > allowed+folded {
			t.Errorf("%s grew the log by %d records in %d s; its rate allows %d, and its refusals past the rate fold into at most %d",
				a.name, g.records, secs, allowed, folded)
		}
		// A record of its own is at most a few KiB here (the attacker
		// sends small frames); a folded one, which names the caller's uid
		// and no field of its choosing, well under 1 KiB.
		if limit := allowed*4096 + folded*1024; g.bytes > limit {
			t.Errorf("%s grew the log by %d bytes; at most %d may be its own", a.name, g.bytes, limit)
		}
	}
	e.verifyAudit()
}

// TestRateAuditFollower is issue 20 item 3: the human follows the log
// (parley-grant audit --follow) on an idle daemon. The follower is never
// woken by a read of the log (its own AUDIT's record among them), so the
// log grows by a handful of records, not thousands; and it still prints a
// real record at once.
func TestRateAuditFollower(t *testing.T) {
	e := newE2E(t)
	e.start()
	before := len(e.auditRecords())
	cmd := testpeer.RunAs(e.human.uid, e.human.gid, nil, filepath.Join(e.bin, "parley-grant"), "audit", "--follow", "--json")
	cmd.Env = []string{"PATH=/usr/bin:/bin", protocol.SocketEnv + "=" + e.sock, protocol.DaemonUserEnv + "=" + e2eDaemonUser}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	// The follower has read the log up to its head once it printed the
	// start record.
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(out.String(), `"kind":"start"`) {
		if time.Now().After(deadline) {
			t.Fatalf("the follower printed no start record: %s", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	const idle = 6 * time.Second
	time.Sleep(idle) // the measurement: what an idle follower writes in this time
	grown := len(e.auditRecords()) - before
	t.Logf("an idle daemon with a follower grew the log by %d records in %s", grown, idle)
	// Its first AUDIT, the one that waits, and perhaps a checkpoint.
	if grown > 4 {
		t.Errorf("an idle daemon with a follower grew the log by %d records in %s; want at most 4", grown, idle)
	}
	// A real record wakes the follower at once.
	r := e.as(e.agent, 0, "parley-grant", "issue", "--key", e.agentK, "--svc", "cal.example", "--can", "calendar.*", "--exp", "30m")
	tok, err := grant.Decode(strings.TrimSpace(r.stdout))
	if err != nil {
		t.Fatalf("issue printed %q: %v", r.stdout, err)
	}
	issued := time.Now()
	for !strings.Contains(out.String(), tok.ID()) {
		if time.Since(issued) > 3*time.Second {
			t.Fatalf("the follower did not print the grant's record within 3 s:\n%s", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the follower printed the grant's record %s after it was issued", time.Since(issued).Round(time.Millisecond))
}
