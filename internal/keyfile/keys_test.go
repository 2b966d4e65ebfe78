package keyfile

import (
	"crypto/ed25519"
	"errors"
	"fmt"

	"github.com/parley-keyd/parley-keyd/grant"
)

// ReadKeyFile and WriteKeyFile are Read and Write with the format applied,
// as parley-grant applies it (cmd/parley-grant/keys.go).

func ReadKeyFile(path string) (ed25519.PrivateKey, error) {
	data, err := Read(path)
	if err != nil {
		return nil, err
	}
	priv, err := grant.ParseKeyFile(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return priv, nil
}

func WriteKeyFile(path string, priv ed25519.PrivateKey) error {
	if len(priv) != ed25519.PrivateKeySize {
		return errors.New("write key file: not an ed25519 private key")
	}
	return Write(path, grant.MarshalKeyFile(priv))
}
