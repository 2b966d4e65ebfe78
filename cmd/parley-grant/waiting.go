package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"golang.org/x/term"
)

// countdown shows a request that waits for a human: the request, where it may
// be approved, and the match code the approver must enter. On a terminal a
// countdown to the approval timeout is redrawn in place, once a second, so
// that a wait of minutes does not look like a hang; on a pipe or a file the
// same facts are one line, written once, that scripts can read.
type countdown struct {
	w    io.Writer
	live bool // w is a terminal: redraw the countdown

	mu      sync.Mutex
	expires time.Time
	stop    chan struct{}
	stopped chan struct{}
}

// newCountdown shows waiting requests on stderr.
func newCountdown() *countdown {
	return &countdown{w: os.Stderr, live: term.IsTerminal(int(os.Stderr.Fd()))}
}

// show is the events callback of client.Grant and client.Consent.
func (wt *countdown) show(e protocol.Event) {
	where := strings.Join(e.Channels, ", ")
	if where == "" {
		where = "any channel"
	}
	if e.Strong {
		where += " (a strong channel is required)"
	}
	expires := time.Unix(e.Expires, 0)
	if !wt.live {
		fmt.Fprintf(wt.w, "parley-grant: waiting for approval of %s on %s until %s; match code: %s (the approver must enter this code)\n",
			e.Request, where, expires.Format("15:04:05"), e.Code)
		return
	}
	fmt.Fprintf(wt.w, "parley-grant: waiting for approval of %s on %s\n", e.Request, where)
	fmt.Fprintf(wt.w, "parley-grant: match code: \x1b[1m%s\x1b[0m  (the approver must enter this code)\n", e.Code)
	wt.mu.Lock()
	defer wt.mu.Unlock()
	wt.expires = expires
	if wt.stop == nil {
		wt.stop, wt.stopped = make(chan struct{}), make(chan struct{})
		go wt.run(wt.stop, wt.stopped)
	}
}

func (wt *countdown) run(stop <-chan struct{}, stopped chan<- struct{}) {
	defer close(stopped)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		wt.mu.Lock()
		left := time.Until(wt.expires).Round(time.Second)
		wt.mu.Unlock()
		if left < 0 {
			left = 0
		}
		fmt.Fprintf(wt.w, "\r\x1b[K  %d:%02d left to approve  (Ctrl-C withdraws the request)", int(left.Minutes()), int(left.Seconds())%60)
		select {
		case <-stop:
			fmt.Fprint(wt.w, "\r\x1b[K")
			return
		case <-t.C:
		}
	}
}

// done ends the countdown and clears its line. It is safe to call when
// nothing waited.
func (wt *countdown) done() {
	wt.mu.Lock()
	stop, stopped := wt.stop, wt.stopped
	wt.stop = nil
	wt.mu.Unlock()
	if stop != nil {
		close(stop)
		<-stopped
	}
}
