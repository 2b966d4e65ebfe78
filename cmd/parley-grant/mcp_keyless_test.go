package main

import (
	"crypto/ed25519"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testkeys"
)

// TestMCPAttenuateRefusesKeylessKeys: the MCP attenuate tool refuses to
// hand a grant to any encoding of a small-order key, whose grant anyone
// could use with a proof forged without a private key (issue 10 item 1).
func TestMCPAttenuateRefusesKeylessKeys(t *testing.T) {
	keyPath, agent := writeAgentKey(t, t.TempDir())
	principal := newTestKey(t)
	now := int64(1790000000)
	root, err := grant.Issue(principal, agent.Public().(ed25519.PublicKey), nil, now, "n")
	if err != nil {
		t.Fatal(err)
	}
	s := connectMCP(t, keyPath)
	for _, k := range testkeys.SmallOrder() {
		t.Run("fail/"+k.Name, func(t *testing.T) {
			res := s.call(t, "parley_attenuate", map[string]any{"token": root.Encode(), "to": grant.FormatPublicKey(k.Key)}, nil)
			if text := toolErr(t, res, "invalid_params"); !strings.Contains(text, "public key") {
				t.Errorf("tool error %q does not say what is wrong with the key", text)
			}
		})
	}
}
