package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/spf13/cobra"
)

func newKeygenCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "keygen [--out FILE]",
		Short: "Make a new agent key and print its public key",
		Long: `keygen makes a new Ed25519 agent key and writes it to --out, by default
$PARLEY_AGENT_KEY, else $XDG_CONFIG_HOME/parley/agent.key, else
~/.config/parley/agent.key. The file is created 0600 and a missing folder
0700. It never overwrites a file. The public key goes to stdout.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := agentKeyPath(out)
			if path == "" {
				return fail(errors.New("no place for the agent key: no home directory"),
					"name one with --out FILE or "+agentKeyEnv)
			}
			_, key, err := ed25519.GenerateKey(rand.Reader)
			if err != nil {
				return fail(err, "")
			}
			if err := writeAgentKeyFile(path, key); err != nil {
				if errors.Is(err, fs.ErrExist) {
					return fail(fmt.Errorf("%s already exists; not overwriting it", path),
						"show its public key with: parley-grant pubkey --key "+path+"; or choose another file with --out")
				}
				return fail(err, "")
			}
			infof("wrote a new agent key to %s", path)
			fmt.Println(grant.FormatPublicKey(key.Public().(ed25519.PublicKey)))
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "the key file to create")
	return cmd
}
