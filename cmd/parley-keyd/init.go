package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/keyd/keystore"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
	"github.com/parley-keyd/parley-keyd/policies"
	"github.com/spf13/cobra"
)

func newInitCmd() *cobra.Command {
	var state, passFile, configDir, socket, agent, approver, keyBackend, tokenFile string
	var importKey bool
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create the state folder, the principal key, a default configuration and policy",
		Long: `init creates the state folder (0700), a new principal key (0600, encrypted
with a passphrase when --passphrase-file is given), and, where they do not
exist yet, a commented configuration and a default policy that asks the human
for every request. It prints the principal's public key, which services must
trust. It never overwrites an existing key.

With --backend transit or pkcs11 the principal key lives in a key service
instead (docs/key-service.md): init reads the [key] table of config.toml
(writing a template first when there is no configuration yet), creates the
key there (pkcs11: in the token, not extractable) or uses the one that
exists, and writes its public key to principal.pub. --import moves the
existing file key into the transit engine, so that services keep trusting
the same principal.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if configDir == "" {
				configDir = state
			}
			switch keyBackend {
			case signer.File:
				if importKey || tokenFile != "" {
					return withHint(errors.New("--import and --token-file are for --backend transit"), "parley-keyd init --backend transit --import")
				}
			case signer.Transit, signer.PKCS11:
				if importKey && keyBackend != signer.Transit {
					return errors.New("--import is for --backend transit: a PKCS#11 key is generated in the token")
				}
				return initKeyService(keyBackend, state, configDir, socket, agent, approver, passFile, tokenFile, importKey)
			default:
				return fmt.Errorf("--backend %q is not one of file, transit, pkcs11", keyBackend)
			}
			var pass []byte
			if passFile != "" {
				p, err := readPassphraseFile(passFile)
				if err != nil {
					return err
				}
				pass = p
			}
			pub, err := keystore.Init(state, pass)
			if err != nil {
				if errors.Is(err, keystore.ErrKeyExists) || errors.Is(err, fs.ErrExist) {
					return withHint(err, "the principal key exists already; print it with: parley-keyd pubkey --state "+state)
				}
				return err
			}
			agent, approver = defaultUsers(agent, approver)
			if err := writeIfAbsent(filepath.Join(configDir, "config.toml"), keyd.DefaultConfig(protocol.SocketPath(socket), agent, approver)+signer.Template(signer.File)); err != nil {
				return err
			}
			if err := writeIfAbsent(filepath.Join(configDir, "policy.toml"), policies.DefaultText()); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "parley-keyd: created %s; configuration and policy in %s\n", state, configDir)
			fmt.Fprintln(os.Stderr, "parley-keyd: services must trust this principal key:")
			fmt.Println(grant.FormatPublicKey(pub))
			return nil
		},
	}
	cmd.Flags().StringVar(&state, "state", defaultState(), "state folder (key, audit log)")
	cmd.Flags().StringVar(&passFile, "passphrase-file", "", "encrypt the key with the passphrase in this file")
	cmd.Flags().StringVar(&configDir, "config-dir", "", "where to write config.toml and policy.toml (default: the state folder)")
	cmd.Flags().StringVar(&socket, "socket", "", "socket path to write into the configuration (default "+protocol.DefaultSocket+")")
	cmd.Flags().StringVar(&agent, "agent-user", "", "user whose agents may connect (default: you, when not root)")
	cmd.Flags().StringVar(&approver, "approver-user", "", "user who approves (default: you, when not root)")
	cmd.Flags().StringVar(&keyBackend, "backend", signer.File, "where the principal key lives: file, transit or pkcs11")
	cmd.Flags().BoolVar(&importKey, "import", false, "transit: import the existing principal.key instead of creating a key")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "transit: a token that may create or import the key (default: the configured token_file)")
	return cmd
}

// defaultUsers names the user who runs init as agent and approver when
// neither is given: a single-user set-up, whose approvals are weak.
func defaultUsers(agent, approver string) (string, string) {
	if agent == "" && approver == "" {
		if u, err := user.Current(); err == nil && os.Geteuid() != 0 {
			return u.Username, u.Username
		}
	}
	return agent, approver
}

// writeIfAbsent creates path with content, leaving an existing file alone so
// that an admin's edits survive a second init.
func writeIfAbsent(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if errors.Is(err, fs.ErrExist) {
		fmt.Fprintf(os.Stderr, "parley-keyd: keeping the existing %s\n", path)
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func readPassphraseFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("passphrase file: %w", err)
	}
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	if len(b) == 0 {
		return nil, errors.New("passphrase file is empty")
	}
	return b, nil
}

func newPubkeyCmd() *cobra.Command {
	var state string
	cmd := &cobra.Command{
		Use:   "pubkey",
		Short: "Print the principal's public key",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			pub, err := keystore.PublicKey(state)
			if err != nil {
				return withHint(err, "create the key with: parley-keyd init --state "+state)
			}
			fmt.Println(grant.FormatPublicKey(pub))
			return nil
		},
	}
	cmd.Flags().StringVar(&state, "state", defaultState(), "state folder")
	return cmd
}
