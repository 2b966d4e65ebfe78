package keyd

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/duration"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// scrubFast makes the daemon's scrub run every 50 ms, fast, over small
// segments.
func scrubFast(c *Config, o *Options) {
	c.Audit.ScrubInterval = duration.Value{Duration: 50 * time.Millisecond}
	c.Audit.ScrubRate = 1024
	o.AuditOptions.SegmentSize = 4 << 10
}

// editClosedSegment changes one byte of a record in the log's first closed
// segment, as someone who owns the daemon's user would: a record before
// the last checkpoint, which the fast start never reads.
func editClosedSegment(t *testing.T, state string) {
	t.Helper()
	segs, err := audit.Segments(filepath.Join(state, "audit.log"))
	if err != nil || len(segs) < 3 {
		t.Fatalf("%d segments, %v", len(segs), err)
	}
	p := segs[0].Path
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(b), `"verb":"GRANT"`)
	if i < 0 {
		t.Fatalf("no grant in %s", p)
	}
	b[i+9] = 'X'
	os.Chmod(p, 0o600)
	if err := os.WriteFile(p, b, 0o400); err != nil {
		t.Fatal(err)
	}
}

func autoGrant(c *client.Client, t *testing.T) error {
	_, err := c.Grant(ctxT(t), newAgentKey(t), []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find")}, nil)
	return err
}

// TestScrubDamageStopsIssuance: an attacker edits a record in a closed
// segment under the running daemon. Before issue 22 nothing noticed until
// someone ran audit verify; now the scrub finds it within a minute, every
// GRANT is refused with "unavailable" naming the damage, approvers hear of
// it on WATCH, a restart does not clear it, and issuance resumes only after
// an admin's acknowledgement.
func TestScrubDamageStopsIssuance(t *testing.T) {
	h := newHarness(t, scrubFast)
	c := h.client()
	for range 40 {
		if err := autoGrant(c, t); err != nil {
			t.Fatal(err)
		}
	}
	damage := make(chan protocol.AuditDamage, 8)
	go h.client().Watch(ctxT(t), client.Feed{AuditDamage: func(d protocol.AuditDamage) { damage <- d }})
	editClosedSegment(t, h.dir)
	start := time.Now()
	deadline := start.Add(time.Minute)
	for h.srv.AuditLog().Damage() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the scrub found no damage within a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("found after %s: %v", time.Since(start), h.srv.AuditLog().Damage())
	err := autoGrant(c, t)
	wantCode(t, err, protocol.CodeUnavailable)
	if !strings.Contains(err.Error(), "[chain]") || !strings.Contains(err.Error(), "audit acknowledge") {
		t.Errorf("refusal %v does not name the damage and the way out", err)
	}
	select {
	case d := <-damage:
		if d.Reason != string(audit.ReasonChain) || d.Cleared || d.Seq == 0 {
			t.Errorf("WATCH told %+v", d)
		}
	case <-time.After(10 * time.Second):
		t.Error("WATCH did not tell the approver")
	}
	if !strings.Contains(h.srv.AuditAlert(), "[chain]") {
		t.Errorf("phone page alert %q", h.srv.AuditAlert())
	}

	// A restart does not clear it: the damage file holds it from the
	// start on, before any scrub.
	h2 := h.restart(t)
	c = h2.client()
	wantCode(t, autoGrant(c, t), protocol.CodeUnavailable)
	d := h2.srv.AuditLog().Damage()
	if d == nil {
		t.Fatal("the restart cleared the damage")
	}

	// The admin acknowledges it (what parley-keyd audit acknowledge writes).
	b, _ := json.Marshal(audit.Acknowledgement{Damage: *d, Reason: "edited by the test", By: "root (uid 0)"})
	log := filepath.Join(h.dir, "audit.log")
	if err := os.WriteFile(audit.AcknowledgePath(log), b, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the acknowledgement", func() bool { return h2.srv.AuditLog().Damage() == nil })
	if err := autoGrant(c, t); err != nil {
		t.Fatalf("after the acknowledgement: %v", err)
	}
	var res audit.AcknowledgeResult
	waitFor(t, "the answer", func() bool {
		b, err := os.ReadFile(audit.AcknowledgeResultPath(log))
		return err == nil && json.Unmarshal(b, &res) == nil
	})
	if !res.OK {
		t.Errorf("answer %+v", res)
	}
	// The log verifies, past the acknowledged damage.
	rep, err := audit.Verify(log, audit.VerifyOptions{Key: h.key.Public().(ed25519.PublicKey)})
	if err != nil || len(rep.Acknowledged) != 1 || rep.Acknowledged[0].Seq != res.Seq {
		t.Errorf("verify after the acknowledgement: %v, %+v", err, rep)
	}
}

// TestWitnessRefusesTamperedLogAtStart runs a daemon with a witness file,
// stops it, tampers with the log each way the log alone cannot show, and
// starts it again: each start is refused with the stable reason, the
// witness's checkpoint and the log's head.
func TestWitnessRefusesTamperedLogAtStart(t *testing.T) {
	witness := filepath.Join(t.TempDir(), "checkpoints")
	withWitness := func(c *Config, o *Options) { c.Audit.WitnessFile = witness }
	h := newHarness(t, withWitness)
	state, key := h.dir, h.key
	c := h.client()
	for range 3 {
		if err := autoGrant(c, t); err != nil {
			t.Fatal(err)
		}
	}
	// An older copy, taken while the daemon was stopped.
	older0 := t.TempDir()
	h = h.restartWith(t, withWitness, func() {
		older := filepath.Join(older0, "audit.log")
		copyFile(t, filepath.Join(h.dir, "audit.log"), older)
	})
	c = h.client()
	for range 3 {
		if err := autoGrant(c, t); err != nil {
			t.Fatal(err)
		}
	}
	h.stop()
	if err := <-h.served; err != nil {
		t.Fatal(err)
	}
	h.served <- nil // for h's cleanup
	older := older0
	log := filepath.Join(state, "audit.log")
	orig, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(orig), "\n")
	lines = lines[:len(lines)-1]
	start := func(t *testing.T, key ed25519.PrivateKey) error {
		t.Helper()
		o := Options{Config: h.cfg, Policy: nil, Signer: key, State: state, Logf: t.Logf}
		o.Policy = h.srv.policy.Load()
		d, err := New(o)
		if err == nil {
			d.closeLog()
		}
		return err
	}
	_, attacker, _ := ed25519.GenerateKey(nil)
	tests := []struct {
		name   string
		tamper func(t *testing.T)
		reason audit.Reason
	}{
		{"cut", func(t *testing.T) { writeFile(t, log, strings.Join(lines[:len(lines)-3], "")) }, audit.ReasonTruncated},
		{"rolled-back", func(t *testing.T) { copyFile(t, filepath.Join(older, "audit.log"), log) }, audit.ReasonRollback},
		{"rewritten-under-another-key", func(t *testing.T) {
			os.Remove(log)
			l, err := audit.Options{Signer: attacker}.Open(log)
			if err != nil {
				t.Fatal(err)
			}
			l.Close()
		}, audit.ReasonForeignKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer writeFile(t, log, string(orig))
			tt.tamper(t)
			err := start(t, key)
			var ae *audit.Error
			if !errors.As(err, &ae) || ae.Reason != tt.reason {
				t.Fatalf("start: %v; want reason %s", err, tt.reason)
			}
			if !strings.Contains(err.Error(), "holds a checkpoint of record") || !strings.Contains(err.Error(), "the log's head is record") {
				t.Errorf("the refusal names neither the witness's checkpoint nor the log's head: %v", err)
			}
		})
	}
	if err := start(t, key); err != nil {
		t.Fatalf("the untouched log: %v", err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, to, string(b))
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

// restartWith stops h's daemon, runs between, and starts another on the same
// state folder with opts.
func (h *harness) restartWith(t *testing.T, opt harnessOpt, between func()) *harness {
	t.Helper()
	h.stop()
	select {
	case err := <-h.served:
		h.served <- err // for h's cleanup
	case <-time.After(15 * time.Second):
		t.Fatal("the daemon did not stop")
	}
	between()
	return newHarness(t, opt, func(c *Config, o *Options) { o.State, o.Signer = h.dir, h.key })
}

// segmentTampers change the log's first closed segment, or the segments,
// in each way the fast start does not read (issue 22), as someone who
// owns the daemon's user would, replacing files whole (as sed -i does).
var segmentTampers = []struct {
	name   string
	edit   func(t *testing.T, segs []string)
	reason audit.Reason
}{
	{"edited", func(t *testing.T, segs []string) {
		editLines(t, segs[0], func(l []string) []string {
			i := grantLine(t, l, 0)
			l[i] = strings.Replace(l[i], `"verb":"GRANT"`, `"verb":"GRANX"`, 1)
			return l
		})
	}, audit.ReasonChain},
	{"deleted", func(t *testing.T, segs []string) {
		editLines(t, segs[0], func(l []string) []string { i := grantLine(t, l, 1); return append(l[:i:i], l[i+1:]...) })
	}, audit.ReasonSeq},
	{"reordered", func(t *testing.T, segs []string) {
		editLines(t, segs[0], func(l []string) []string { i := grantLine(t, l, 0); l[i], l[i+1] = l[i+1], l[i]; return l })
	}, audit.ReasonSeq},
	{"duplicated", func(t *testing.T, segs []string) {
		editLines(t, segs[0], func(l []string) []string { i := grantLine(t, l, 0); return append(l[:i+1:i+1], l[i:]...) })
	}, audit.ReasonSeq},
	{"forged-record-interleaved", func(t *testing.T, segs []string) {
		editLines(t, segs[0], func(l []string) []string {
			i := grantLine(t, l, 0)
			forged := strings.Replace(l[i], `"verb":"GRANT"`, `"verb":"GRANT","message":"forged"`, 1)
			return append(l[:i+1:i+1], append([]string{forged}, l[i+1:]...)...)
		})
	}, audit.ReasonSeq},
	{"edited-chain-recomputed", func(t *testing.T, segs []string) {
		editLines(t, segs[0], func(l []string) []string {
			i := grantLine(t, l, 0)
			l[i] = strings.Replace(l[i], `"verb":"GRANT"`, `"verb":"GRANX"`, 1)
			for j := i + 1; j < len(l); j++ {
				sum := sha256.Sum256([]byte(strings.TrimSuffix(l[j-1], "\n")))
				k := strings.Index(l[j], `"prev":"`) + len(`"prev":"`)
				e := k + strings.IndexByte(l[j][k:], '"')
				l[j] = l[j][:k] + base64.RawURLEncoding.EncodeToString(sum[:]) + l[j][e:]
			}
			return l
		})
	}, audit.ReasonChain},
	{"segment-removed", func(t *testing.T, segs []string) {
		if err := os.Remove(segs[1]); err != nil {
			t.Fatal(err)
		}
	}, audit.ReasonSeq},
}

func grantLine(t *testing.T, lines []string, nth int) int {
	t.Helper()
	for i, l := range lines {
		if strings.Contains(l, `"verb":"GRANT"`) && i+1 < len(lines) {
			if nth == 0 {
				return i
			}
			nth--
		}
	}
	t.Fatal("no GRANT record in the segment")
	return -1
}

// editLines replaces the file at path with edit of its lines, through a
// temporary file and a rename.
func editLines(t *testing.T, path string, edit func([]string) []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	lines = lines[:len(lines)-1]
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(edit(lines), "")), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func closedSegments(t *testing.T, state string) []string {
	t.Helper()
	segs, err := audit.Segments(filepath.Join(state, "audit.log"))
	if err != nil || len(segs) < 4 {
		t.Fatalf("%d segments, %v", len(segs), err)
	}
	var out []string
	for _, s := range segs[:len(segs)-1] {
		out = append(out, s.Path)
	}
	return out
}

func waitDamage(t *testing.T, d *Daemon) *audit.Damage {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if dm := d.AuditLog().Damage(); dm != nil {
			return dm
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the scrub found no damage within a minute of the start")
	return nil
}

// TestScrubFindsEachKindUnderTheDaemon tampers in each way with a closed
// segment of a running daemon's log, and of a stopped one's before it
// starts again: the scrub finds it within a minute, with the stable reason,
// and GRANT is refused.
func TestScrubFindsEachKindUnderTheDaemon(t *testing.T) {
	for _, tk := range segmentTampers {
		t.Run("running/"+tk.name, func(t *testing.T) {
			h := newHarness(t, scrubFast)
			c := h.client()
			for range 40 {
				if err := autoGrant(c, t); err != nil {
					t.Fatal(err)
				}
			}
			tk.edit(t, closedSegments(t, h.dir))
			d := waitDamage(t, h.srv)
			if d.Reason != tk.reason {
				t.Errorf("reason %s, want %s: %v", d.Reason, tk.reason, d)
			}
			wantCode(t, autoGrant(c, t), protocol.CodeUnavailable)
		})
		t.Run("after-stop/"+tk.name, func(t *testing.T) {
			h := newHarness(t, scrubFast)
			c := h.client()
			for range 40 {
				if err := autoGrant(c, t); err != nil {
					t.Fatal(err)
				}
			}
			state := h.dir
			h = h.restartWith(t, scrubFast, func() { tk.edit(t, closedSegments(t, state)) })
			d := waitDamage(t, h.srv)
			if d.Reason != tk.reason {
				t.Errorf("reason %s, want %s: %v", d.Reason, tk.reason, d)
			}
			wantCode(t, autoGrant(h.client(), t), protocol.CodeUnavailable)
		})
	}
}

// TestScrubDamageDiscardsGrantDecidedMeanwhile: a grant waiting for a
// human when the scrub finds damage is not released when the human then
// approves it: signed, then discarded, and refused with unavailable.
func TestScrubDamageDiscardsGrantDecidedMeanwhile(t *testing.T) {
	h := newHarness(t, scrubFast)
	c := h.client()
	for range 40 {
		if err := autoGrant(c, t); err != nil {
			t.Fatal(err)
		}
	}
	a := askGrant(t, h.client(), newAgentKey(t), grant.Can("mail.read"))
	editClosedSegment(t, h.dir)
	waitDamage(t, h.srv)
	if err := h.client().Approve(ctxT(t), a.ev.Request, a.ev.Code, "terminal"); err != nil {
		t.Logf("approve: %v", err)
	}
	res, err := a.wait(t)
	wantCode(t, err, protocol.CodeUnavailable)
	if res != nil {
		t.Fatalf("a grant left after the scrub found damage: %+v", res)
	}
	found := false
	audit.Read(filepath.Join(h.dir, "audit.log"), audit.Filter{}, func(_ []byte, r *audit.Record) error {
		if r.RequestID == a.ev.Request && r.Kind == audit.KindDeny && strings.Contains(r.Message, "signed, then discarded") {
			found = true
		}
		return nil
	})
	if !found {
		t.Error("no record says the grant was signed, then discarded")
	}
}
