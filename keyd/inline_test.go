package keyd

import (
	"context"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
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
