package main

import (
	"testing"

	"github.com/parley-keyd/parley-keyd/keyd/audit"
)

// writeTestLog writes n issue records through the real audit log code.
func writeTestLog(t *testing.T, path string, n int) {
	t.Helper()
	l, err := audit.Open(path)
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
