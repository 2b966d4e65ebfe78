package backend

import (
	"crypto"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testsigner"
	"github.com/parley-keyd/parley-keyd/keyd/keystore"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
)

// TestFileBackendConformance holds the file key, opened through Open as the
// daemon opens it, to the table every backend passes (internal/testkit/testsigner).
// It has no service to go away, hang or lie; its wrong secret is a wrong
// passphrase of an encrypted key file. The cases sign with a plain key
// file: scrypt at the production work factor would make each a second.
func TestFileBackendConformance(t *testing.T) {
	const pass = "correct horse"
	encrypted := stateDir(t)
	encPub, err := keystore.Init(encrypted, []byte(pass))
	if err != nil {
		t.Fatal(err)
	}
	testsigner.Run(t, func(t *testing.T) *testsigner.Kit {
		dir := stateDir(t)
		pub, err := keystore.Init(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		return &testsigner.Kit{
			Backend: signer.File,
			Public:  pub,
			Open: func(t *testing.T) signer.Backend {
				s, err := openFile(dir, "")
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				return s
			},
			WrongSecret: func(t *testing.T) (signer.Backend, error) {
				s, err := openFile(encrypted, "wrong horse")
				if !errors.Is(err, keystore.ErrWrongPassphrase) {
					t.Errorf("Open with a wrong passphrase: %v, want keystore.ErrWrongPassphrase", err)
				}
				if s == nil {
					return nil, err
				}
				right, rerr := openFile(encrypted, pass)
				if rerr != nil {
					t.Fatalf("Open with the right passphrase after a wrong one: %v", rerr)
				}
				defer right.Close()
				if !right.Public().(ed25519.PublicKey).Equal(encPub) {
					t.Fatal("the encrypted key file opened as another key")
				}
				return s, err
			},
			Says: map[string]string{testsigner.WrongSecret: "wrong passphrase"},
		}
	})
}

func stateDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// openFile opens the key file in dir as the daemon does, with passphrase
// pass when it is encrypted.
func openFile(dir, pass string) (signer.Backend, error) {
	return Open(signer.Config{Backend: signer.File}, Options{
		FileName: filepath.Join(dir, keystore.KeyFileName),
		LoadFile: func() (crypto.Signer, error) {
			return keystore.Load(dir, func() ([]byte, error) { return []byte(pass), nil })
		}})
}
