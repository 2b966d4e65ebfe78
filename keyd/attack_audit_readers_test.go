package keyd

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// TestAttackAuditReadersPerUser: an approver's user (which may be an agent
// running as the human's own user, a weak approver) opens many AUDIT
// reads at once, each waiting for records that do not come or scanning
// every segment for a grant that is not there. Only maxAuditReads of them
// run at a time per uid; the rest are refused with "limit" and a retry,
// at once, and the slots come back when the reads end.
func TestAttackAuditReadersPerUser(t *testing.T) {
	h := newHarness(t)
	head := h.srv.AuditLog().Head().Seq
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const tries = 6 // more than maxAuditReads, fewer than the connection slots of one uid
	if maxAuditReads >= tries {
		t.Fatalf("the test needs more than %d readers", maxAuditReads)
	}
	results := make(chan error, tries)
	var clients []interface{ Close() error }
	for range tries {
		c := h.client()
		clients = append(clients, c)
		go func() {
			_, err := c.Audit(ctx, protocol.AuditQuery{From: head + 1000, Wait: true})
			results <- err
		}()
	}
	// Every read beyond the cap is refused at once; the others wait.
	for range tries - maxAuditReads {
		var err error
		select {
		case err = <-results:
		case <-time.After(10 * time.Second):
			t.Fatalf("no AUDIT beyond the cap was refused within 10 s: more than %d wait", maxAuditReads)
		}
		var e *protocol.Error
		if !errors.As(err, &e) || e.Code != protocol.CodeLimit || e.Retry == 0 {
			t.Fatalf("an AUDIT beyond the cap: %v, want a limit refusal with a retry", err)
		}
	}
	select {
	case err := <-results:
		t.Fatalf("more than %d AUDIT reads of one uid waited: one ended with %v", maxAuditReads, err)
	default:
	}
	// The waiting readers hang up; their slots come back.
	for _, c := range clients {
		c.Close()
	}
	waitFor(t, "the AUDIT slots to come back", func() bool { return h.srv.auditReads.inUse() == 0 })
	if _, err := h.client().Audit(ctxT(t), protocol.AuditQuery{From: head + 1000}); err != nil {
		t.Fatalf("an AUDIT after the others ended: %v", err)
	}
}

// inUse returns how many AUDIT requests are in progress.
func (a *auditReaders) inUse() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	total := 0
	for _, n := range a.n {
		total += n
	}
	return total
}
