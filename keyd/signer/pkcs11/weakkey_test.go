package pkcs11

import (
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testkeys"
)

// TestECPointRefusesSmallOrder: a token's CKA_EC_POINT is checked like
// every key that enters (DESIGN.md property 10), bare or DER-wrapped.
func TestECPointRefusesSmallOrder(t *testing.T) {
	for _, k := range testkeys.SmallOrder() {
		for _, b := range [][]byte{k.Key, append([]byte{0x04, 0x20}, k.Key...)} {
			if pub, err := parseECPoint(b); err == nil {
				t.Errorf("%s: parseECPoint(%x) = %x", k.Name, b, pub)
			}
		}
	}
}
