//go:build !cgo

// Package pkcs11 signs with the principal key inside a PKCS#11 token. This
// build has no cgo, which the PKCS#11 backend needs to load a module, so
// Open and Init only say so.
package pkcs11

import (
	"crypto/ed25519"
	"errors"

	"github.com/parley-keyd/parley-keyd/keyd/signer"
)

// ErrNoCgo is what Open and Init return in a build without cgo.
var ErrNoCgo = errors.New("pkcs11: this parley-keyd was built without cgo, which the PKCS#11 backend needs (build with CGO_ENABLED=1)")

// Options are what Open needs beyond the configuration.
type Options struct {
	Principal ed25519.PublicKey
	Logf      func(format string, args ...any)
}

// Signer is never returned in a build without cgo.
type Signer struct{ signer.Backend }

// Open reports ErrNoCgo.
func Open(cfg signer.PKCS11Config, opts Options) (*Signer, error) { return nil, ErrNoCgo }

// Init reports ErrNoCgo.
func Init(cfg signer.PKCS11Config) (ed25519.PublicKey, bool, error) { return nil, false, ErrNoCgo }
