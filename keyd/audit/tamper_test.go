package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
)

// tamperFixture writes a log as the daemon does in two runs, each ending
// with a stop checkpoint, with a file witness in another folder; older is a
// copy of the state folder after the first run.
type tamperFixture struct {
	dir, witness, older string
}

func newTamperFixture(t *testing.T) tamperFixture {
	t.Helper()
	fx := tamperFixture{dir: t.TempDir(), witness: filepath.Join(t.TempDir(), "checkpoints")}
	clock := newTestClock()
	o := signedOptions(clock)
	o.Witnesses = []Witness{FileWitness{Path: fx.witness}}
	path := filepath.Join(fx.dir, "audit.log")
	l := openWith(t, o, path)
	auditTestAppend(t, l, Record{Kind: KindStart, Message: "first run"})
	for _, rec := range auditTestRecords(6) {
		auditTestAppend(t, l, rec)
	}
	auditTestAppend(t, l, Record{Kind: KindStop, Message: "terminated"})
	mustClose(t, l)
	fx.older = copyDir(t, fx.dir)

	l = openWith(t, o, path)
	auditTestAppend(t, l, Record{Kind: KindStart, Message: "second run"})
	for _, rec := range auditTestRecords(4) {
		auditTestAppend(t, l, rec)
	}
	if _, err := l.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	for _, rec := range auditTestRecords(2) {
		auditTestAppend(t, l, rec)
	}
	auditTestAppend(t, l, Record{Kind: KindStop, Message: "terminated"})
	mustClose(t, l)
	return fx
}

// recompute rewrites seq and prev of every line from index from on, as
// someone who can write the file and knows the format would after an edit:
// the chain holds again. Checkpoint records get their prev recomputed too
// (their signed content cannot be).
func recompute(t testing.TB, lines []string, from int) []string {
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
		rec.Seq, rec.Prev = uint64(i+1), prev
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.Encode(&rec)
		out[i] = b.String()
		prev = lineHash(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
	}
	return out
}

func isCP(line string) bool { return isCheckpointLine([]byte(strings.TrimSuffix(line, "\n"))) }

// withoutCheckpoints drops the checkpoint records from index from on.
func withoutCheckpoints(lines []string, from int) []string {
	out := append([]string(nil), lines[:from]...)
	for _, l := range lines[from:] {
		if !isCP(l) {
			out = append(out, l)
		}
	}
	return out
}

func indexOf(t testing.TB, lines []string, substr string, nth int) int {
	t.Helper()
	for i, l := range lines {
		if strings.Contains(l, substr) {
			if nth == 0 {
				return i
			}
			nth--
		}
	}
	t.Fatalf("no line with %q", substr)
	return -1
}

