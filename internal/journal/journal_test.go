package journal

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/journaltest"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestStderr(t *testing.T) {
	var out syncBuffer
	l := New(Options{NoJournal: true, Stderr: &out, Identifier: "parley-keyd"})
	l.Send(Entry{Priority: Info, Message: "started", Fields: map[string]string{"PARLEY_X": "1"}})
	l.Send(Entry{Priority: Crit, Message: "audit log gone\nsecond line"})
	l.Close()
	want := "parley-keyd: started\nparley-keyd: crit: audit log gone\\nsecond line\n"
	if out.String() != want {
		t.Errorf("stderr:\n%q\nwant\n%q", out.String(), want)
	}
	if l.Journal() {
		t.Error("NoJournal logger says it writes to the journal")
	}
}

// TestFloodFolds: an agent that makes the daemon log the same thing in a
// loop costs PerKey lines a window and one count, not a line each (issue
// 10); nothing is dropped without a count.
func TestFloodFolds(t *testing.T) {
	var out syncBuffer
	l := New(Options{NoJournal: true, Stderr: &out, Window: 100 * time.Millisecond, PerKey: 5, Total: 50})
	for i := range 1000 {
		l.Logf(Warning, "refused request %d from uid %d", i, 1000)
	}
	l.Printf("another message")
	waitFor(t, "the count line", func() bool { return strings.Contains(out.String(), "995 more") })
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 7 {
		t.Errorf("%d lines for 1001 entries:\n%s", len(lines), out.String())
	}
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "parley-keyd: warning: 995 more entries of this kind") || !strings.HasSuffix(last, "refused request 999 from uid 1000 [folded: 995]") {
		t.Errorf("count line %q", last)
	}
	// Many keys: the total budget holds; each key's excess is counted.
	out.b.Reset()
	for i := range 200 {
		l.Send(Entry{Priority: Info, Message: fmt.Sprintf("key %d", i)})
	}
	l.Close()
	text := out.String()
	if n := strings.Count(text, "\n"); n != 200 {
		t.Errorf("%d lines", n)
	}
	if strings.Count(text, "more entries like this one") != 150 {
		t.Errorf("want 150 count lines:\n%s", text)
	}
	// Always goes through over budget.
	out.b.Reset()
	l = New(Options{NoJournal: true, Stderr: &out, PerKey: 1, Total: 1})
	for range 3 {
		l.Send(Entry{Priority: Notice, Message: "checkpoint", Always: true})
	}
	if n := strings.Count(out.String(), "checkpoint\n"); n != 3 {
		t.Errorf("%d of 3 Always entries written", n)
	}
	l.Close()
}

func TestFieldName(t *testing.T) {
	for in, want := range map[string]string{
		"PARLEY_AUDIT_SEQ": "PARLEY_AUDIT_SEQ",
		"parley-audit.seq": "PARLEY_AUDIT_SEQ",
		"_PID":             "PID",
		"9LIVES":           "LIVES",
		"":                 "PARLEY_FIELD",
		"é":                "PARLEY_FIELD",
	} {
		if got := FieldName(in); got != want {
			t.Errorf("FieldName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestRealJournal runs systemd-journald in a private mount namespace with
// its own /run/systemd/journal, has a Logger write to it, and reads the
// entries back with journalctl: priorities, fields, a value with a newline
// (the journal's binary field form) and the count of a flood.
func TestRealJournal(t *testing.T) {
	if journaltest.InHelper() {
		return
	}
	journaltest.Run(t, "TestJournalHelper")
}

// TestJournalHelper runs inside the private mount namespace.
func TestJournalHelper(t *testing.T) {
	if !journaltest.InHelper() {
		t.Skip("helper process only")
	}
	dir := journaltest.Start(t)
	l := New(Options{Identifier: "parley-keyd-test", Window: 200 * time.Millisecond, PerKey: 3})
	if !l.Journal() {
		t.Fatalf("the logger does not see the journal")
	}
	l.Send(Entry{Priority: Crit, Message: "audit log vanished", Fields: map[string]string{
		"PARLEY_AUDIT_SEQ": "42", "PARLEY_AUDIT_RECORD": `{"seq":42,"kind":"issue"}`, "PARLEY_NOTE": "two\nlines"}})
	for i := range 50 {
		l.Logf(Warning, "refused %d", i)
	}
	l.Close()

	entries := journaltest.Entries(t, dir, 5, "SYSLOG_IDENTIFIER=parley-keyd-test")
	if len(entries) != 5 {
		t.Fatalf("%d entries: %v", len(entries), entries)
	}
	first := entries[0]
	if first["MESSAGE"] != "audit log vanished" || first["PRIORITY"] != "2" || first["PARLEY_AUDIT_SEQ"] != "42" ||
		first["PARLEY_AUDIT_RECORD"] != `{"seq":42,"kind":"issue"}` || first["_PID"] != fmt.Sprint(os.Getpid()) {
		t.Errorf("first entry %v", first)
	}
	if first["PARLEY_NOTE"] != "two\nlines" {
		t.Errorf("multi-line field %#v", first["PARLEY_NOTE"])
	}
	last := entries[4]
	if last["PARLEY_FOLDED"] != "47" || last["PRIORITY"] != "4" || !strings.Contains(fmt.Sprint(last["MESSAGE"]), "refused 49") {
		t.Errorf("count entry %v", last)
	}
	t.Logf("journald wrote %d entries to %s; the count entry: %v", len(entries), dir, last["MESSAGE"])
}
