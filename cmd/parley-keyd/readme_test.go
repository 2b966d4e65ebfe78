package main

import (
	"os"
	"strconv"
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

// TestExitCodesDocumented: every exit code parley-keyd has is in the table
// of docs/cli.md, in the root command's help, and, where serve exits with
// it, in serve's help, which is its man page.
func TestExitCodesDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	_, keyd, _ := strings.Cut(string(b), "\n## parley-keyd")
	root := newRootCmd()
	serve, _, err := root.Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range []int{exitOK, exitFail, exitUsage, exitAudit, exitPolicy, exitConfig} {
		n := strconv.Itoa(code)
		if !strings.Contains(keyd, "\n| "+n+" | ") {
			t.Errorf("docs/cli.md's parley-keyd table has no exit code %d", code)
		}
		if code != exitOK && !strings.Contains(root.Long, " "+n+" ") {
			t.Errorf("parley-keyd --help does not name exit code %d", code)
		}
		if code != exitAudit && !strings.Contains(serve.Long, "\n  "+n+"  ") {
			t.Errorf("parley-keyd serve --help does not list exit status %d", code)
		}
	}
}
