package transit

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/openbao/openbao/api/v2"
)

// FuzzSignReply feeds the sign reply parser what a key service (or whoever
// answers at its address) might send. Whatever it accepts must be a
// signature that verifies under the pinned key; nothing may panic.
func FuzzSignReply(f *testing.F) {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	msg := []byte("grant payload")
	good := "vault:v1:" + base64.StdEncoding.EncodeToString(ed25519.Sign(priv, msg))
	f.Add(good, "1")
	f.Add(good, "2")
	f.Add("vault:v1:", "1")
	f.Add("v1:"+good, "x")
	f.Add("vault:v10:AAAA", "10")
	s := &Signer{pub: priv.Public().(ed25519.PublicKey)}
	f.Fuzz(func(t *testing.T, sigField, versionField string) {
		sec := &api.Secret{Data: map[string]any{"signature": sigField, "key_version": json.Number(versionField)}}
		sig, err := s.parseSignature(sec, 1, msg)
		if err != nil {
			return
		}
		if !ed25519.Verify(s.pub, msg, sig) {
			t.Fatalf("accepted a signature that does not verify: %q", sigField)
		}
	})
}

// FuzzKeyReply feeds the key description parser arbitrary JSON; the key it
// reads must pass checkKey only when version 1 is the pinned key.
func FuzzKeyReply(f *testing.F) {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	b64 := base64.StdEncoding.EncodeToString(pub)
	f.Add(`{"type":"ed25519","latest_version":1,"keys":{"1":{"public_key":"` + b64 + `"}}}`)
	f.Add(`{"type":"ed25519","latest_version":2,"exportable":true,"keys":{"1":{"public_key":"` + b64 + `"}}}`)
	f.Add(`{"keys":[]}`)
	s := &Signer{pub: pub}
	f.Fuzz(func(t *testing.T, body string) {
		sec, err := api.ParseSecret(strings.NewReader(`{"data":` + body + `}`))
		if err != nil || sec == nil {
			return
		}
		info, err := parseKeyInfo(sec)
		if err != nil {
			return
		}
		if _, err := s.checkKey(info, 1); err == nil && !info.public[1].Equal(pub) {
			t.Fatal("checkKey accepted another key")
		}
	})
}
