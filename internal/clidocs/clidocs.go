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
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cpuguy83/go-md2man/v2/md2man"
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

// pageName matches the markdown source of a page: NAME.SECTION.md.
var pageName = regexp.MustCompile(`^([a-z0-9][a-z0-9._-]*)\.([1-9])\.md$`)

// WritePages renders the man pages written in markdown in pages, NAME.S.md
// each (go-md2man's dialect, whose first line is the page's title line),
// into dir/man/manS/NAME.S: the pages that no command generates, such as the
// formats of configuration files in section 5. "@DATE@" in a page becomes
// the month that Write puts on the generated pages, "@SOURCE@" source.
func WritePages(pages fs.FS, dir, source string) error {
	entries, err := fs.ReadDir(pages, ".")
	if err != nil {
		return err
	}
	for _, e := range entries {
		m := pageName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		md, err := fs.ReadFile(pages, e.Name())
		if err != nil {
			return err
		}
		md = []byte(strings.NewReplacer("@DATE@", pageDate(), "@SOURCE@", source).Replace(string(md)))
		out := filepath.Join(dir, "man", "man"+m[2])
		if err := os.MkdirAll(out, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, m[1]+"."+m[2]), md2man.Render(md), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// pageDate is the month on the pages, as cobra writes it: that of
// $SOURCE_DATE_EPOCH when it is set (reproducible builds), else of today.
func pageDate() string {
	t := time.Now()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			t = time.Unix(n, 0)
		}
	}
	return t.UTC().Format("Jan 2006")
}
