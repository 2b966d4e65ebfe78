package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/grant/lens"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
)

// TestCLIAuditShowJSONNeutralizes: the audit log keeps what an agent sent
// as it came (the caveat values it asked for, inside JSON strings):
// encoding/json escapes C0 controls there but leaves DEL, C1 controls
// (U+009B is CSI), bidi overrides, zero-width and tag characters raw. So an
// agent that asks for a grant with such a value reached the terminal of
// the admin who runs parley-keyd audit show --json, as root, raw, although
// parley-grant audit --json escapes the same records (issue 20 item 7).
// Every such character must be a \u escape, with the JSON's values
// unchanged.
func TestCLIAuditShowJSONNeutralizes(t *testing.T) {
	const evil = "\u202eevil\u2066x\u2069\u009b31m\u0085\x7f\u200b\ufeff\U000E0041"
	path := filepath.Join(t.TempDir(), "audit.log")
	l, err := audit.Options{Signer: scriptKey("daemon"), Preallocate: 4 << 10}.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	requested, _ := json.Marshal([]map[string]string{{"type": "scope", "value": evil}})
	if _, err := l.Append(audit.Record{Kind: audit.KindDeny, Verb: "GRANT", Requested: requested, Decision: "denied"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	raw, _ := exec.Command("cat", path).Output()
	if !bytes.Contains(raw, []byte("\u202e")) {
		t.Fatal("the log no longer keeps the value as sent: the test no longer tests anything")
	}
	out, err := exec.Command(filepath.Join(binaries(t), "parley-keyd"), "audit", "show", "--json", path).Output()
	if err != nil {
		t.Fatalf("audit show --json: %v", err)
	}
	for _, r := range string(out) {
		if r != '\n' && lens.SafeText(string(r), 0) != string(r) {
			t.Fatalf("U+%04X reached the terminal raw: %q", r, out)
		}
	}
	// And as text.
	text, err := exec.Command(filepath.Join(binaries(t), "parley-keyd"), "audit", "show", path).Output()
	if err != nil {
		t.Fatalf("audit show: %v", err)
	}
	for _, r := range string(text) {
		if r != '\n' && lens.SafeText(string(r), 0) != string(r) {
			t.Fatalf("audit show: U+%04X reached the terminal raw: %q", r, text)
		}
	}
	found := false
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var rec audit.Record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a line is no longer JSON: %v: %q", err, line)
		}
		var cavs []map[string]string
		if rec.Requested != nil && json.Unmarshal(rec.Requested, &cavs) == nil && len(cavs) == 1 {
			found = true
			if cavs[0]["value"] != evil {
				t.Errorf("the value changed: %q, want %q", cavs[0]["value"], evil)
			}
		}
	}
	if !found {
		t.Fatalf("the record with the agent's caveat is not in the output: %q", out)
	}
}
