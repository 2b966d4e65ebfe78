package keyd

import (
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// TestAttackWatchOutlivesApproverRole: an admin reloads the configuration
// to take the approver role from a user (TestReloadRemovesApproverFromOpenConnection
// holds this for PENDING on a connection opened before). A WATCH that user
// started before the reload must not go on streaming other agents'
// waiting requests, rendered whole, and the log's checkpoints.
func TestAttackWatchOutlivesApproverRole(t *testing.T) {
	h := newHarness(t)
	pend := make(chan protocol.PendingView, 8)
	watchDone := make(chan error, 1)
	watcher := h.client()
	go func() {
		watchDone <- watcher.Watch(ctxT(t), client.Feed{Pending: func(v protocol.PendingView) { pend <- v }})
	}()
	// The watch is live: a request made now reaches it.
	first := askGrant(t, h.client(), newAgentKey(t), grant.Can("mail.read"))
	select {
	case <-pend:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch never started")
	}
	_ = first
	// The admin takes the approver role away.
	cfg := *h.cfg
	cfg.Access = Access{AgentUsers: []string{me(t)}}
	h.srv.swap(&cfg, nil)
	a := askGrant(t, h.client(), newAgentKey(t), grant.Can("mail.send"))
	select {
	case v := <-pend:
		t.Errorf("after the reload took the approver role away, the WATCH still delivered request %s:\n%s", v.ID, v.Text)
	case err := <-watchDone:
		t.Logf("watch ended: %v", err)
	case <-time.After(2 * time.Second):
	}
	_ = a
}
