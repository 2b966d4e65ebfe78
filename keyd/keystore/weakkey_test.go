package keystore

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testkeys"
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

// weakKeyTexts are key strings no key site may accept: every small-order
// point in each of its spellings, the second spellings of ordinary points,
// and texts of the wrong length.
func weakKeyTexts() []testkeys.Key {
	var keys []testkeys.Key
	keys = append(keys, testkeys.SmallOrder()...)
	keys = append(keys, testkeys.NonCanonical()...)
	return keys
}

func weakText(k testkeys.Key) string {
	return "ed25519:" + base64.RawURLEncoding.EncodeToString(k.Key)
}

// TestPreviousRefusesWeakKeys: principal.previous lists the keys services
// and the audit log's checkpoints are still checked against; one of small
// order, a second spelling of a key or a key of the wrong length in it is
// refused, not trusted (DESIGN.md property 10).
func TestPreviousRefusesWeakKeys(t *testing.T) {
	texts := map[string]string{"short": "ed25519:" + "AAAA", "long": weakText(testkeys.Key{Key: make([]byte, 33)})}
	for _, k := range weakKeyTexts() {
		texts[k.Name] = weakText(k)
	}
	for name, text := range texts {
		t.Run("fail/"+name, func(t *testing.T) {
			dir := t.TempDir()
			line := text + " until 2030-01-01T00:00:00Z\n"
			if err := os.WriteFile(filepath.Join(dir, PreviousFileName), []byte(line), 0o644); err != nil {
				t.Fatal(err)
			}
			if got, err := Previous(dir); err == nil {
				t.Errorf("Previous accepts %q: %v", text, got)
			}
		})
	}
}

// TestKeyFileCommentRefusesWeakKeys: the "# public key:" line of a key
// file or a backup is read as a key; a weak one makes the file unreadable
// rather than a key that is compared or shown.
func TestKeyFileCommentRefusesWeakKeys(t *testing.T) {
	seed := make([]byte, ed25519.SeedSize)
	good := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	plain := marshal(seed, good)
	var s [ed25519.SeedSize]byte
	if _, err := parse(plain, &s); err != nil {
		t.Fatalf("parse refuses a good key file: %v", err)
	}
	for _, k := range weakKeyTexts() {
		t.Run("fail/"+k.Name, func(t *testing.T) {
			bad := bytes.Replace(plain, []byte(grant.FormatPublicKey(good)), []byte(weakText(k)), 1)
			if _, err := parse(bad, &s); err == nil {
				t.Errorf("parse accepts a key file whose public key is %x", []byte(k.Key))
			}
		})
	}
}
