package audit

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
)

// forge rewrites lines from index from on as an attacker who holds the
// daemon's key (the file key) would after an edit: seq and prev recomputed,
// and every checkpoint signed again over the new chain. The log verifies on
// its own; only a checkpoint kept elsewhere contradicts it.
func forge(t testing.TB, lines []string, from int, key ed25519.PrivateKey) []string {
	t.Helper()
	out := append([]string(nil), lines...)
	prev := ""
	if from > 0 {
		prev = lineHash([]byte(strings.TrimSuffix(out[from-1], "\n")))
	}
	for i := from; i < len(out); i++ {
		var rec Record
		if err := json.Unmarshal([]byte(out[i]), &rec); err != nil {
			t.Fatal(err)
		}
		seq := uint64(i + 1)
		var line []byte
		if rec.Checkpoint != nil {
			cp := *rec.Checkpoint
			cp.Seq, cp.Hash = seq-1, prev
			if err := signCheckpoint(&cp, key); err != nil {
				t.Fatal(err)
			}
			line = checkpointLine(seq, &cp)
		} else {
			rec.Seq, rec.Prev = seq, prev
			b, err := json.Marshal(&rec)
			if err != nil {
				t.Fatal(err)
			}
			line = b
		}
		out[i] = string(line) + "\n"
		prev = lineHash(line)
	}
	return out
}

// TestWitnessCheckedAtStart starts a log with a file witness, tampers with
// it each way the log alone cannot show, and opens it again: each is
// refused, with the stable reason, the witness's checkpoint and the log's
// head in the message. Attack (issue 22): a log rewritten and signed again
// with the daemon's own key was served, because the start-up check skipped
// the witness's latest checkpoint when it covered the record just before
// the log's last checkpoint.
func TestWitnessCheckedAtStart(t *testing.T) {
	fx := newTamperFixture(t)
	orig := fileLines(t, filepath.Join(fx.dir, "audit.log"))
	witnessed, err := checkpoint.ReadFile(fx.witness)
	if err != nil || len(witnessed) < 3 {
		t.Fatalf("witness: %d checkpoints, %v", len(witnessed), err)
	}
	latest := witnessed[len(witnessed)-1]
	// A witness that missed the last checkpoints: it holds one of the
	// first run only, far before the part of the log read at start.
	older := filepath.Join(t.TempDir(), "older-witness")
	if err := os.WriteFile(older, append(witnessed[1].Marshal(), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	edit := func(lines []string, substr string) ([]string, int) {
		out := append([]string(nil), lines...)
		i := indexOf(t, out, substr, 0)
		out[i] = strings.Replace(out[i], substr, substr[:len(substr)-2]+`x"`, 1)
		return out, i
	}
	tests := []struct {
		name    string
		witness string
		tamper  func(t *testing.T, path string)
		reason  Reason
		cp      *checkpoint.Checkpoint
	}{
		{"cut-below-the-witness", fx.witness, func(t *testing.T, path string) {
			writeLines(t, path, orig[:len(orig)-4])
		}, ReasonTruncated, latest},
		{"cut-below-and-signed-again", fx.witness, func(t *testing.T, path string) {
			lines := orig[:len(orig)-4]
			lines = append(lines, orig[len(orig)-1]) // a stop checkpoint, signed again below
			writeLines(t, path, forge(t, lines, len(lines)-1, testKey("daemon")))
		}, ReasonRollback, latest},
		{"rolled-back", fx.witness, func(t *testing.T, path string) {
			b, err := os.ReadFile(filepath.Join(fx.older, "audit.log"))
			if err != nil {
				t.Fatal(err)
			}
			writeLines(t, path, []string{string(b)})
		}, ReasonRollback, latest},
		{"rewritten-under-another-key", fx.witness, func(t *testing.T, path string) {
			lines, i := edit(orig, `"grant_id":"g-2"`)
			writeLines(t, path, forge(t, lines, i+1, testKey("attacker")))
		}, ReasonForeignKey, latest},
		{"rewritten-and-signed-again-with-the-daemon-key", fx.witness, func(t *testing.T, path string) {
			lines, i := edit(orig, `"grant_id":"g-2"`)
			writeLines(t, path, forge(t, lines, i+1, testKey("daemon")))
		}, ReasonRewritten, latest},
		{"rewritten-before-an-older-witness-checkpoint", older, func(t *testing.T, path string) {
			lines, i := edit(orig, `"grant_id":"g-2"`)
			writeLines(t, path, forge(t, lines, i+1, testKey("daemon")))
		}, ReasonRewritten, witnessed[1]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyDir(t, fx.dir)
			path := filepath.Join(dir, "audit.log")
			tt.tamper(t, path)
			// The log on its own opens (the fast start cannot tell) …
			if tt.reason != ReasonForeignKey {
				probe := copyDir(t, dir)
				l, err := (Options{Signer: testKey("daemon")}).Open(filepath.Join(probe, "audit.log"))
				if err != nil {
					t.Fatalf("the tampered log does not open even without the witness (%v): the test tampers wrongly", err)
				}
				l.Close()
			}
			// … and with the witness it does not.
			l, err := (Options{Signer: testKey("daemon"), Witnesses: []Witness{FileWitness{tt.witness}}}).Open(path)
			if err == nil {
				l.Close()
				t.Fatal("opened despite the witness")
			}
			var ae *Error
			if !errors.As(err, &ae) || ae.Reason != tt.reason {
				t.Fatalf("got %v, want an *Error of reason %s", err, tt.reason)
			}
			msg := err.Error()
			for _, want := range []string{
				fmt.Sprintf("holds a checkpoint of record %d, hash %s", tt.cp.Seq, tt.cp.Hash),
				"the log's head is record",
			} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q lacks %q", msg, want)
				}
			}
			t.Log(msg)
		})
	}
}
