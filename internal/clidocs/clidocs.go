// Package clidocs writes the man pages and shell completion scripts of a
// cobra command tree, for packagers: each binary has a hidden "gendocs"
// command that calls Write, and make install copies the result into place.
//
// Everything is generated from the commands themselves, so the pages and
// completions cannot drift from the flags the binaries accept. The
// completion scripts are cobra's dynamic ones: they ask the binary
// (NAME __complete …) what to offer, so they stay right after an upgrade.
package clidocs

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// Write writes, under dir, for the root command NAME:
//
//	man/manS/NAME.S, NAME-SUB.S, …   one page per visible command, section S
//	completion/bash/NAME              for /usr/share/bash-completion/completions
//	completion/zsh/_NAME              for /usr/share/zsh/site-functions
//	completion/fish/NAME.fish         for /usr/share/fish/vendor_completions.d
//
// source is the footer's source line, such as "parley-keyd 0.1.0". The pages
// carry the month of $SOURCE_DATE_EPOCH when it is set (reproducible builds),
// else of today.
func Write(root *cobra.Command, dir, section, source string) error {
	if dir == "" {
		return fmt.Errorf("no output folder")
	}
	name := root.Name()
	man := filepath.Join(dir, "man", "man"+section)
	comp := filepath.Join(dir, "completion")
	for _, d := range []string{man, filepath.Join(comp, "bash"), filepath.Join(comp, "zsh"), filepath.Join(comp, "fish")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// No "Auto generated" history line: the pages are part of the release.
	var quiet func(*cobra.Command)
	quiet = func(c *cobra.Command) {
		c.DisableAutoGenTag = true
		for _, s := range c.Commands() {
			quiet(s)
		}
	}
	quiet(root)
	// Cobra's own completion command needs no pages: the completions are
	// installed. The binary still has it; only this process hides it.
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.Hidden = true
		}
	}
	header := &doc.GenManHeader{Section: section, Source: source, Manual: "parley-keyd manual"}
	if err := doc.GenManTree(root, header, man); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	gens := []struct {
		path string
		gen  func(f *os.File) error
	}{
		{filepath.Join(comp, "bash", name), func(f *os.File) error { return root.GenBashCompletionV2(f, true) }},
		{filepath.Join(comp, "zsh", "_"+name), func(f *os.File) error { return root.GenZshCompletion(f) }},
		{filepath.Join(comp, "fish", name+".fish"), func(f *os.File) error { return root.GenFishCompletion(f, true) }},
	}
	for _, g := range gens {
		f, err := os.Create(g.path)
		if err != nil {
			return err
		}
		err = g.gen(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("completion %s: %w", g.path, err)
		}
	}
	return nil
}
