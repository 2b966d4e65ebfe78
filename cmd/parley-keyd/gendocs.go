package main

import (
	"embed"
	"errors"
	"io/fs"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/internal/clidocs"
	"github.com/spf13/cobra"
)

// manPages are the pages no command generates: the configuration and policy
// file formats, in section 5.
//
//go:embed man/*.md
var manPages embed.FS

// newGendocsCmd is the hidden command that make install runs to write the
// man pages (section 8: a daemon and its administration; section 5: its
// files) and the bash, zsh and fish completions.
func newGendocsCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    "gendocs --dir DIR",
		Short:  "Write man pages and shell completions into DIR (for packagers)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return usageError{errors.New("--dir is required")}
			}
			source := "parley-keyd " + protocol.DaemonVersion
			if err := clidocs.Write(cmd.Root(), dir, "8", source); err != nil {
				return err
			}
			pages, err := fs.Sub(manPages, "man")
			if err != nil {
				return err
			}
			return clidocs.WritePages(pages, dir, source)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "output folder (man/ and completion/ are created in it)")
	return cmd
}
