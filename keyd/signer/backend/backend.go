// Package backend opens the signer that config.toml's [key] table names:
// the file key in the state folder, a transit key in OpenBao or Vault, or a
// key in a PKCS#11 token. Whatever the backend, the signer it returns
// signs pure Ed25519 only and verifies what it returns against the
// principal's public key (see package signer).
package backend

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"

	"github.com/parley-keyd/parley-keyd/keyd/signer"
	"github.com/parley-keyd/parley-keyd/keyd/signer/pkcs11"
	"github.com/parley-keyd/parley-keyd/keyd/signer/transit"
)

// Options are what Open needs besides the [key] table.
type Options struct {
	// Principal is the public key in principal.pub. The remote backends
	// refuse a key that is not this one.
	Principal ed25519.PublicKey
	// LoadFile loads the file key, for backend "file". It is called only
	// for that backend.
	LoadFile func() (crypto.Signer, error)
	// FileName names the file key in descriptions ("principal.key in
	// /var/lib/parley-keyd").
	FileName string
	// Logf receives operational messages; nil discards them.
	Logf func(format string, args ...any)
}

// Open returns the signer cfg names (cfg has passed signer.Config.Check). A
// transit service that does not answer yet does not stop the start: the
// signer it returns answers unavailable until the service does (the
// transit backend logs why).
func Open(cfg signer.Config, o Options) (signer.Backend, error) {
	switch cfg.Backend {
	case signer.File, "":
		if o.LoadFile == nil {
			return nil, errors.New("backend: no file key loader")
		}
		s, err := o.LoadFile()
		if err != nil {
			return nil, err
		}
		return &fileBackend{Signer: s, name: o.FileName}, nil
	case signer.Transit:
		s, err := transit.Open(cfg.Transit, transit.Options{Principal: o.Principal, Logf: o.Logf})
		if s != nil {
			return s, nil
		}
		return nil, err
	case signer.PKCS11:
		s, err := pkcs11.Open(cfg.PKCS11, pkcs11.Options{Principal: o.Principal, Logf: o.Logf})
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	return nil, fmt.Errorf("backend: unknown key backend %q", cfg.Backend)
}

// fileBackend is the file key with a description. It always answers.
type fileBackend struct {
	crypto.Signer
	name string
}

func (f *fileBackend) Describe() signer.Description {
	return signer.Description{Backend: signer.File, Key: f.name}
}

func (f *fileBackend) Check(context.Context) error { return nil }

func (f *fileBackend) Close() error {
	if c, ok := f.Signer.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// Unwrap returns the file key's own signer.
func (f *fileBackend) Unwrap() crypto.Signer { return f.Signer }
