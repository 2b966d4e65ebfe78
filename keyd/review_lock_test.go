package keyd

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// gateSigner holds the first grant signature after it is armed until the
// test opens the gate: a key service (transit, PKCS#11) that takes a while
// to answer. Checkpoint signatures pass.
type gateSigner struct {
	priv    ed25519.PrivateKey
	armed   atomic.Bool
	entered chan struct{}
	open    chan struct{}
}

func (g *gateSigner) Public() crypto.PublicKey { return g.priv.Public() }

func (g *gateSigner) Sign(_ io.Reader, msg []byte, _ crypto.SignerOpts) ([]byte, error) {
	if !bytes.HasPrefix(msg, []byte("parley-keyd audit checkpoint")) && g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.open
	}
	return ed25519.Sign(g.priv, msg), nil
}

// TestAttackLockDuringSigning: the human presses Stop (LOCK) and is told
// "locked: every request is refused" while a grant is being signed (a slow
// key service, or an approval given a moment before). The grant must not
// leave after the lock was reported: "nothing is signed until an approver
// unlocks it".
func TestAttackLockDuringSigning(t *testing.T) {
	g := &gateSigner{entered: make(chan struct{}), open: make(chan struct{})}
	h := newHarness(t, func(_ *Config, o *Options) {
		g.priv = o.Signer.(ed25519.PrivateKey)
		o.Signer = g
	})
	agent, human := h.client(), h.client()
	g.armed.Store(true)
	type out struct {
		r   *protocol.GrantResult
		err error
	}
	res := make(chan out, 1)
	go func() {
		r, err := agent.Grant(ctxT(t), newAgentKey(t), []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find")}, nil)
		res <- out{r, err}
	}()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the grant was never signed")
	}
	_, msg, err := human.Lock(ctxT(t), "the agent misbehaves")
	if err != nil || msg != "locked" {
		t.Fatalf("lock: %q, %v", msg, err)
	}
	close(g.open)
	o := <-res
	if o.err == nil {
		t.Errorf("a grant (%s) left the daemon after LOCK answered %q", o.r.GrantID, msg)
	} else {
		wantCode(t, o.err, protocol.CodeLocked)
	}
}

// TestAttackLockReasonCutMidRune: a reason longer than maxLockReason is cut
// at a byte count, which can split a UTF-8 sequence: the lock then holds
// invalid UTF-8, which every JSON encoder on its way (the reply, the lock
// file, the audit record, HELLO) turns into U+FFFD, and which a terminal
// or notification shows as garbage.
func TestAttackLockReasonCutMidRune(t *testing.T) {
	h := newHarness(t)
	reason := "a" + strings.Repeat("é", 150)
	if _, _, err := h.client().Lock(ctxT(t), reason); err != nil {
		t.Fatal(err)
	}
	st, ok := h.srv.LockState()
	if !ok {
		t.Fatal("not locked")
	}
	if !utf8.ValidString(st.Reason) {
		t.Errorf("the lock's reason is not valid UTF-8: %q", st.Reason[len(st.Reason)-8:])
	}
}
