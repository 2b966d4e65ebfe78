package main

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/keyfile"
)

// agentKeyEnv names the environment variable that overrides the default
// agent key path.
const agentKeyEnv = "PARLEY_AGENT_KEY"

// agentKeyPath returns the agent key file to use: flag when it is set, else
// $PARLEY_AGENT_KEY, else $XDG_CONFIG_HOME/parley/agent.key, else
// ~/.config/parley/agent.key. It returns "" when none of these can be
// known (no home directory).
func agentKeyPath(flag string) string {
	if flag != "" {
		return flag
	}
	if p := os.Getenv(agentKeyEnv); p != "" {
		return p
	}
	// The XDG base directory spec ignores a relative XDG_CONFIG_HOME.
	if dir := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(dir) {
		return filepath.Join(dir, "parley", "agent.key")
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		return filepath.Join(home, ".config", "parley", "agent.key")
	}
	return ""
}

// loadAgentKey reads the agent key file that agentKeyPath(flag) names. A
// missing file is an error whose hint says how to create one.
func loadAgentKey(flag string) (ed25519.PrivateKey, error) {
	path := agentKeyPath(flag)
	if path == "" {
		return nil, fail(errors.New("no agent key file: no home directory to find it in"),
			"name one with --key FILE or "+agentKeyEnv)
	}
	key, err := readAgentKeyFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fail(fmt.Errorf("no agent key at %s", path), "create one with: parley-grant keygen")
	case err != nil:
		return nil, fail(err, "")
	}
	return key, nil
}

// readAgentKeyFile reads the key file at path (keyfile.Read checks who may
// reach it) and parses it.
func readAgentKeyFile(path string) (ed25519.PrivateKey, error) {
	data, err := keyfile.Read(path)
	if err != nil {
		return nil, err
	}
	priv, err := grant.ParseKeyFile(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return priv, nil
}

// writeAgentKeyFile writes priv to a new key file at path (keyfile.Write).
func writeAgentKeyFile(path string, priv ed25519.PrivateKey) error {
	if len(priv) != ed25519.PrivateKeySize {
		return errors.New("write key file: not an ed25519 private key")
	}
	return keyfile.Write(path, grant.MarshalKeyFile(priv))
}
