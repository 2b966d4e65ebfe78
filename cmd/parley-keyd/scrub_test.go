package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/keystore"
)

// scrubState makes a state folder with a principal key and a signed audit
// log of several segments, and reports the head the daemon reported at its
// start (audit.head), as a daemon that ran would leave it.
func scrubState(t *testing.T, o audit.Options) (state string, l *audit.Log) {
	t.Helper()
	state = t.TempDir()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if err := keystore.WritePublicKey(state, pub); err != nil {
		t.Fatal(err)
	}
	o.Signer, o.SegmentSize, o.CheckpointEvery = key, 4<<10, 5
	l, err = o.Open(filepath.Join(state, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if _, err := l.Append(audit.Record{Kind: audit.KindStart, Message: "test"}); err != nil {
		t.Fatal(err)
	}
	h := l.Head()
	b, _ := json.Marshal(keyd.HeadReport{Seq: h.Seq, Hash: h.Hash, Event: "start", PID: os.Getpid(), Time: time.Now().UTC().Format(time.RFC3339)})
	if err := os.WriteFile(filepath.Join(state, keyd.HeadReportFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		if _, err := l.Append(audit.Record{Kind: audit.KindIssue, GrantID: fmt.Sprintf("g-%d", i), Message: strings.Repeat("x", 60)}); err != nil {
			t.Fatal(err)
		}
	}
	return state, l
}

func statusAudit(state string, running bool) (string, int) {
	var out bytes.Buffer
	d := &doctor{o: statusOptions{state: state}, out: &out, answered: running}
	d.checkAudit()
	return out.String(), d.failed
}

// TestStatusAuditAfterRotation: status failed on a clean log once the
// daemon had started a new segment, looking for the head it reported at
// its start in the active segment only ("record 2 is not in audit.log").
func TestStatusAuditAfterRotation(t *testing.T) {
	state, l := scrubState(t, audit.Options{})
	segs, _ := audit.Segments(l.Path())
	if len(segs) < 3 {
		t.Fatalf("%d segments; the test needs a rotated log", len(segs))
	}
	out, failed := statusAudit(state, true)
	if failed != 0 || !strings.Contains(out, "ok    audit") {
		t.Fatalf("status of a clean, rotated log:\n%s", out)
	}
}

// TestStatusNamesDamage: status fails naming the first bad record and its
// stable reason, whether the daemon's scrub recorded it or not.
func TestStatusNamesDamage(t *testing.T) {
	state, l := scrubState(t, audit.Options{})
	segs, _ := audit.Segments(l.Path())
	p := segs[0].Path
	b, _ := os.ReadFile(p)
	i := bytes.Index(b, []byte(`"grant_id":"g-1"`))
	b[i+14] = '9'
	os.Chmod(p, 0o600)
	os.WriteFile(p, b, 0o400)
	out, failed := statusAudit(state, true)
	if failed != 1 || !strings.Contains(out, "does not verify (chain)") || !strings.Contains(out, filepath.Base(p)+" line ") {
		t.Fatalf("status of a log edited before its last checkpoint:\n%s", out)
	}
	d := audit.Damage{Reason: audit.ReasonChain, File: filepath.Base(p), Line: 3, Seq: 3, Detail: "prev does not match", Found: "2030-01-01T00:00:00Z"}
	db, _ := json.Marshal(d)
	os.WriteFile(audit.DamagePath(l.Path()), db, 0o600)
	out, _ = statusAudit(state, true)
	if !strings.Contains(out, "fail  audit   the daemon's scrub found damage (chain, found 2030-01-01T00:00:00Z): audit log "+filepath.Base(p)+" line 3") {
		t.Fatalf("status with the scrub's damage file:\n%s", out)
	}
}

// TestAuditAcknowledge runs parley-keyd audit acknowledge against a running
// log whose scrub found damage: issuance resumes, the log says who and why,
// and status is clean again but for a warning naming the acknowledged
// damage.
func TestAuditAcknowledge(t *testing.T) {
	state, l := scrubState(t, audit.Options{ScrubInterval: time.Hour, ScrubRate: 1 << 30})
	var out bytes.Buffer
	if err := acknowledge(&out, l.Path(), "nothing happened", time.Second); err == nil || !strings.Contains(err.Error(), "nothing to acknowledge") {
		t.Fatalf("acknowledge without damage: %v", err)
	}
	segs, _ := audit.Segments(l.Path())
	p := segs[1].Path
	b, _ := os.ReadFile(p)
	i := bytes.Index(b, []byte(`"kind":"issue"`))
	b[i+9] = 'X'
	os.Chmod(p, 0o600)
	os.WriteFile(p, b, 0o400)
	l.ScrubNow()
	deadline := time.Now().Add(time.Minute)
	for l.Damage() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the scrub found nothing")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := acknowledge(&out, l.Path(), "test edit; copy kept", 30*time.Second); err != nil {
		t.Fatalf("acknowledge: %v", err)
	}
	if l.Damage() != nil || !strings.Contains(out.String(), "issuance resumes") {
		t.Fatalf("after acknowledge: %v\n%s", l.Damage(), out.String())
	}
	status, failed := statusAudit(state, true)
	if failed != 0 || !strings.Contains(status, "warn  audit   damage acknowledged in record") || !strings.Contains(status, "test edit; copy kept") {
		t.Fatalf("status after the acknowledgement:\n%s", status)
	}
}
