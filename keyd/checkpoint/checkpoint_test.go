package checkpoint

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testkeys"
)

// TestParseKeyRefusesWeakKeys: issue 20 item 8. A key of small order takes
// the keyless signature (R = the identity, S = 0) for every message (the
// identity point) or one message in a few: under it, `audit verify --key`
// would accept a checkpoint forged without any private key. Property 10
// covers every key that enters, this one too; a non-canonical encoding
// would give a key a second spelling.
func TestParseKeyRefusesWeakKeys(t *testing.T) {
	weak := append(testkeys.SmallOrder(), testkeys.NonCanonical()...)
	for _, k := range weak {
		t.Run("fail/"+k.Name, func(t *testing.T) {
			if got, err := ParseKey(FormatKey(k.Key)); err == nil {
				t.Errorf("ParseKey accepts %s as %x", FormatKey(k.Key), got)
			}
		})
	}
	t.Run("ok/real-key", func(t *testing.T) {
		pub, _, _ := ed25519.GenerateKey(rand.Reader)
		if got, err := ParseKey(" " + FormatKey(pub) + "\n"); err != nil || !got.Equal(pub) {
			t.Errorf("ParseKey = %x, %v", got, err)
		}
	})
	t.Run("fail/trailing-bits", func(t *testing.T) {
		// One key, one spelling: a last character with bits past the
		// 256 set names the same bytes under base64's lax decoding.
		pub, _, _ := ed25519.GenerateKey(rand.Reader)
		s := FormatKey(pub)
		// 32 bytes take 43 characters; the last one's lowest two bits
		// are padding, which lax decoding ignores.
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
		alt := alphabet[strings.IndexByte(alphabet, s[len(s)-1])^1]
		if b, err := base64.RawURLEncoding.DecodeString(s[len("ed25519:"):len(s)-1] + string(alt)); err != nil || string(b) != string(pub) {
			t.Fatalf("%c is not a second spelling of the last character of %s", alt, s)
		}
		if _, err := ParseKey(s[:len(s)-1] + string(alt)); err == nil {
			t.Errorf("ParseKey accepts a second spelling of %s", s)
		}
	})
}

// TestForgedCheckpointRefused: the attack itself. A checkpoint "signed" by
// the identity point with the keyless signature verifies under
// crypto/ed25519; Parse, Verify and Verify with the identity pinned (as
// audit verify --key pins it) must all refuse it.
func TestForgedCheckpointRefused(t *testing.T) {
	id := testkeys.SmallOrderCanonical[0]
	if id.Name != "identity" {
		t.Fatalf("first small-order point is %s, want the identity", id.Name)
	}
	c := &Checkpoint{Log: "AAAAAAAAAAAAAAAAAAAAAA", Seq: 0, Time: "2026-12-01T10:00:00Z", Reason: ReasonCreate,
		Key: FormatKey(id.Key), Sig: base64.RawURLEncoding.EncodeToString(testkeys.ForgedSig())}
	msg, err := c.Message()
	if err != nil {
		t.Fatal(err)
	}
	if !ed25519.Verify(id.Key, msg, testkeys.ForgedSig()) {
		t.Fatal("the keyless signature does not verify under the identity: the test attacks nothing")
	}
	if _, err := Parse(c.Marshal()); err == nil {
		t.Error("Parse accepts a checkpoint signed by the identity point")
	}
	if err := c.Verify(nil); err == nil {
		t.Error("Verify(nil) accepts the forged checkpoint")
	}
	if err := c.Verify(id.Key); err == nil {
		t.Error("Verify(identity) accepts the forged checkpoint")
	}
}
