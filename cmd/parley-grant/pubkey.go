package main

import (
	"crypto/ed25519"
	"fmt"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/spf13/cobra"
)

func newPubkeyCmd() *cobra.Command {
	var keyPath string
	cmd := &cobra.Command{
		Use:   "pubkey [--key FILE]",
		Short: "Print the public key of an agent key",
		Long: `pubkey prints the public key of the agent key file --key (by default the
one keygen writes), in the form ed25519:… that grants and --to use.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := loadAgentKey(keyPath)
			if err != nil {
				return err
			}
			fmt.Println(grant.FormatPublicKey(key.Public().(ed25519.PublicKey)))
			return nil
		},
	}
	cmd.Flags().StringVar(&keyPath, "key", "", "the agent key file (default $PARLEY_AGENT_KEY, else ~/.config/parley/agent.key)")
	return cmd
}