// TestTamperDetected takes each way of tampering with the log that the
// chain alone cannot see (issue 12: all nine were accepted by audit verify
// and by the daemon at start) and shows that it is detected: by Verify
// given a checkpoint kept elsewhere (the witness's file), and by Open with
// that witness, always; by Verify and Open on their own where the log itself
// holds enough (a signed checkpoint after the change).
func TestTamperDetected(t *testing.T) {
	fx := newTamperFixture(t)
	path := filepath.Join(fx.dir, "audit.log")
	orig := fileLines(t, path)
	pub := testPub("daemon")

	tests := []struct {
		name string
		edit func(t *testing.T, dir string)
		// plain: detected without any outside checkpoint
		verifyPlain, openPlain bool
	}{
		{"edited-last-record", func(t *testing.T, dir string) {
			lines := append([]string(nil), orig...)
			i := len(lines) - 2 // the stop record; the last line is its checkpoint
			lines[i] = strings.Replace(lines[i], "terminated", "terminatex", 1)
			writeLines(t, filepath.Join(dir, "audit.log"), lines)
		}, true, true},
		{"edited-last-line-the-stop-checkpoint", func(t *testing.T, dir string) {
			lines := append([]string(nil), orig...)
			i := len(lines) - 1
			lines[i] = strings.Replace(lines[i], `"reason":"stop"`, `"reason":"open"`, 1)
			writeLines(t, filepath.Join(dir, "audit.log"), lines)
		}, true, true},
		{"appended-forgery", func(t *testing.T, dir string) {
			lines := append([]string(nil), orig...)
			last := strings.TrimSuffix(lines[len(lines)-1], "\n")
			forged := fmt.Sprintf(`{"seq":%d,"prev":"%s","time":"2030-01-02T03:05:00Z","kind":"issue","grant_id":"forged"}`+"\n", len(lines)+1, lineHash([]byte(last)))
			writeLines(t, filepath.Join(dir, "audit.log"), append(lines, forged))
		}, true, true},
		{"tail-cut-at-a-record-boundary", func(t *testing.T, dir string) {
			writeLines(t, filepath.Join(dir, "audit.log"), orig[:len(orig)-4])
		}, false, false},
		{"tail-cut-at-a-checkpoint", func(t *testing.T, dir string) {
			i := indexOf(t, orig, `"reason":"request"`, 0)
			writeLines(t, filepath.Join(dir, "audit.log"), orig[:i+1])
		}, false, false},
		{"chain-recomputed-after-an-edit", func(t *testing.T, dir string) {
			lines := append([]string(nil), orig...)
			i := indexOf(t, lines, `"grant_id":"g-3"`, 0)
			lines[i] = strings.Replace(lines[i], `"grant_id":"g-3"`, `"grant_id":"g-x"`, 1)
			writeLines(t, filepath.Join(dir, "audit.log"), recompute(t, lines, i+1))
		}, true, true},
		{"chain-recomputed-after-an-edit-checkpoints-dropped", func(t *testing.T, dir string) {
			lines := append([]string(nil), orig...)
			i := indexOf(t, lines, `"grant_id":"g-3"`, 1)
			lines[i] = strings.Replace(lines[i], `"grant_id":"g-3"`, `"grant_id":"g-x"`, 1)
			lines = withoutCheckpoints(lines, i)
			writeLines(t, filepath.Join(dir, "audit.log"), recompute(t, lines, i+1))
		}, false, false},
		{"chain-recomputed-after-a-delete", func(t *testing.T, dir string) {
			lines := append([]string(nil), orig...)
			i := indexOf(t, lines, `"grant_id":"g-2"`, 0)
			lines = append(lines[:i:i], lines[i+1:]...)
			writeLines(t, filepath.Join(dir, "audit.log"), recompute(t, lines, i))
		}, true, true},
		{"chain-recomputed-after-an-insert", func(t *testing.T, dir string) {
			lines := append([]string(nil), orig...)
			i := indexOf(t, lines, `"grant_id":"g-2"`, 1)
			ins := `{"seq":0,"prev":"","time":"2030-01-02T03:04:05.5Z","kind":"deny","message":"inserted"}` + "\n"
			lines = append(lines[:i:i], append([]string{ins}, lines[i:]...)...)
			writeLines(t, filepath.Join(dir, "audit.log"), recompute(t, lines, i))
		}, true, true},
		{"full-rewrite-without-checkpoints", func(t *testing.T, dir string) {
			var lines []string
			for _, l := range orig {
				if !isCP(l) {
					lines = append(lines, strings.ReplaceAll(l, `"decision":"allow"`, `"decision":"denyy"`))
				}
			}
			writeLines(t, filepath.Join(dir, "audit.log"), recompute(t, lines, 0))
		}, true, false},
		{"full-rewrite-signed-with-another-key", func(t *testing.T, dir string) {
			path := filepath.Join(dir, "audit.log")
			os.Remove(path)
			o := signedOptions(newTestClock())
			o.Signer = testKey("attacker")
			l := openWith(t, o, path)
			for _, rec := range auditTestRecords(3) {
				auditTestAppend(t, l, rec)
			}
			mustClose(t, l)
		}, true, true},
		{"rollback-to-an-older-copy", func(t *testing.T, dir string) {
			b, err := os.ReadFile(filepath.Join(fx.older, "audit.log"))
			if err != nil {
				t.Fatal(err)
			}
			writeLines(t, filepath.Join(dir, "audit.log"), []string{string(b)})
		}, false, false},
		{"empty-file", func(t *testing.T, dir string) {
			writeLines(t, filepath.Join(dir, "audit.log"), nil)
		}, true, true},
	}
	// A witness that falls behind is handed the latest checkpoint, not
	// every one; the stop checkpoint always reaches it.
	witnessed, err := checkpoint.ReadFile(fx.witness)
	if err != nil || len(witnessed) < 1 || witnessed[len(witnessed)-1].Reason != checkpoint.ReasonStop {
		t.Fatalf("witness holds %d checkpoints, %v", len(witnessed), err)
	}
	latest := witnessed[len(witnessed)-1:]

	t.Run("ok/untouched", func(t *testing.T) {
		rep, err := Verify(path, VerifyOptions{Key: pub, Checkpoints: witnessed})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.Stopped || rep.Unsigned != 0 || len(rep.Matched) != len(witnessed) {
			t.Errorf("report %+v", rep)
		}
		dir := copyDir(t, fx.dir)
		l := openWith(t, Options{Signer: testKey("daemon"), Witnesses: []Witness{FileWitness{fx.witness + ".copy"}}}, filepath.Join(dir, "audit.log"))
		mustClose(t, l)
	})
	for _, tt := range tests {
		t.Run("fail/"+tt.name, func(t *testing.T) {
			dir := copyDir(t, fx.dir)
			tt.edit(t, dir)
			p := filepath.Join(dir, "audit.log")

			_, err := Verify(p, VerifyOptions{Key: pub, Checkpoints: latest})
			var ae *Error
			if err == nil {
				t.Errorf("verify with the witness's latest checkpoint: accepted")
			} else if !errors.As(err, &ae) || ae.Reason != tamperReasons[tt.name] {
				t.Errorf("verify with the witness: %v; want reason %s", err, tamperReasons[tt.name])
			} else {
				t.Logf("verify with the witness: %v", err)
			}
			_, err = Verify(p, VerifyOptions{Key: pub})
			if (err != nil) != tt.verifyPlain {
				t.Errorf("verify alone: %v, want detected=%v", err, tt.verifyPlain)
			}
			if l, err := (Options{Signer: testKey("daemon"), Witnesses: []Witness{FileWitness{fx.witness}}}).Open(p); err == nil {
				l.Close()
				t.Errorf("open with the witness: accepted")
			} else {
				t.Logf("open with the witness: %v", err)
			}
			dir2 := copyDir(t, fx.dir)
			tt.edit(t, dir2)
			if l, err := (Options{Signer: testKey("daemon")}).Open(filepath.Join(dir2, "audit.log")); err == nil {
				l.Close()
				if tt.openPlain {
					t.Errorf("open alone: accepted")
				}
			} else if !tt.openPlain {
				t.Errorf("open alone refused (%v); the test expects it cannot see this", err)
			}
		})
	}
}

