package keystore

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/testkeys"
)

// TestPublicKeyRefusesSmallOrder: principal.pub names the key checkpoints
// and services are checked against; one of small order would verify
// signatures made without a private key (DESIGN.md property 10).
func TestPublicKeyRefusesSmallOrder(t *testing.T) {
	for _, k := range testkeys.SmallOrderCanonical {
		t.Run("fail/"+k.Name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, PublicKeyFileName), []byte(grant.FormatPublicKey(k.Key)+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if got, err := PublicKey(dir); err == nil {
				t.Errorf("PublicKey accepts %x", got)
			}
		})
	}
}
