package main

import (
	"errors"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/internal/clidocs"
	"github.com/spf13/cobra"
)

// newGendocsCmd is the hidden command that make install runs to write the
// man pages (section 1) and the bash, zsh and fish completions.
func newGendocsCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:    "gendocs --dir DIR",
		Short:  "Write man pages and shell completions into DIR (for packagers)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if dir == "" {
				return usage(errors.New("--dir is required"), "")
			}
			if err := clidocs.Write(cmd.Root(), dir, "1", "parley-keyd "+protocol.DaemonVersion); err != nil {
				return fail(err, "")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "output folder (man/ and completion/ are created in it)")
	return cmd
}
