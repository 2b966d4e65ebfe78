package audit

import (
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func rotationKey(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("rotation test " + name))
	return ed25519.NewKeyFromSeed(seed[:])
}

func pubKey(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

func appendSome(t *testing.T, o Options, path string, n int) {
	t.Helper()
	l, err := o.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if _, err := l.Append(Record{Kind: KindPolicyReload, Decision: "loaded"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRotationKeepsTheLog: after a principal key rotation the daemon opens
// its log, whose checkpoints so far are the old key's, and goes on under
// the new key; verify accepts both in that order.
func TestRotationKeepsTheLog(t *testing.T) {
	a, b := rotationKey("old"), rotationKey("new")
	path := filepath.Join(t.TempDir(), "audit.log")
	appendSome(t, Options{Signer: a}, path, 3)

	// Without the old key named, the new key refuses the log.
	if _, err := (Options{Signer: b}).Open(path); err == nil || !strings.Contains(err.Error(), "another key") {
		t.Fatalf("open with the new key alone: %v", err)
	}
	appendSome(t, Options{Signer: b, Previous: []ed25519.PublicKey{pubKey(a)}}, path, 3)

	if _, err := Verify(path, VerifyOptions{Key: pubKey(b), Previous: []ed25519.PublicKey{pubKey(a)}}); err != nil {
		t.Fatalf("verify with both keys: %v", err)
	}
	if _, err := Verify(path, VerifyOptions{Key: pubKey(b)}); err == nil {
		t.Error("verify under the new key alone accepted the old key's checkpoints")
	}
}

// TestRotationOldKeyCannotSignAfterTheNew is the attack: whoever still holds
// a key rotated out writes checkpoints after the new key's first one, to
// vouch for records they added. Keys only move forward.
func TestRotationOldKeyCannotSignAfterTheNew(t *testing.T) {
	a, b := rotationKey("old"), rotationKey("new")
	path := filepath.Join(t.TempDir(), "audit.log")
	appendSome(t, Options{Signer: a}, path, 2)
	appendSome(t, Options{Signer: b, Previous: []ed25519.PublicKey{pubKey(a)}}, path, 2)
	// The old key's holder opens the log as its writer, with the new key
	// as a "previous" one, and appends under the old key.
	appendSome(t, Options{Signer: a, Previous: []ed25519.PublicKey{pubKey(b)}}, path, 2)

	_, err := Verify(path, VerifyOptions{Key: pubKey(b), Previous: []ed25519.PublicKey{pubKey(a)}})
	var ae *Error
	if !errors.As(err, &ae) {
		t.Fatalf("verify accepted the old key's checkpoint after the new key's: %v", err)
	}
}
