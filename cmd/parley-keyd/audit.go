package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/parley-keyd/parley-keyd/keyd/audit"

	"github.com/spf13/cobra"
)

func newAuditCmd() *cobra.Command {
	var state string
	cmd := &cobra.Command{Use: "audit", Short: "Verify or show the audit log"}
	cmd.PersistentFlags().StringVar(&state, "state", defaultState(), "state folder holding audit.log")
	open := func(args []string) (*os.File, error) {
		path := filepath.Join(state, "audit.log")
		if len(args) == 1 {
			path = args[0]
		}
		return os.Open(path)
	}
	verify := &cobra.Command{
		Use:   "verify [FILE]",
		Short: "Check the hash chain: detects removed, edited, inserted and reordered records",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := open(args)
			if err != nil {
				return err
			}
			defer f.Close()
			head, err := audit.VerifyChain(f)
			if err != nil {
				var ae *audit.Error
				if errors.As(err, &ae) {
					return &exitError{code: exitAudit, err: fmt.Errorf("%s: %w", f.Name(), err),
						hint: "the log was altered at or just before that line; keep a copy for investigation"}
				}
				return err
			}
			fmt.Printf("ok: %d records, chain head %s\n", head.Seq, head.Hash)
			return nil
		},
	}
	show := &cobra.Command{
		Use:   "show [FILE]",
		Short: "Print the audit records readably",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := open(args)
			if err != nil {
				return err
			}
			defer f.Close()
			return audit.Show(f, os.Stdout)
		},
	}
	cmd.AddCommand(verify, show)
	return cmd
}
