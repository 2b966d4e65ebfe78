package main

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd"
	"github.com/parley-keyd/parley-keyd/keyd/keystore"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
	"github.com/parley-keyd/parley-keyd/keyd/signer/backend"
	"github.com/parley-keyd/parley-keyd/keyd/signer/pkcs11"
	"github.com/parley-keyd/parley-keyd/keyd/signer/transit"
	"github.com/parley-keyd/parley-keyd/policies"
	"golang.org/x/term"
)

// openSigner opens the principal key where the configuration's [key] table
// says it is: the file in the state folder, or a key service whose key must
// be the one in principal.pub.
func openSigner(cfg *keyd.Config, state, passFile string, logger *log.Logger) (signer.Backend, error) {
	o := backend.Options{FileName: filepath.Join(state, keystore.KeyFileName), Logf: logger.Printf}
	if cfg.Key.Backend == signer.File {
		o.LoadFile = func() (crypto.Signer, error) {
			s, err := keystore.Load(state, passphraseFunc(passFile))
			if err != nil {
				return nil, err
			}
			if err := s.MlockError(); err != nil {
				logger.Printf("warning: could not lock the key in memory (it may reach swap): %v", err)
			}
			return s, nil
		}
		return backend.Open(cfg.Key, o)
	}
	if err := keystore.CheckPerms(state); err != nil {
		return nil, err
	}
	pub, err := keystore.PublicKey(state)
	if err != nil {
		return nil, withHint(err, "make the key with: parley-keyd init --backend "+cfg.Key.Backend+" --state "+state)
	}
	if _, err := os.Lstat(filepath.Join(state, keystore.KeyFileName)); err == nil {
		logger.Printf("warning: %s is still on this disk although the principal key is used from the %s backend; move it offline (docs/key-service.md)",
			filepath.Join(state, keystore.KeyFileName), cfg.Key.Backend)
	}
	o.Principal = pub
	s, err := backend.Open(cfg.Key, o)
	if err != nil {
		return nil, withHint(fmt.Errorf("principal key (%s backend): %w", cfg.Key.Backend, err), "check the [key] table of the configuration (docs/key-service.md)")
	}
	return s, nil
}

// passphraseFunc returns the passphrase of an encrypted key file: from
// passFile, else asked on the terminal.
func passphraseFunc(passFile string) func() ([]byte, error) {
	return func() ([]byte, error) {
		if passFile != "" {
			return readPassphraseFile(passFile)
		}
		if !term.IsTerminal(int(os.Stdin.Fd())) {
			return nil, errors.New("the key is encrypted: pass --passphrase-file or run on a terminal")
		}
		fmt.Fprint(os.Stderr, "parley-keyd: passphrase for the principal key: ")
		p, err := term.ReadPassword(int(os.Stdin.Fd()))
		fmt.Fprintln(os.Stderr)
		return p, err
	}
}

