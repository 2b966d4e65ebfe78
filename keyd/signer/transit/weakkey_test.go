package transit

import (
	"encoding/base64"
	"testing"

	"github.com/openbao/openbao/api/v2"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testkeys"
)

// TestKeyInfoDropsSmallOrderKeys: a key service that names a small-order
// public key for a version is not believed (DESIGN.md property 10): that
// version has no key the daemon would pin or verify with.
func TestKeyInfoDropsSmallOrderKeys(t *testing.T) {
	for _, k := range testkeys.SmallOrder() {
		sec := &api.Secret{Data: map[string]any{"type": "ed25519", "latest_version": "1",
			"keys": map[string]any{"1": map[string]any{"public_key": base64.StdEncoding.EncodeToString(k.Key)}}}}
		info, err := parseKeyInfo(sec)
		if err != nil {
			t.Fatal(err)
		}
		if pub, ok := info.public[1]; ok {
			t.Errorf("%s: version 1 has key %x", k.Name, pub)
		}
	}
}
