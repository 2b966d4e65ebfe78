package keyd

import (
	"bufio"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/policies"
)

// loadPolicy is testPolicy with room for 200 clients: the pending limit is
// the policy's maximum, so that waiting requests of vanishing clients are
// never refused for it.
const loadPolicy = `
version = 1
[[agent]]
name = "load"
any = true
rate = 100000
pending = 1000

[[rule]]
name = "calendar-auto"
agents = ["load"]
action = "auto"
svc = ["cal.example"]
can = ["calendar.*"]
max_exp = "1h"

[[rule]]
name = "never-bank"
agents = ["load"]
action = "deny"
can = ["bank.*"]

[[rule]]
name = "ask-rest"
agents = ["*"]
action = "ask"
max_exp = "1h"
channels = ["terminal"]
`

// loadKind is one kind of request in the load mix.
type loadKind int

const (
	loadAuto      loadKind = iota // GRANT the policy issues at once
	loadDeny                      // GRANT the policy refuses
	loadHello                     // HELLO
	loadMalformed                 // one of malformedFrames
	loadSlow                      // an auto GRANT written in pieces with pauses
	loadVanish                    // a second connection that goes away mid-request
	loadOversize                  // a frame over protocol.MaxFrame
)

// loadMix is the share of each kind, in percent; oversized frames are sent
// loadOversized times per client on top.
var loadMix = []struct {
	kind    loadKind
	percent int
}{
	{loadAuto, 35}, {loadDeny, 15}, {loadHello, 10}, {loadMalformed, 20}, {loadSlow, 10}, {loadVanish, 10},
}

// malformedFrames are frames the daemon must refuse with the code given,
// answering re the id where the frame has one ("X").
var malformedFrames = []struct {
	line string
	code protocol.Code
	re   bool
}{
	{"{nope", protocol.CodeBadFrame, false},
	{"[1,2]", protocol.CodeBadFrame, false},
	{`{"parley":1,"verb":"HELLO"}`, protocol.CodeBadFrame, false},
	{`{"parley":1,"id":"X","verb":"STEAL"}`, protocol.CodeBadFrame, true},
	{`{"parley":2,"id":"X","verb":"HELLO"}`, protocol.CodeBadFrame, true},
	{`{"parley":1,"id":"X","verb":"GRANT"}`, protocol.CodeInvalidParams, true},
	{`{"parley":1,"id":"X","verb":"GRANT","grant":{"holder":"ed25519:AAAA","caveats":[]}}`, protocol.CodeInvalidParams, true},
}

// loadFrames are GRANT frames made once per client, with their proofs: the
// daemon checks a proof's time window and signature, so a client may send
// the same signed request many times. "id" is filled in per request.
type loadFrames struct {
	auto, deny, ask string
}

