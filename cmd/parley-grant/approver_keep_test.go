package main

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
	"github.com/parley-keyd/parley-keyd/notify/desktop"
)

// alarmScreen is a notification server that records what it is asked to
// show.
type alarmScreen struct{ shown chan desktop.Notification }

func (s alarmScreen) Notify(n desktop.Notification) (uint32, error) { s.shown <- n; return 1, nil }
func (alarmScreen) CloseNotification(uint32) error                  { return nil }
func (alarmScreen) Events() <-chan desktop.Event                    { return nil }
func (alarmScreen) Markup() bool                                    { return false }

type noDecider struct{}

func (noDecider) Approve(context.Context, string, string, string) error { return nil }
func (noDecider) Deny(context.Context, string, string) error            { return nil }

func makeCheckpoint(t *testing.T, key ed25519.PrivateKey, log string, seq uint64, hash string) *checkpoint.Checkpoint {
	t.Helper()
	cp := &checkpoint.Checkpoint{Log: log, Seq: seq, Hash: hash, Time: time.Now().UTC().Format(time.RFC3339Nano), Reason: checkpoint.ReasonCount}
	if err := checkpoint.Sign(cp, crypto.Signer(key)); err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestApproverKeepsCheckpoints: the desktop approver keeps the latest
// checkpoint of the daemon's audit log in the user's state folder, and a
// daemon that then shows an older one (its log rolled back) or another
// hash at the same seq (rewritten) raises an alarm on the desktop and leaves
// the kept checkpoint as it was.
func TestApproverKeepsCheckpoints(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	principal := grant.FormatPublicKey(key.Public().(ed25519.PublicKey))
	screen := alarmScreen{make(chan desktop.Notification, 4)}
	a := desktop.NewApprover(noDecider{}, screen, desktop.ApproverOptions{Logf: t.Logf})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.Run(ctx)
	keep := checkpointKeeper(principal, a)
	if keep == nil {
		t.Fatal("no keeper")
	}
	const logID = "AAAAAAAAAAAAAAAAAAAAAA"
	h := func(c byte) string { return strings.Repeat(string(c), 43) }
	keep(makeCheckpoint(t, key, logID, 10, h('a')))
	keep(makeCheckpoint(t, key, logID, 20, h('b')))
	path, _ := checkpointPath(principal)
	kept, err := checkpoint.Latest(path)
	if err != nil || kept == nil || kept.Seq != 20 {
		t.Fatalf("kept %+v, %v; want seq 20", kept, err)
	}
	for name, cp := range map[string]*checkpoint.Checkpoint{
		"rolled-back": makeCheckpoint(t, key, logID, 15, h('c')),
		"rewritten":   makeCheckpoint(t, key, logID, 20, h('d')),
	} {
		keep(cp)
		select {
		case n := <-screen.shown:
			if n.Urgency != desktop.UrgencyCritical || !strings.Contains(n.Body, "contradicts") {
				t.Errorf("%s: shown %+v", name, n)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no alarm", name)
		}
		if kept, _ := checkpoint.Latest(path); kept.Seq != 20 || kept.Hash != h('b') {
			t.Errorf("%s: the kept checkpoint became %+v", name, kept)
		}
	}
	// A checkpoint signed by another key is no checkpoint of this daemon.
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	keep(makeCheckpoint(t, other, logID, 30, h('e')))
	select {
	case <-screen.shown:
	case <-time.After(10 * time.Second):
		t.Fatal("a forged checkpoint raised no alarm")
	}
}