// tamperReasons are the stable reasons Verify gives, with the witness's
// latest checkpoint, for the cases of TestTamperDetected.
var tamperReasons = map[string]Reason{
	"edited-last-record":                                 ReasonChain,
	"edited-last-line-the-stop-checkpoint":               ReasonCheckpointSignature,
	"appended-forgery":                                   ReasonAfterStop,
	"tail-cut-at-a-record-boundary":                      ReasonTruncated,
	"tail-cut-at-a-checkpoint":                           ReasonTruncated,
	"chain-recomputed-after-an-edit":                     ReasonCheckpoint,
	"chain-recomputed-after-an-edit-checkpoints-dropped": ReasonTruncated,
	"chain-recomputed-after-a-delete":                    ReasonCheckpoint,
	"chain-recomputed-after-an-insert":                   ReasonCheckpoint,
	"full-rewrite-without-checkpoints":                   ReasonNoCheckpoint,
	"full-rewrite-signed-with-another-key":               ReasonForeignKey,
	"rollback-to-an-older-copy":                          ReasonRollback,
	"empty-file":                                         ReasonEmpty,
}

// TestTamperNamesTheRecord pins what Verify says for the tampering the
// checkpoints inside the log catch: the file and the line.
func TestTamperNamesTheRecord(t *testing.T) {
	fx := newTamperFixture(t)
	orig := fileLines(t, filepath.Join(fx.dir, "audit.log"))
	pub := testPub("daemon")
	n := len(orig)
	tests := []struct {
		name   string
		lines  func() []string
		line   int
		reason string
	}{
		{"edited-stop-record", func() []string {
			l := append([]string(nil), orig...)
			l[n-2] = strings.Replace(l[n-2], "terminated", "terminatex", 1)
			return l
		}, n, "prev does not match the hash of line"},
		{"appended-after-stop", func() []string {
			last := strings.TrimSuffix(orig[n-1], "\n")
			return append(append([]string(nil), orig...), fmt.Sprintf(`{"seq":%d,"prev":"%s","time":"2030-01-02T03:05:00Z","kind":"issue"}`+"\n", n+1, lineHash([]byte(last))))
		}, n + 1, "follows the stop checkpoint"},
		{"checkpoint-reencoded", func() []string {
			l := append([]string(nil), orig...)
			l[n-1] = strings.Replace(l[n-1], `"kind":"checkpoint",`, `"kind": "checkpoint",`, 1)
			return l
		}, n, "not written as the log writes it"},
	}
	for _, tt := range tests {
		t.Run("fail/"+tt.name, func(t *testing.T) {
			dir := copyDir(t, fx.dir)
			writeLines(t, filepath.Join(dir, "audit.log"), tt.lines())
			_, err := Verify(filepath.Join(dir, "audit.log"), VerifyOptions{Key: pub})
			var ae *Error
			if !errors.As(err, &ae) || ae.Line != tt.line || ae.File != "audit.log" || !strings.Contains(ae.Detail, tt.reason) {
				t.Errorf("got %v, want audit.log line %d: …%s…", err, tt.line, tt.reason)
			}
		})
	}
}
