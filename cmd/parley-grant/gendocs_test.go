package main

import (
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testkit/clidocstest"
)

// TestGendocs checks the man pages and completions that make install
// installs: one page per visible command, and completions that offer every
// subcommand in bash, zsh and fish.
func TestGendocs(t *testing.T) {
	clidocstest.Check(t, newRootCmd(), cliBinary(t), "1")
}