// initKeyService is init for a principal key in a key service: it makes
// (or finds) the key there and writes its public key to principal.pub. It
// never replaces a key, and never writes a principal.pub that differs from
// one already there: services trust that one. Run as root, it writes the
// configuration as root for the daemon's user (--user, or the state
// folder's owner), as the file backend's init does, then drops to that
// user before it touches the state folder or the key service: what it
// makes there is that user's, and what it reads (the CA, the PIN, the file
// key to import) must be readable by the daemon as it will run.
func initKeyService(o initOptions) error {
	kind := o.backend
	owner, err := initOwner(o)
	if err != nil {
		return err
	}
	configPath := filepath.Join(o.configDir, "config.toml")
	if _, err := os.Stat(configPath); errors.Is(err, os.ErrNotExist) {
		if err := writeConfigFile(configPath, keyd.DefaultConfig(protocol.SocketPath(o.socket), firstOf(o.agents), firstOf(o.approvers))+signer.Template(kind), owner, o); err != nil {
			return err
		}
		if err := writeConfigFile(filepath.Join(o.configDir, "policy.toml"), policies.DefaultText(), owner, o); err != nil {
			return err
		}
		return withHint(fmt.Errorf("wrote %s with a [key.%s] table to fill in", configPath, kind),
			"set the key service's details there, then run the same init again")
	}
	// The configuration as the daemon will trust it: for its user, not
	// for root, which runs init.
	uid := uint32(os.Geteuid())
	if owner != nil {
		n, _ := strconv.ParseUint(owner.Uid, 10, 32)
		uid = uint32(n)
	}
	cfg, err := keyd.LoadConfigFor(configPath, uid)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	if cfg.Key.Backend != kind {
		return withHint(fmt.Errorf("%s says [key] backend = %q, not %q", configPath, cfg.Key.Backend, kind),
			"set backend = \""+kind+"\" in its [key] table")
	}
	if err := writeConfigFile(filepath.Join(o.configDir, "policy.toml"), policies.DefaultText(), owner, o); err != nil {
		return err
	}
	// Read what is root's before dropping to the daemon's user: the
	// admin's token and the passphrase of the file key to import.
	var tok, pass []byte
	if kind == signer.Transit {
		tokenFile := o.tokenFile
		if tokenFile == "" {
			tokenFile = cfg.Key.Transit.TokenFile
		}
		if tokenFile == "" {
			return withHint(errors.New("init needs a token that may create the transit key"), "pass --token-file")
		}
		if tok, err = signer.ReadCredential(tokenFile); err != nil {
			return err
		}
		defer clear(tok)
		if o.importKey && o.passFile != "" {
			if pass, err = readPassphraseFile(o.passFile); err != nil {
				return err
			}
			defer clear(pass)
		}
	}
	if owner != nil {
		if err := becomeDaemonUser(owner, o.state); err != nil {
			return err
		}
	} else if err := os.Mkdir(o.state, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("init state folder: %w", err)
	}
	if err := keystore.CheckPerms(o.state); err != nil {
		var pe *keystore.PermError
		if errors.As(err, &pe) {
			return withHint(err, pe.Fix)
		}
		return err
	}
	var pub []byte
	var what string
	switch kind {
	case signer.Transit:
		passphrase := passphraseFunc(o.passFile)
		if pass != nil {
			passphrase = func() ([]byte, error) { return append([]byte(nil), pass...), nil }
		}
		pub, what, err = initTransit(cfg, o.state, string(tok), passphrase, o.importKey)
	case signer.PKCS11:
		var created bool
		pub, created, err = pkcs11.Init(cfg.Key.PKCS11)
		what = "using the existing key in the token"
		if created {
			what = "generated the key in the token (not extractable)"
		}
	}
	if err != nil {
		return err
	}
	switch old, err := keystore.PublicKey(o.state); {
	case err == nil && !old.Equal(ed25519.PublicKey(pub)):
		return withHint(fmt.Errorf("%s holds another principal key than the %s key service; services trust that one", filepath.Join(o.state, keystore.PublicKeyFileName), kind),
			"use --import to move the file key into the key service, or another key name")
	case err == nil:
	default:
		if err := keystore.WritePublicKey(o.state, pub); err != nil {
			return fmt.Errorf("write %s: %w", keystore.PublicKeyFileName, err)
		}
	}
	fmt.Fprintf(os.Stderr, "parley-keyd: %s; public key in %s\n", what, filepath.Join(o.state, keystore.PublicKeyFileName))
	if o.importKey {
		fmt.Fprintf(os.Stderr, "parley-keyd: %s is still on this disk: move it to offline storage, or shred it\n", filepath.Join(o.state, keystore.KeyFileName))
	}
	fmt.Fprintln(os.Stderr, "parley-keyd: services must trust this principal key:")
	fmt.Println(grant.FormatPublicKey(pub))
	return nil
}

func initTransit(cfg *keyd.Config, state, tok string, passphrase func() ([]byte, error), importKey bool) ([]byte, string, error) {
	var seed []byte
	if importKey {
		var err error
		seed, err = keystore.ImportSeed(state, passphrase)
		if err != nil {
			return nil, "", fmt.Errorf("the file key to import: %w", err)
		}
		defer clear(seed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := transit.Init(ctx, cfg.Key.Transit, tok, seed)
	if err != nil {
		return nil, "", err
	}
	what := map[string]string{"created": "created", "imported": "imported the file key into", "existing": "using the existing key"}[res.Action]
	return res.Public, fmt.Sprintf("%s transit key %s/%s, version %d", what, cfg.Key.Transit.Mount, cfg.Key.Transit.Name, res.Version), nil
}
