package main

import (
	"fmt"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/spf13/cobra"
)

func newHashCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hash FILE|-",
		Short: "Print the hash of a proposal",
		Long: `hash prints a proposal's hash (§5.1): b64url(sha256(canonical(proposal
without "hash" and "data"))). This is the value of --only and the target of
a COMMIT proof. FILE holds the proposal's JSON; - reads it from stdin.

It warns when the proposal's own hash field differs, or when the proposal
is not well formed (a service would refuse it).`,
		Args: exactArgs(1, "one file (or - for stdin)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := readInput(args[0], maxJSONInput)
			if err != nil {
				return err
			}
			h, err := grant.ProposalHash(raw)
			if err != nil {
				return fail(err, "a proposal is a JSON object whose numbers outside data are integers")
			}
			if p, err := grant.ParseProposal(raw); err != nil {
				warnf("%v", err)
			} else if p.Hash != "" && p.Hash != h {
				warnf("the proposal's hash field %q does not match its content", p.Hash)
			}
			fmt.Println(h)
			return nil
		},
	}
	return cmd
}
