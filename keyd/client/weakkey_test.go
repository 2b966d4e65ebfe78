package client

import (
	"crypto"
	"crypto/ed25519"
	"io"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testkeys"
)

// fakeSigner claims any public key; its signatures are never asked for.
type fakeSigner struct{ pub ed25519.PublicKey }

func (s fakeSigner) Public() crypto.PublicKey { return s.pub }
func (s fakeSigner) Sign(io.Reader, []byte, crypto.SignerOpts) ([]byte, error) {
	return make([]byte, ed25519.SignatureSize), nil
}

// TestHolderKeyRefusesWeakKeys: the holder key a request names comes from
// the agent's signer; one of small order (anyone could sign for it), a
// second spelling of a point, or bytes that are no key at all never leave
// the client as a holder (DESIGN.md property 10).
func TestHolderKeyRefusesWeakKeys(t *testing.T) {
	var keys []testkeys.Key
	keys = append(keys, testkeys.SmallOrder()...)
	keys = append(keys, testkeys.NonCanonical()...)
	keys = append(keys, testkeys.Key{Name: "short", Key: make(ed25519.PublicKey, 31)}, testkeys.Key{Name: "long", Key: make(ed25519.PublicKey, 33)})
	for _, k := range keys {
		t.Run("fail/"+k.Name, func(t *testing.T) {
			if got, err := holderKey(fakeSigner{k.Key}); err == nil {
				t.Errorf("holderKey accepts %x as %q", []byte(k.Key), got)
			}
		})
	}
	good := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	if _, err := holderKey(good); err != nil {
		t.Errorf("holderKey refuses a good key: %v", err)
	}
}
