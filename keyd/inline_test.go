package keyd

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/client"
)

// TestInlineRequestLetsTheConnectionGoOn: the reader runs a lone request
// itself, and nobody reads the connection meanwhile. Attack: an agent that
// asks for a grant a human must approve, on the connection it uses for
// everything, must still be answered on that connection while the human
// has not decided, and its leaving must still withdraw the request.
func TestInlineRequestLetsTheConnectionGoOn(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	now := time.Now().Unix()
	auto := []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find"), grant.Exp(now + 600)}

	runs := h.srv.inlineRuns.Load()
	if _, err := c.Grant(ctxT(t), newAgentKey(t), auto, nil); err != nil {
		t.Fatal(err)
	}
	if h.srv.inlineRuns.Load() == runs {
		t.Fatal("a lone auto grant was not run by the connection's reader")
	}

	moves := h.srv.readMoves.Load()
	a := askGrant(t, c, newAgentKey(t), grant.Can("mail.read"))
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := c.Hello(ctx); err != nil {
			t.Fatalf("HELLO on the connection of a request waiting for a human: %v", err)
		}
		if _, err := c.Grant(ctx, newAgentKey(t), auto, nil); err != nil {
			t.Fatalf("GRANT on the connection of a request waiting for a human: %v", err)
		}
		cancel()
	}
	if h.srv.readMoves.Load() == moves {
		t.Fatal("reading did not move away from the waiting request: the connection was read by someone else all along")
	}
	if len(h.srv.Pending()) != 1 {
		t.Fatalf("pending = %v, want the one request", h.srv.Pending())
	}
	c.Close()
	waitFor(t, "the request to be withdrawn", func() bool { return len(h.srv.Pending()) == 0 })
	if _, err := a.wait(t); err == nil {
		t.Fatal("the withdrawn request was granted")
	}
}

// TestIdleConnectionOneGoroutine: an idle connection costs one goroutine
// (its reader), also after one of its requests waited for a human and
// reading moved away from the goroutine that ran it. (It cost two when the
// connection's first goroutine stayed parked until the connection ended.)
func TestIdleConnectionOneGoroutine(t *testing.T) {
	h := newHarness(t)
	human := h.client()
	if _, err := human.Hello(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	const n = 40
	var base int
	waitFor(t, "a steady goroutine count", func() bool {
		g := runtime.NumGoroutine()
		ok := g == base
		base = g
		time.Sleep(60 * time.Millisecond) // past spareFor, so a spare worker has ended
		return ok
	})
	conns := make([]*client.Client, n)
	for i := range conns {
		c, err := client.Dial(h.sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Hello(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	waitFor(t, "one goroutine per idle connection", func() bool { return runtime.NumGoroutine() <= base+n+2 })
	t.Logf("after HELLOs: %d goroutines for %d idle connections (base %d)", runtime.NumGoroutine()-base, n, base)
	for _, c := range conns {
		moves := h.srv.readMoves.Load()
		a := askGrant(t, c, newAgentKey(t), grant.Can("mail.read"))
		waitFor(t, "reading to move", func() bool { return h.srv.readMoves.Load() > moves })
		if err := human.Deny(ctxT(t), a.ev.Request, "terminal"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.wait(t); err == nil {
			t.Fatal("denied request granted")
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > base+n+2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling the goroutine count, with a deadline
	}
	if g := runtime.NumGoroutine() - base; g > n+2 {
		buf := make([]byte, 1<<20)
		st := string(buf[:runtime.Stack(buf, true)])
		t.Errorf("%d goroutines for %d idle connections after one asked request each; in serveConn: %d",
			g, n, strings.Count(st, "keyd.(*Server).serveConn("))
	}
}

// TestPipelinedBehindInline: a client sends a request that waits for
// a human, and while it runs inline sends the rest of its frames a byte at
// a time and then pipelined; every frame is answered, and leaving withdraws
// the waiting request.
func TestPipelinedBehindInline(t *testing.T) {
	h := newHarness(t)
	r := h.raw()
	g := grantFrame(t, h, "a1")
	r.send(g + "\n")
	ev := r.read()
	if ev.Kind != "EVENT" {
		t.Fatalf("first reply %+v", ev)
	}
	// Half a frame, then the rest, while the GRANT runs (inline or not).
	hello := `{"parley":1,"id":"h1","verb":"HELLO"}` + "\n"
	r.send(hello[:10])
	r.send(hello[10:] + strings.Replace(hello, "h1", "h2", 1) + strings.Replace(hello, "h1", "h3", 1))
	seen := map[string]bool{}
	for len(seen) < 3 {
		f := r.read()
		seen[f.Re] = true
	}
	if len(h.srv.Pending()) != 1 {
		t.Fatalf("pending = %v", h.srv.Pending())
	}
	r.nc.Close()
	waitFor(t, "the request to be withdrawn", func() bool { return len(h.srv.Pending()) == 0 })
	waitFor(t, "the connection to end", func() bool {
		h.srv.Server.mu.Lock()
		defer h.srv.Server.mu.Unlock()
		return len(h.srv.conns) == 0
	})
	if _, held := h.srv.frames.held(0); held != 0 {
		t.Errorf("%d frame bytes held after the connection ended", held)
	}
}

func grantFrame(t *testing.T, h *harness, id string) string {
	t.Helper()
	fr := makeLoadFrames(t, h.srv.Principal(), newAgentKey(t))
	return strings.TrimSuffix(string(withID(fr.ask, id)), "\n")
}
