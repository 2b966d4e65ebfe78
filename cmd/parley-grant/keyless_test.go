package main

import (
	"crypto/ed25519"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testkeys"
)

// TestKeylessKeysRefused runs the real binary with every encoding of every
// small-order point, and every non-canonical encoding, wherever the command
// line takes a key (the non-canonical ones at --to only): attenuate --to (a grant anyone could use), verify
// --trust (root grants anyone could sign) and verify --proof-key (proofs
// anyone could make). Each is a usage error that names the flag, and
// nothing reaches stdout (issue 10 item 1).
func TestKeylessKeysRefused(t *testing.T) {
	dir := t.TempDir()
	keyPath, agent := writeAgentKey(t, dir)
	principal := newTestKey(t)
	now := int64(1790000000)
	root, err := grant.Issue(principal, agent.Public().(ed25519.PublicKey), []grant.Caveat{grant.Exp(now + 3600)}, now, "n")
	if err != nil {
		t.Fatal(err)
	}
	tok := root.Encode()
	env := cliEnv(t, "/nonexistent.sock", keyPath)
	small := len(testkeys.SmallOrder())
	for i, k := range append(testkeys.SmallOrder(), testkeys.NonCanonical()...) {
		key := grant.FormatPublicKey(k.Key)
		t.Run("fail/"+k.Name, func(t *testing.T) {
			for _, c := range []struct {
				flag string
				args []string
			}{
				{"--to", []string{"attenuate", tok, "--to", key, "--now", "1790000000"}},
				{"--trust", []string{"verify", tok, "--service", "s", "--verb", "ASK", "--capability", "c", "--trust", key}},
				{"--proof-key", []string{"verify", tok, "--service", "s", "--verb", "ASK", "--capability", "c",
					"--trust", pubOf(principal), "--proof-key", key}},
			} {
				if i >= small && c.flag != "--to" {
					continue // the same check; one flag is enough for the spellings
				}
				r := cli(t, env, exitUsage, c.args...)
				if !strings.HasPrefix(r.stderr, "parley-grant: "+c.flag+` "`+key+`": public key: `) || r.stdout != "" {
					t.Errorf("%s: stdout %q stderr %q", c.flag, r.stdout, r.stderr)
				}
			}
		})
	}
}
