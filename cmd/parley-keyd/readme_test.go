package main

import (
	"os"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/policies"
)

// TestREADMEPolicy: the README's example policy is one that policy check
// accepts without a warning, as a reader who copies it expects.
func TestREADMEPolicy(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Policy\n")
	if !ok {
		t.Fatal("README has no Policy section")
	}
	_, block, ok := strings.Cut(section, "```toml\n")
	if !ok {
		t.Fatal("the Policy section has no toml example")
	}
	block, _, _ = strings.Cut(block, "```")
	p, err := policies.Parse([]byte(block), "README.md")
	if err != nil {
		t.Fatalf("the README's policy does not parse: %v", err)
	}
	if w := p.Warnings(); len(w) != 0 {
		t.Errorf("policy check warns about the README's policy: %q", w)
	}
}
