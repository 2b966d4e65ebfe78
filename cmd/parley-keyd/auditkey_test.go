package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testkeys"
)

// TestAuditKeyRefusesSmallOrder: `audit verify --key` pins the key every
// checkpoint must carry; under a small-order key the keyless signature
// verifies forged checkpoints, so no such key is taken, given inline or in
// a file (issue 20 item 8, property 10).
func TestAuditKeyRefusesSmallOrder(t *testing.T) {
	keyText := func(k ed25519.PublicKey) string { return "ed25519:" + base64.RawURLEncoding.EncodeToString(k) }
	for _, k := range testkeys.SmallOrder() {
		t.Run("fail/"+k.Name, func(t *testing.T) {
			s := keyText(k.Key)
			if _, err := auditKey(s, "", ""); err == nil {
				t.Errorf("--key %s accepted", s)
			}
			file := filepath.Join(t.TempDir(), "principal.pub")
			os.WriteFile(file, []byte(s+"\n"), 0o644)
			if _, err := auditKey(file, "", ""); err == nil {
				t.Errorf("--key FILE holding %s accepted", s)
			}
		})
	}
	t.Run("ok/real-key", func(t *testing.T) {
		pub, _, _ := ed25519.GenerateKey(rand.Reader)
		if got, err := auditKey(keyText(pub), "", ""); err != nil || !got.Equal(pub) {
			t.Errorf("auditKey = %x, %v", got, err)
		}
	})
}
