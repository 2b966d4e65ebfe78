package keyd

import (
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// approverOnly makes the test's user an approver and nothing else: a strong
// approver, who may unlock.
func (h *harness) approverOnly() {
	cfg := *h.cfg
	cfg.Access = Access{ApproverUsers: []string{me(h.t)}}
	h.srv.swap(&cfg, nil)
}

// TestLockWeakApproverCannotUnlock is the attack: an agent that runs as the
// human's own OS user (a dual-role, weak approver) lifts the lock the human
// set to stop it, and goes on getting grants.
func TestLockWeakApproverCannotUnlock(t *testing.T) {
	h := newHarness(t) // the test's user is agent and approver: weak
	c := h.client()
	if _, _, err := c.Lock(ctxT(t), "the agent is mailing everyone"); err != nil {
		t.Fatalf("a weak approver may lock (stopping is safe): %v", err)
	}
	_, err := c.Unlock(ctxT(t))
	wantCode(t, err, protocol.CodeForbidden)
	_, err = c.Grant(ctxT(t), newAgentKey(t), []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find")}, nil)
	wantCode(t, err, protocol.CodeLocked)
	if _, ok := h.srv.LockState(); !ok {
		t.Fatal("the lock was lifted")
	}
}

func TestLockRefusesEveryRequestAndWithdrawsWaiting(t *testing.T) {
	h := newHarness(t)
	c := h.client()
	waiting := askGrant(t, c, newAgentKey(t), grant.Can("mail.read"))

	v, msg, err := c.Lock(ctxT(t), "saw it\x1b[2J misbehave")
	if err != nil {
		t.Fatal(err)
	}
	if msg != "locked" || v == nil || !strings.Contains(v.By, me(t)) || v.Channel != "terminal" || strings.Contains(v.Reason, "\x1b") {
		t.Errorf("lock reply %q %+v", msg, v)
	}
	// The waiting request is withdrawn, with the code that says why.
	_, err = waiting.wait(t)
	wantCode(t, err, protocol.CodeLocked)
	if p := h.srv.Pending(); len(p) != 0 {
		t.Errorf("pending after lock = %v", p)
	}
	// Every new request is refused, even one policy would issue at once.
	_, err = c.Grant(ctxT(t), newAgentKey(t), []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find")}, nil)
	wantCode(t, err, protocol.CodeLocked)
	_, err = c.Explain(ctxT(t), pubOf(newAgentKey(t)), []grant.Caveat{grant.Can("calendar.find")})
	wantCode(t, err, protocol.CodeLocked)
	exp := time.Now().Unix() + 600
	prop, hash := proposalFor(t, "p_1", 4500, exp)
	_, err = c.Consent(ctxT(t), newAgentKey(t), "shop.example", consentFor(h.srv.Principal(), "p_1", hash, exp), prop, nil)
	wantCode(t, err, protocol.CodeLocked)
	// A second lock keeps the first.
	v2, msg2, err := c.Lock(ctxT(t), "again")
	if err != nil || msg2 != "already locked" || v2.At != v.At || v2.Reason != v.Reason {
		t.Errorf("second lock: %+v, %v; want the first %+v", v2, err, v)
	}
	// HELLO says so, to agents and approvers alike.
	m, err := c.Hello(ctxT(t))
	if err != nil || m.Locked == nil || m.Locked.By != v.By {
		t.Errorf("manifest lock = %+v, %v", m.Locked, err)
	}
	// The audit log holds the lock once (and the second LOCK, which
	// changed nothing), the withdrawn request and the two refused while
	// locked (every request has its record).
	var locks, withdrawn int
	for _, r := range auditRecords(t, h) {
		switch {
		case r.Kind == "lock" && r.Decision == "already locked":
		case r.Kind == "lock":
			locks++
			if r.DecidedBy == nil || r.DecidedBy.Approver != v.By || r.DecidedBy.Strength != "weak" {
				t.Errorf("lock record = %+v", r)
			}
		case r.Kind == "deny" && r.Decision == "locked":
			withdrawn++
		}
	}
	if locks != 1 || withdrawn != 3 {
		t.Errorf("audit: %d lock records, %d requests refused or withdrawn by the lock; want 1 and 3", locks, withdrawn)
	}

	// A strong approver lifts it, and requests are served again.
	h.approverOnly()
	if msg, err := c.Unlock(ctxT(t)); err != nil || msg != "unlocked" {
		t.Fatalf("unlock: %q, %v", msg, err)
	}
	if msg, err := c.Unlock(ctxT(t)); err != nil || msg != "it was not locked" {
		t.Errorf("second unlock: %q, %v", msg, err)
	}
	h.srv.swap(h.cfg, nil)
	if _, err := c.Grant(ctxT(t), newAgentKey(t), []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find")}, nil); err != nil {
		t.Errorf("grant after unlock: %v", err)
	}
	recs := auditRecords(t, h)
	if r := recs[len(recs)-2]; r.Kind != "unlock" || r.DecidedBy.Strength != "strong" {
		t.Errorf("unlock record = %+v", r)
	}
}

func TestLockAgentMayNotLock(t *testing.T) {
	h := newHarness(t, func(c *Config, o *Options) { c.Access = Access{AgentUsers: []string{me(t)}} })
	_, _, err := h.client().Lock(ctxT(t), "")
	wantCode(t, err, protocol.CodeForbidden)
	if !strings.Contains(err.Error(), "may not lock the daemon") {
		t.Errorf("refusal %q", err)
	}
	if _, ok := h.srv.LockState(); ok {
		t.Error("an agent locked the daemon")
	}
}

// restart stops h's daemon and starts another on the same state folder.
func (h *harness) restart(t *testing.T) *harness {
	t.Helper()
	h.stop()
	select {
	case err := <-h.served:
		h.served <- err // for h's cleanup
	case <-time.After(15 * time.Second):
		t.Fatal("the daemon did not stop")
	}
	// The same key: the audit log's checkpoints are signed with it.
	return newHarness(t, func(c *Config, o *Options) { o.State, o.Signer = h.dir, h.key })
}

func TestLockSurvivesRestart(t *testing.T) {
	h := newHarness(t)
	v, _, err := h.client().Lock(ctxT(t), "stop")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(h.dir, LockFileName))
	if err != nil {
		t.Fatalf("no lock file: %v", err)
	}
	var lf lockFile
	if err := json.Unmarshal(b, &lf); err != nil || lf.By != v.By || lf.At != v.At {
		t.Errorf("lock file %s", b)
	}

	h2 := h.restart(t)
	c := h2.client()
	_, err = c.Grant(ctxT(t), newAgentKey(t), []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find")}, nil)
	wantCode(t, err, protocol.CodeLocked)
	if !strings.Contains(err.Error(), "stop") {
		t.Errorf("the refusal does not carry the reason: %v", err)
	}
	h2.approverOnly()
	if _, err := c.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(h.dir, LockFileName)); !os.IsNotExist(err) {
		t.Errorf("the lock file is still there after unlock: %v", err)
	}
}

func TestLockFileDamagedStaysLocked(t *testing.T) {
	for _, content := range []string{"", "{", `{"by":"","at":0}`, "\x00\x01garbage"} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, LockFileName), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, func(c *Config, o *Options) { o.State = dir })
		_, err := h.client().Grant(ctxT(t), newAgentKey(t), []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find")}, nil)
		wantCode(t, err, protocol.CodeLocked)
		if !strings.Contains(err.Error(), "could not be read") {
			t.Errorf("lock file %q: refusal %v", content, err)
		}
	}
}

// TestLockRacesQueue: a request already past the lock check when the lock
// comes must not be queued for a human after the lock withdrew the others.
func TestLockRacesQueue(t *testing.T) {
	q := newQueue()
	q.setLocked(true)
	_, err := q.add(protocol.PendingView{ID: "r_x"}, "a", 0, 4, nil, nil)
	wantCode(t, err, protocol.CodeLocked)
	q.setLocked(false)
	if _, err := q.add(protocol.PendingView{ID: "r_y"}, "a", 0, 4, nil, nil); err != nil {
		t.Fatal(err)
	}
}

func pubOf(k ed25519.PrivateKey) string { return grant.FormatPublicKey(k.Public().(ed25519.PublicKey)) }
