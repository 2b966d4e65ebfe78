package audit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/journal"
	"github.com/parley-keyd/parley-keyd/internal/testkit/journaltest"
	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
)

// TestJournalEntries: against a real journald, every record whatever its
// kind is an entry with its seq, kind, hash and line; every checkpoint is an
// entry from which Verify can check the log; a log that vanishes under the
// daemon is an entry at priority crit.
func TestJournalEntries(t *testing.T) {
	if journaltest.InHelper() {
		return
	}
	journaltest.Run(t, "TestJournalEntriesHelper")
}

func TestJournalEntriesHelper(t *testing.T) {
	if !journaltest.InHelper() {
		t.Skip("helper process only")
	}
	dir := journaltest.Start(t)
	j := journal.New(journal.Options{Identifier: "parley-keyd-audit-test"})
	if !j.Journal() {
		t.Fatal("no journal")
	}
	path := filepath.Join(t.TempDir(), "audit.log")
	o := signedOptions(newTestClock())
	o.Journal = j
	l := openWith(t, o, path)
	for _, kind := range []string{KindStart, KindIssue, KindDeny, KindTimeout, KindWithdrawn, KindError, KindPolicyReload, KindConsent} {
		auditTestAppend(t, l, Record{Kind: kind, RequestID: "r-" + kind, GrantID: "g-" + kind})
	}
	auditTestAppend(t, l, Record{Kind: KindRequest, RequestID: "r-request", Verb: "GRANT", Decision: "issued"})
	auditTestAppend(t, l, Record{Kind: KindLock})
	if _, err := l.Checkpoint(); err != nil {
		t.Fatal(err)
	}
	auditTestAppend(t, l, Record{Kind: KindStop})
	os.Rename(path, path+".moved")
	if _, err := l.Append(Record{Kind: KindIssue}); err == nil {
		t.Fatal("append to a moved log succeeded")
	}
	os.Rename(path+".moved", path)
	mustClose(t, l)
	j.Close()

	lines := fileLines(t, path)
	entries := journaltest.Entries(t, dir, len(lines), "MESSAGE_ID="+MessageIDRecord, "+", "MESSAGE_ID="+MessageIDCheckpoint)
	if len(entries) != len(lines) {
		t.Fatalf("%d records in the log, %d in the journal", len(lines), len(entries))
	}
	var cps []*checkpoint.Checkpoint
	for i, e := range entries {
		line := strings.TrimSuffix(lines[i], "\n")
		if e["PARLEY_AUDIT_SEQ"] != fmt.Sprint(i+1) || e["PARLEY_AUDIT_RECORD"] != line || e["PARLEY_AUDIT_HASH"] != lineHash([]byte(line)) {
			t.Errorf("entry %d: %v\nline %s", i, e, line)
		}
		switch e["PARLEY_AUDIT_KIND"] {
		case KindRequest:
			if e["PARLEY_VERB"] != "GRANT" || e["PARLEY_DECISION"] != "issued" || e["PRIORITY"] != "6" {
				t.Errorf("a request's entry does not name its verb and decision at info: %v", e)
			}
		case KindLock:
			if e["PRIORITY"] != "4" {
				t.Errorf("a lock's entry is not a warning: %v", e)
			}
		}
		if cp, ok := e["PARLEY_CHECKPOINT"].(string); ok {
			c, err := checkpoint.Parse([]byte(cp))
			if err != nil {
				t.Fatal(err)
			}
			cps = append(cps, c)
		}
	}
	if len(cps) != 3 { // create, request, stop
		t.Errorf("%d checkpoints in the journal", len(cps))
	}
	if _, err := Verify(path, VerifyOptions{Key: testPub("daemon"), Checkpoints: cps}); err != nil {
		t.Errorf("verify against the journal's checkpoints: %v", err)
	}
	// The command docs/audit.md gives to take them out of the journal.
	out, err := exec.Command("journalctl", "--directory", dir, "-t", "parley-keyd-audit-test", "MESSAGE_ID="+MessageIDCheckpoint,
		"-o", "cat", "--output-fields=PARLEY_CHECKPOINT").Output()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "checkpoints")
	os.WriteFile(file, out, 0o600)
	fromJournal, err := checkpoint.ReadFile(file)
	if err != nil || len(fromJournal) != len(cps) {
		t.Fatalf("journalctl -o cat --output-fields=PARLEY_CHECKPOINT gave %d checkpoints (%v):\n%s", len(fromJournal), err, out)
	}
	// A log cut after the fact contradicts them.
	writeLines(t, path, lines[:len(lines)-3])
	if _, err := Verify(path, VerifyOptions{Key: testPub("daemon"), Checkpoints: cps}); err == nil {
		t.Error("a cut log verifies against the journal's checkpoints")
	}
	vanished := journaltest.Entries(t, dir, 1, "MESSAGE_ID="+MessageIDVanished)
	if len(vanished) != 1 || vanished[0]["PRIORITY"] != "2" || !strings.Contains(fmt.Sprint(vanished[0]["MESSAGE"]), "was renamed or moved away") {
		t.Errorf("vanish entries: %v", vanished)
	}
}
