package audit

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
)

// TestCommandWitness: a command gets every checkpoint on stdin and in its
// environment; one that fails is retried with the next checkpoint, and the
// stop checkpoint is delivered before Close returns.
func TestCommandWitness(t *testing.T) {
	wdir := t.TempDir()
	got := filepath.Join(wdir, "got")
	fail := filepath.Join(wdir, "fail")
	script := `test -e "$1" && exit 1; cat >> "$2"; echo "$PARLEY_CHECKPOINT_SEQ $PARLEY_CHECKPOINT_REASON" >> "$2.env"`
	o := signedOptions(newTestClock())
	o.Witnesses = []Witness{CommandWitness{Argv: []string{"/bin/sh", "-c", script, "witness", fail, got}}}
	path := filepath.Join(t.TempDir(), "audit.log")
	l := openWith(t, o, path)
	// A witness is handed the latest checkpoint: let it take the create
	// checkpoint before a later one can stand for it.
	waitFor(t, "the witness to take the create checkpoint", func() bool {
		l.wit.mu.Lock()
		defer l.wit.mu.Unlock()
		return l.wit.haveAny[0]
	})
	auditTestAppend(t, l, Record{Kind: KindStart})
	cp1, err := l.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the witness to take the checkpoint", func() bool { return l.wit.out(l) == cp1.Seq })
	os.WriteFile(fail, nil, 0o600)
	auditTestAppend(t, l, Record{Kind: KindIssue})
	cp2, _ := l.Checkpoint()
	waitFor(t, "the failed delivery", func() bool { return !l.wit.haveAny[0] || l.wit.out(l) == cp1.Seq })
	os.Remove(fail)
	mustClose(t, l)
	kept, err := checkpoint.ReadFile(got)
	if err != nil {
		t.Fatal(err)
	}
	last := kept[len(kept)-1]
	if last.Reason != checkpoint.ReasonStop || last.Seq <= cp2.Seq || kept[0].Reason != checkpoint.ReasonCreate || kept[1].Seq != cp1.Seq {
		for _, cp := range kept {
			t.Logf("kept %s", cp.Marshal())
		}
		t.Errorf("witness kept %d checkpoints; want create, the first requested one, then (after the failure) stop", len(kept))
	}
	for _, cp := range kept {
		if err := cp.Verify(testPub("daemon")); err != nil {
			t.Error(err)
		}
	}
	env, _ := os.ReadFile(got + ".env")
	if !strings.Contains(string(env), strconv.FormatUint(last.Seq, 10)+" stop\n") {
		t.Errorf("environment seen: %q", env)
	}
}

// TestSubscribe: a subscriber gets the checkpoints; one that does not read
// gets the latest when it does; the channel closes with the log.
func TestSubscribe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l := openWith(t, signedOptions(newTestClock()), path)
	ch, cancel := l.Subscribe()
	defer cancel()
	var last *checkpoint.Checkpoint
	for range 3 {
		auditTestAppend(t, l, Record{Kind: KindIssue})
		cp, err := l.Checkpoint()
		if err != nil {
			t.Fatal(err)
		}
		last = cp
	}
	if got := <-ch; *got != *last {
		t.Errorf("subscriber got %+v, want the latest %+v", got, last)
	}
	mustClose(t, l)
	stop := <-ch
	if stop == nil || stop.Reason != checkpoint.ReasonStop {
		t.Errorf("after Close: %+v", stop)
	}
	if _, ok := <-ch; ok {
		t.Error("channel not closed with the log")
	}
	if err := checkpoint.Consistent(last, stop); err != nil {
		t.Error(err)
	}
}

func TestFileWitnessLatest(t *testing.T) {
	w := FileWitness{Path: filepath.Join(t.TempDir(), "cps")}
	if cp, err := w.Latest(t.Context()); cp != nil || err != nil {
		t.Fatalf("no file: %v, %v", cp, err)
	}
	a, b := testCheckpoint(t), testCheckpoint(t)
	b.Seq++
	signCheckpoint(b, testKey("daemon"))
	w.Witness(t.Context(), a)
	w.Witness(t.Context(), b)
	os.WriteFile(w.Path+".2", append(append(a.Marshal(), '\n'), "\n\n"...), 0o600)
	if cp, err := w.Latest(t.Context()); err != nil || *cp != *b {
		t.Errorf("Latest = %+v, %v", cp, err)
	}
	if cp, err := checkpoint.Latest(w.Path + ".2"); err != nil || *cp != *a {
		t.Errorf("Latest with blank lines = %+v, %v", cp, err)
	}
	os.WriteFile(w.Path, []byte("garbage\n"), 0o600)
	if _, err := w.Latest(t.Context()); err == nil {
		t.Error("garbage read as a checkpoint")
	}
}

// TestKeeper: an approver keeping the latest checkpoint notices a daemon
// that shows it a rolled-back or rewritten log, and keeps what it had.
func TestKeeper(t *testing.T) {
	k := checkpoint.Keeper{Path: filepath.Join(t.TempDir(), "latest")}
	pub := testPub("daemon")
	a := testCheckpoint(t)
	if err := k.Keep(a, pub); err != nil {
		t.Fatal(err)
	}
	b := *a
	b.Seq, b.Hash = a.Seq+5, lineHash([]byte("later"))
	signCheckpoint(&b, testKey("daemon"))
	if err := k.Keep(&b, pub); err != nil {
		t.Fatal(err)
	}
	for name, cp := range map[string]*checkpoint.Checkpoint{"older": a, "forged": func() *checkpoint.Checkpoint {
		c := b
		c.Seq++
		return &c
	}(), "rewritten": func() *checkpoint.Checkpoint {
		c := b
		c.Hash = lineHash([]byte("other"))
		signCheckpoint(&c, testKey("daemon"))
		return &c
	}(), "other-key": func() *checkpoint.Checkpoint {
		c := b
		c.Seq++
		signCheckpoint(&c, testKey("attacker"))
		return &c
	}()} {
		if err := k.Keep(cp, pub); !errors.Is(err, checkpoint.ErrCheckpoint) {
			t.Errorf("%s: Keep = %v", name, err)
		}
	}
	if got, _ := k.Latest(); *got != b {
		t.Errorf("kept %+v, want %+v", got, b)
	}
}
