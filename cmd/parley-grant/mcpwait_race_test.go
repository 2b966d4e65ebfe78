package main

import (
	"fmt"
	"testing"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// A call that returns while the request waits hands the client the
// request's id (parley_request_grant with wait 0). The client may call
// parley_wait with that id at once: the server must know it by then. Here a
// reader spins until the request's id is visible, as await's timer does,
// and looks the id up, as parley_wait does.
func TestWaitingIDKnownOnceVisible(t *testing.T) {
	var rs humanRequests
	for i := range 300 {
		id := fmt.Sprintf("r_test%04d", i)
		h := &humanRequest{evc: make(chan struct{}), done: make(chan struct{})}
		go rs.waiting(h, protocol.Event{Request: id, Code: "12"})
		for h.event() == nil {
		}
		if got := rs.get(id); got != h {
			t.Fatalf("request %s is visible to the call but not to parley_wait (round %d)", id, i)
		}
		<-h.evc
	}
}
