package main

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"testing"

	"github.com/parley-keyd/parley-keyd/keyd/audit"
)

// writeTestLog writes n issue records through the real audit log code, as
// the daemon does (signed checkpoints: the first record and the last are
// checkpoints), and principal.pub next to the log.
func writeTestLog(t *testing.T, path string, n int) {
	t.Helper()
	key := scriptKey("daemon")
	pub := audit.FormatKey(key.Public().(ed25519.PublicKey))
	if err := os.WriteFile(filepath.Join(filepath.Dir(path), "principal.pub"), []byte(pub+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := audit.Options{Signer: key}.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := 0; i < n; i++ {
		if _, err := l.Append(audit.Record{Kind: audit.KindIssue, RequestID: "r_test", Holder: "ed25519:x",
			Caller: &audit.Caller{UID: 1000, User: "bot"}, GrantID: "g", Expiry: 1790000000}); err != nil {
			t.Fatal(err)
		}
	}
}
