package main

import (
	"fmt"
	"os"

	"github.com/parley-keyd/parley-keyd/policies"
	"github.com/spf13/cobra"
)

func newPolicyCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "Work with policy files"}
	check := &cobra.Command{
		Use:   "check FILE",
		Short: "Validate a policy and say what it means in plain words",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			p, err := policies.Parse(data, args[0])
			if err != nil {
				return &exitError{code: exitPolicy, err: err}
			}
			fmt.Print(p.Describe())
			for _, w := range p.Warnings() {
				fmt.Fprintf(os.Stderr, "parley-keyd: warning: %s\n", w)
			}
			return nil
		},
	}
	cmd.AddCommand(check)
	return cmd
}