func makeLoadFrames(t *testing.T, principal string, key ed25519.PrivateKey) loadFrames {
	t.Helper()
	exp := time.Now().Unix() + 1800
	frame := func(cavs ...grant.Caveat) string {
		body, err := json.Marshal(protocol.GrantBody{Holder: grant.FormatPublicKey(key.Public().(ed25519.PublicKey)), Caveats: cavs})
		if err != nil {
			t.Fatal(err)
		}
		digest, err := protocol.GrantDigest(body)
		if err != nil {
			t.Fatal(err)
		}
		proof, err := grant.MakeProof(key, principal, protocol.ProofVerbGrant, digest, time.Now().Unix())
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(&protocol.Frame{Parley: protocol.Version, ID: "ID", Verb: protocol.VerbGrant, Grant: body, Proof: &proof})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	return loadFrames{
		auto: frame(grant.Svc("cal.example"), grant.Can("calendar.find"), grant.Exp(exp)),
		deny: frame(grant.Can("bank.transfer")),
		ask:  frame(grant.Can("mail.read")),
	}
}

// pickKind maps p in [0, 100) to a kind by the shares of loadMix.
func pickKind(p int) loadKind {
	for _, m := range loadMix {
		if p < m.percent {
			return m.kind
		}
		p -= m.percent
	}
	panic("loadMix does not add up to 100")
}

func withID(frame, id string) []byte {
	return []byte(strings.Replace(frame, `"id":"ID"`, `"id":"`+id+`"`, 1) + "\n")
}

// loadStats is what the clients saw, for the checks after the run.
type loadStats struct {
	mu        sync.Mutex
	grants    []string // grant ids received
	withdrawn atomic.Int64
	answered  atomic.Int64
}

// loadClient is one of the load test's clients: one connection on which it
// sends its requests one after another, plus short-lived connections for the
// requests it abandons.
type loadClient struct {
	t      *testing.T
	sock   string
	frames loadFrames
	stats  *loadStats
	nc     net.Conn
	br     *bufio.Reader
	name   string
}

// fail reports an error the test did not cause and stops this client.
func (c *loadClient) fail(format string, args ...any) error {
	return fmt.Errorf("%s: "+format, append([]any{c.name}, args...)...)
}

// roundTrip writes b (in pieces, with pauses, when slow) and reads the one
// final reply. Every request on a live connection must be answered.
func (c *loadClient) roundTrip(b []byte, slow bool) (*protocol.Frame, error) {
	c.nc.SetDeadline(time.Now().Add(30 * time.Second))
	if slow {
		// A slow writer: the frame arrives in six pieces. The pauses shape
		// the load; nothing waits on them.
		step := len(b)/6 + 1
		for i := 0; i < len(b); i += step {
			if _, err := c.nc.Write(b[i:min(i+step, len(b))]); err != nil {
				return nil, c.fail("slow write: %v", err)
			}
			time.Sleep(200 * time.Microsecond)
		}
	} else if _, err := c.nc.Write(b); err != nil {
		return nil, c.fail("write: %v", err)
	}
	line, err := c.br.ReadBytes('\n')
	if err != nil {
		return nil, c.fail("no answer: %v", err)
	}
	var f protocol.Frame
	if err := json.Unmarshal(line, &f); err != nil {
		return nil, c.fail("answer %q: %v", line, err)
	}
	c.stats.answered.Add(1)
	return &f, nil
}

func (c *loadClient) expectError(f *protocol.Frame, code protocol.Code, re string) error {
	if f.Kind != protocol.KindError || f.Code != code || f.Re != re || f.Message == "" {
		return c.fail("got %s %s re %q (%s), want ERROR %s re %q", f.Kind, f.Code, f.Re, f.Message, code, re)
	}
	return nil
}

func (c *loadClient) expectGrant(f *protocol.Frame, id string) error {
	if f.Kind != protocol.KindGrant || f.Re != id {
		return c.fail("got %s %s re %q (%s), want GRANT re %q", f.Kind, f.Code, f.Re, f.Message, id)
	}
	var res protocol.GrantResult
	if err := json.Unmarshal(f.Data, &res); err != nil || res.Decision != "auto" || res.GrantID == "" {
		return c.fail("GRANT data %s: %v", f.Data, err)
	}
	c.stats.mu.Lock()
	c.stats.grants = append(c.stats.grants, res.GrantID)
	c.stats.mu.Unlock()
	return nil
}

// vanish opens a second connection, starts a request there and goes away
// before its answer: after a whole auto GRANT, halfway through a frame, or
// while an ask GRANT waits for a human (which withdraws it).
func (c *loadClient) vanish(id string, how int) error {
	nc, err := net.Dial("unix", c.sock)
	if err != nil {
		return c.fail("dial: %v", err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	switch how % 3 {
	case 0:
		_, err = nc.Write(withID(c.frames.auto, id))
	case 1:
		b := withID(c.frames.auto, id)
		_, err = nc.Write(b[:len(b)/2])
	case 2:
		if _, err = nc.Write(withID(c.frames.ask, id)); err != nil {
			break
		}
		// Wait until the request is queued, then leave.
		line, rerr := bufio.NewReader(nc).ReadBytes('\n')
		var f protocol.Frame
		if rerr != nil || json.Unmarshal(line, &f) != nil || f.Kind != protocol.KindEvent || f.Re != id {
			return c.fail("ask before vanishing: got %q, %v; want an EVENT", line, rerr)
		}
		c.stats.withdrawn.Add(1)
	}
	if err != nil {
		return c.fail("vanishing write: %v", err)
	}
	return nil
}

func (c *loadClient) run(seed uint64, n int, big []byte) error {
	nc, err := net.Dial("unix", c.sock)
	if err != nil {
		return c.fail("dial: %v", err)
	}
	defer nc.Close()
	c.nc, c.br = nc, bufio.NewReader(nc)
	rng := rand.New(rand.NewPCG(seed, 7))
	for j := 0; j < n; j++ {
		id := fmt.Sprintf("%s-%d", c.name, j)
		if loadOversized > 0 && j%(n/loadOversized) == n/loadOversized/2 {
			f, err := c.roundTrip(big, false)
			if err != nil {
				return err
			}
			if err := c.expectError(f, protocol.CodeBadFrame, ""); err != nil {
				return err
			}
		}
		var f *protocol.Frame
		switch kind := pickKind(rng.IntN(100)); kind {
		case loadAuto, loadSlow:
			if f, err = c.roundTrip(withID(c.frames.auto, id), kind == loadSlow); err == nil {
				err = c.expectGrant(f, id)
			}
		case loadDeny:
			if f, err = c.roundTrip(withID(c.frames.deny, id), false); err == nil {
				err = c.expectError(f, protocol.CodeForbidden, id)
			}
		case loadHello:
			f, err = c.roundTrip(withID(`{"parley":1,"id":"ID","verb":"HELLO"}`, id), false)
			if err == nil && (f.Kind != protocol.KindBrief || f.Re != id) {
				err = c.fail("HELLO answered %s re %q", f.Kind, f.Re)
			}
		case loadMalformed:
			m := malformedFrames[rng.IntN(len(malformedFrames))]
			re := ""
			line := m.line
			if m.re {
				re = id
				line = strings.Replace(line, `"id":"X"`, `"id":"`+id+`"`, 1)
			}
			if f, err = c.roundTrip([]byte(line+"\n"), false); err == nil {
				err = c.expectError(f, m.code, re)
			}
		case loadVanish:
			err = c.vanish(id, rng.IntN(3))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// closesWithoutGC checks that the daemon closes the connections of clients
// that leave, on every path, without help from the garbage collector: a
// socket the daemon forgot to close would otherwise be closed by its
// finalizer sooner or later, and a count of descriptors would not notice.
func closesWithoutGC(t *testing.T, sock string) {
	t.Helper()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	base := openFDs(t)
	hello := `{"parley":1,"id":"h","verb":"HELLO"}` + "\n"
	for _, send := range []string{
		hello,                         // answered, then the client leaves
		hello[:10],                    // leaves mid-frame
		"",                            // leaves without a word
		"{nope\n" + hello + hello[:5], // a bad frame, a good one, half of one
	} {
		for i := 0; i < 5; i++ {
			nc, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			nc.Write([]byte(send))
			if strings.Contains(send, "\n") {
				nc.SetReadDeadline(time.Now().Add(10 * time.Second))
				if _, err := bufio.NewReader(nc).ReadBytes('\n'); err != nil {
					t.Fatalf("no answer to %q: %v", send, err)
				}
			}
			nc.Close()
		}
	}
	waitFor(t, "the daemon to close connections its clients left", func() bool { return openFDs(t) <= base })
}

func heapInuse() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestLoadMixed runs 200 clients of loadRequests requests each against one
// daemon: grants issued and refused by policy, HELLOs, malformed and
// oversized frames, slow writers and clients that vanish mid-request
// (property 7). Every request on a live connection must get exactly the
// answer its kind calls for; afterwards the audit log verifies and holds
// every grant a client received and every withdrawn request, and the daemon
// holds no connection, goroutine, file descriptor, pending request or memory
// that the run left behind.
func TestLoadMixed(t *testing.T) {
	const clients = 200
	n := loadRequests
	if testing.Short() {
		n = min(n, 50)
	}
	var logMu sync.Mutex
	var logs []string
	h := newHarness(t, func(c *Config, o *Options) {
		pol, err := policies.Parse([]byte(loadPolicy), "load.toml")
		if err != nil {
			t.Fatal(err)
		}
		o.Policy = pol
		o.Logf = func(format string, args ...any) {
			logMu.Lock()
			logs = append(logs, fmt.Sprintf(format, args...))
			logMu.Unlock()
		}
	})
	principal := h.srv.Principal()
	frames := make([]loadFrames, clients)
	for i := range frames {
		frames[i] = makeLoadFrames(t, principal, newAgentKey(t))
	}
	big := []byte(`{"parley":1,"id":"big","verb":"HELLO","pad":"` + strings.Repeat("x", protocol.MaxFrame+10) + `"}` + "\n")

	runtime.GC()
	goroutines, fds, heap := runtime.NumGoroutine(), openFDs(t), heapInuse()

	// Sample the heap while the load runs, to bound its peak.
	var peak atomic.Uint64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if v := heapInuse(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-stopSampling:
				return
			case <-tick.C:
			}
		}
	}()

	start := time.Now()
	stats := &loadStats{}
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &loadClient{t: t, sock: h.sock, frames: frames[i], stats: stats, name: fmt.Sprintf("c%d", i)}
			errs <- c.run(uint64(i), n, big)
		}()
	}
	wg.Wait()
	close(stopSampling)
	<-sampled
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			failed++
			if failed <= 5 {
				t.Error(err)
			}
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d clients failed", failed, clients)
	}
	t.Logf("%d clients × %d requests: %d answered, %d grants, %d withdrawn, in %v; heap peak %d MiB",
		clients, n, stats.answered.Load(), len(stats.grants), stats.withdrawn.Load(), time.Since(start).Round(time.Millisecond), peak.Load()>>20)

	// Every connection is gone, and with it everything it held.
	waitFor(t, "connections to close", func() bool {
		h.srv.Server.mu.Lock()
		defer h.srv.Server.mu.Unlock()
		return len(h.srv.conns) == 0 && h.srv.nconns.Load() == 0
	})
	// Every slot and every byte of the frame budget is given back.
	if _, slots := h.srv.slots.held(0); slots != 0 {
		t.Errorf("%d connection slots still taken after every connection closed", slots)
	}
	if _, held := h.srv.frames.held(0); held != 0 {
		t.Errorf("%d bytes of the frame budget still held after every connection closed", held)
	}
	if p := h.srv.Pending(); len(p) != 0 {
		t.Errorf("%d requests still pending after every requester left", len(p))
	}
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() <= goroutines })
	waitFor(t, "file descriptors to close", func() bool { return openFDs(t) <= fds })
	closesWithoutGC(t, h.sock)
	runtime.GC()
	if after := heapInuse(); after > heap+16<<20 {
		t.Errorf("heap in use grew from %d to %d MiB over the run", heap>>20, after>>20)
	}
	// Frames over protocol.MaxFrame are dropped, never held whole, and nothing is
	// kept per request.
	if peak.Load() > loadPeakHeap {
		t.Errorf("heap in use peaked at %d MiB, over the bound of %d MiB", peak.Load()>>20, loadPeakHeap>>20)
	}

	// No error the test did not cause: the daemon logged only clients that
	// went away mid-frame.
	logMu.Lock()
	logged := append([]string(nil), logs...)
	logMu.Unlock()
	for _, l := range logged {
		if !strings.Contains(l, "unexpected EOF") && !strings.HasPrefix(l, "audit log head at ") {
			t.Errorf("daemon logged: %s", l)
		}
	}

	// The audit log verifies, and holds every grant any client received and
	// every request withdrawn by a client that left.
	// Withdrawals alike in all but their ids and times are folded into one
	// counted record, never dropped; a run of them still counting is
	// written by FlushFolds. A withdrawal is recorded once its handler
	// sees the client gone, which may come just after the client counted
	// it: the count is read again until it matches or a deadline passes.
	var recs []audit.Record
	withdrawn := 0
	countWithdrawn := func() bool {
		if err := h.srv.AuditLog().FlushFolds(); err != nil {
			t.Fatal(err)
		}
		recs = auditRecords(t, h)
		withdrawn = 0
		for _, r := range recs {
			if r.Kind == audit.KindWithdrawn {
				withdrawn++
				if r.Folded != nil {
					withdrawn += r.Folded.Count - 1
				}
			}
		}
		return int64(withdrawn) == stats.withdrawn.Load()
	}
	for deadline := time.Now().Add(10 * time.Second); !countWithdrawn() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond) // polling the log for late withdrawal records
	}
	issued := map[string]bool{}
	for _, r := range recs {
		switch r.Kind {
		case audit.KindIssue:
			issued[r.GrantID] = true
		case audit.KindWithdrawn, audit.KindDeny, audit.KindStart, audit.KindCheckpoint, audit.KindRequest, audit.KindDecide:
		default:
			t.Errorf("unexpected audit record %+v", r)
		}
	}
	for _, id := range stats.grants {
		if !issued[id] {
			t.Errorf("grant %s reached a client but is not in the audit log", id)
		}
	}
	if int64(withdrawn) != stats.withdrawn.Load() {
		t.Errorf("audit log holds %d withdrawn requests, clients left %d waiting", withdrawn, stats.withdrawn.Load())
	}
}
