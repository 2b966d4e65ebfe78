package keyd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

func TestShare(t *testing.T) {
	l := shareLimits{Total: 100, PerUser: 40, Approvers: 10, Fair: 20, Small: 4}
	type step struct {
		uid   uint32
		agent bool
		n     int64
		ok    bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"fail/over-per-user", []step{{1, true, 40, true}, {1, true, 1, false}, {1, false, 1, false}}},
		{"fail/big-agent-past-the-fair-reserve", []step{{1, true, 40, true}, {2, true, 30, true}, {2, true, 1, false}, {3, true, 5, false}}},
		{"ok/small-agent-uses-the-fair-reserve", []step{{1, true, 40, true}, {2, true, 30, true}, {3, true, 4, true}, {3, true, 1, false}, {4, true, 4, true}}},
		{"fail/agents-never-take-the-approvers-reserve", []step{{1, true, 40, true}, {2, true, 30, true},
			{3, true, 4, true}, {4, true, 4, true}, {5, true, 4, true}, {6, true, 4, true}, {7, true, 4, true}, {8, true, 1, false}}},
		{"ok/approver-takes-the-rest", []step{{1, true, 40, true}, {2, true, 30, true},
			{3, true, 4, true}, {4, true, 4, true}, {5, true, 4, true}, {6, true, 4, true}, {7, true, 4, true}, {9, false, 10, true}, {9, false, 1, false}}},
		{"ok/approver-may-use-any-slot", []step{{9, false, 40, true}, {8, false, 40, true}, {1, true, 20, true}, {1, true, 1, false}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var s share
			for i, st := range tc.steps {
				if got := s.take(l, st.uid, st.agent, st.n); got != st.ok {
					t.Fatalf("step %d: take(uid %d, agent %v, %d) = %v, want %v", i, st.uid, st.agent, st.n, got, st.ok)
				}
			}
			for _, st := range tc.steps {
				if st.ok {
					s.give(st.uid, st.agent, st.n)
				}
			}
			if s.total != 0 || s.agents != 0 || len(s.perUID) != 0 {
				t.Errorf("after giving everything back: total %d, agents %d, per uid %v", s.total, s.agents, s.perUID)
			}
		})
	}
}

// readFrame reads one frame from br within 10 s.
func readFrame(t *testing.T, nc net.Conn, br *bufio.Reader) *protocol.Frame {
	t.Helper()
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := br.ReadBytes('\n')
	if err != nil {
		t.Fatalf("no frame: %v", err)
	}
	var f protocol.Frame
	if err := json.Unmarshal(line, &f); err != nil {
		t.Fatalf("frame %q: %v", line, err)
	}
	return &f
}

// TestFrameBudget: frames that do not fit in the daemon's budget are
// dropped as they arrive and answered with "limit"; the connection stays
// usable, a small request on a connection of its own is still served, a
// frame over 1 MiB is still "bad_frame", and the budget is whole again once
// the connections holding it leave.
func TestFrameBudget(t *testing.T) {
	h := newHarness(t)
	uid := uint32(os.Getuid())
	// Every connection of this user holds almost 1 MiB of a frame that
	// never ends: past the user's share of the budget, the rest is dropped
	// as it arrives.
	half := append([]byte(`{"parley":1,"id":"h","verb":"HELLO","pad":"`), bytes.Repeat([]byte("x"), protocol.MaxFrame-100)...)
	n := int(frameBudgetPerUser/protocol.MaxFrame) + 4
	for i := 0; i < n; i++ {
		nc, err := net.Dial("unix", h.sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		if _, err := nc.Write(half); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the user's share of the budget to fill", func() bool {
		mine, _ := h.srv.frames.held(uid)
		return mine+protocol.MaxFrame > frameBudgetPerUser
	})
	if mine, total := h.srv.frames.held(uid); mine > frameBudgetPerUser || total > frameBudget {
		t.Fatalf("the budget holds %d bytes for the user, %d in all", mine, total)
	}

	nc, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	big := append(append([]byte(nil), half[:64<<10]...), `"}`+"\n"...)
	nc.Write(big)
	if f := readFrame(t, nc, br); f.Kind != protocol.KindError || f.Code != protocol.CodeLimit || !strings.Contains(f.Message, "unanswered frames") {
		t.Fatalf("a frame past the budget: %+v", f)
	}
	nc.Write([]byte(`{"parley":1,"id":"2","verb":"HELLO"}` + "\n"))
	if f := readFrame(t, nc, br); f.Kind != protocol.KindBrief || f.Re != "2" {
		t.Fatalf("HELLO after a dropped frame: %+v", f)
	}
	over := append(append([]byte(nil), half...), bytes.Repeat([]byte("y"), 200)...)
	nc.Write(append(over, `"}`+"\n"...))
	if f := readFrame(t, nc, br); f.Code != protocol.CodeBadFrame || !strings.Contains(f.Message, "larger than 1 MiB") {
		t.Fatalf("a frame over 1 MiB with the budget full: %+v", f)
	}
	// A grant on a connection of its own: a small frame fits in the
	// connection's own allowance.
	if _, err := h.client().Hello(ctxT(t)); err != nil {
		t.Fatalf("HELLO on a new connection: %v", err)
	}

	h.srv.Server.mu.Lock()
	for c := range h.srv.conns {
		c.nc.Close()
	}
	h.srv.Server.mu.Unlock()
	waitFor(t, "the budget to be given back", func() bool {
		_, total := h.srv.frames.held(uid)
		return total == 0
	})
}

// TestFrameTimeout: once a frame's first byte has arrived, the daemon waits
// at most the frame timeout in all for the rest; a frame that takes longer,
// half-sent or sent a byte at a time, is answered with a refusal that says
// so, and its connection is closed. A connection that sends nothing is not.
func TestFrameTimeout(t *testing.T) {
	h := newHarness(t, func(c *Config, o *Options) { c.FrameTimeout.Duration = 300 * time.Millisecond })
	idle, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	nc, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	br := bufio.NewReader(nc)
	nc.Write([]byte(`{"parley":1,"id":"1","ve`))
	f := readFrame(t, nc, br)
	if f.Kind != protocol.KindError || f.Code != protocol.CodeLimit || !strings.Contains(f.Message, "did not arrive within 300ms") {
		t.Fatalf("a half frame: %+v", f)
	}
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the connection stayed open after its frame timed out")
	}
	// A frame sent a byte at a time, each well within the timeout: the
	// waits add up, and it is cut off all the same.
	trickle, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer trickle.Close()
	go func() {
		frame := `{"parley":1,"id":"3","verb":"HELLO","pad":"` + strings.Repeat("x", 400) + `"}` + "\n"
		for i := range len(frame) {
			if _, err := trickle.Write([]byte{frame[i]}); err != nil {
				return
			}
			time.Sleep(50 * time.Millisecond) // the attack's pace
		}
	}()
	if f := readFrame(t, trickle, bufio.NewReader(trickle)); f.Code != protocol.CodeLimit || !strings.Contains(f.Message, "did not arrive within 300ms") {
		t.Fatalf("a frame sent a byte at a time: %+v", f)
	}
	// The idle connection is still served, well after the timeout.
	idle.Write([]byte(`{"parley":1,"id":"2","verb":"HELLO"}` + "\n"))
	if f := readFrame(t, idle, bufio.NewReader(idle)); f.Kind != protocol.KindBrief {
		t.Fatalf("HELLO on an idle connection: %+v", f)
	}
}
