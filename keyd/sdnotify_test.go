package keyd

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// notifySocket is what systemd listens on for sd_notify: a unixgram socket
// whose path goes into NOTIFY_SOCKET.
type notifySocket struct {
	t  *testing.T
	pc *net.UnixConn
}

func listenNotify(t *testing.T) *notifySocket {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	pc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return &notifySocket{t: t, pc: pc}
}

// next returns the next datagram whose first line starts with prefix,
// skipping others (watchdog pings, say), within 10 s.
func (n *notifySocket) next(prefix string) string {
	n.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]byte, 4096)
	for {
		n.pc.SetReadDeadline(deadline)
		k, err := n.pc.Read(buf)
		if err != nil {
			n.t.Fatalf("no %q from the daemon: %v", prefix, err)
		}
		if msg := string(buf[:k]); strings.HasPrefix(msg, prefix) {
			return msg
		}
	}
}

func TestSdNotifyReadyReloadStop(t *testing.T) {
	n := listenNotify(t)
	t.Setenv("WATCHDOG_USEC", "100000")
	t.Setenv("WATCHDOG_PID", "")
	h := newHarness(t)
	ready := n.next("READY=1")
	if !strings.Contains(ready, "\nSTATUS=serving on "+h.sock+"; principal "+h.srv.Principal()) {
		t.Errorf("ready message %q", ready)
	}
	// The watchdog pings while the daemon can take its locks...
	n.next("WATCHDOG=1")
	// ... and goes quiet when it cannot.
	h.srv.queue.mu.Lock()
	n.pc.SetReadDeadline(time.Now().Add(400 * time.Millisecond))
	quiet := true
	buf := make([]byte, 512)
	for {
		k, err := n.pc.Read(buf)
		if err != nil {
			break
		}
		if string(buf[:k]) == "WATCHDOG=1" {
			quiet = false
		}
	}
	h.srv.queue.mu.Unlock()
	if !quiet {
		t.Error("the watchdog pinged while the queue's lock was held")
	}
	n.next("WATCHDOG=1")

	// A reload is announced and ends with READY=1, even when refused.
	os.WriteFile(h.cfg.path, []byte(DefaultConfig(h.sock, me(t), me(t))), 0o640)
	os.WriteFile(h.cfg.PolicyPath(), []byte(testPolicy), 0o640)
	go h.srv.Reload()
	n.next("RELOADING=1")
	n.next("READY=1")

	h.stop()
	if msg := n.next("STOPPING=1"); !strings.Contains(msg, "STATUS=stopping") {
		t.Errorf("stopping message %q", msg)
	}
}

func TestSdNotifyStatusWhenLocked(t *testing.T) {
	h := newHarness(t)
	if _, _, err := h.client().Lock(ctxT(t), ""); err != nil {
		t.Fatal(err)
	}
	if s := h.srv.statusLine(h.sock); !strings.HasPrefix(s, "STATUS=LOCKED by ") {
		t.Errorf("status line %q", s)
	}
}
