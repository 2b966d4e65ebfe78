package transit

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"github.com/openbao/openbao/api/v2"
	"github.com/parley-keyd/parley-keyd/internal/keywrap"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
)

const initTimeout = 30 * time.Second

// InitResult says what Init did.
type InitResult struct {
	Public  ed25519.PublicKey
	Version int
	// Action is "created", "imported" or "existing" (the key was there
	// already, as on the second host of a cluster).
	Action string
}

// Init makes the daemon's transit key with token, which (unlike the
// daemon's own token) may create or import keys. Without seed it creates a
// new ed25519 key; with seed (the file key's 32-byte seed) it imports that
// key through the engine's BYOK import, so that services keep trusting the
// same principal. A key that exists already is used as it is, never
// replaced; importing over a different existing key is an error. The key is
// made neither exportable nor backed up in plaintext. Init returns the
// public key of the version the daemon will pin.
func Init(ctx context.Context, cfg signer.TransitConfig, token string, seed []byte) (*InitResult, error) {
	// An admin runs this once; a service may take its time to make a key
	// (or its wrapping key). ctx bounds the whole.
	cfg.Timeout.Duration = max(cfg.Timeout.Duration, initTimeout)
	c, err := newClient(cfg, cfg.Addresses[0])
	if err != nil {
		return nil, err
	}
	c.SetToken(token)
	s := &Signer{cfg: cfg, clients: []*api.Client{c}}
	for _, addr := range cfg.Addresses[1:] {
		cc, err := newClient(cfg, addr)
		if err != nil {
			return nil, err
		}
		cc.SetToken(token)
		s.clients = append(s.clients, cc)
	}
	var want ed25519.PublicKey
	if seed != nil {
		if len(seed) != ed25519.SeedSize {
			return nil, errors.New("transit: the key to import is not a 32-byte Ed25519 seed")
		}
		want = ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	}
	info, err := s.readKey(ctx)
	action := "existing"
	switch {
	case errors.Is(err, errNoKey) && seed == nil:
		action = "created"
		err = s.attempt(ctx, func(ctx context.Context, c *api.Client) error {
			_, err := c.Logical().WriteWithContext(ctx, s.keyPath(), map[string]any{
				"type": "ed25519", "exportable": false, "allow_plaintext_backup": false,
			})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("transit: creating %s: %w", s.keyPath(), err)
		}
	case errors.Is(err, errNoKey):
		action = "imported"
		if err := s.importKey(ctx, seed); err != nil {
			return nil, fmt.Errorf("transit: importing into %s: %w", s.keyPath(), err)
		}
	case err != nil:
		return nil, fmt.Errorf("transit: reading %s: %w", s.keyPath(), err)
	}
	if action != "existing" {
		if info, err = s.readBack(ctx); err != nil {
			return nil, fmt.Errorf("transit: reading %s back: %w", s.keyPath(), err)
		}
	}
	ver := int64(cfg.Version)
	if ver == 0 {
		ver = info.latest
	}
	pub, ok := info.public[ver]
	switch {
	case info.typ != "ed25519":
		return nil, fmt.Errorf("transit: %s has type %q, not ed25519", s.keyPath(), info.typ)
	case !ok:
		return nil, fmt.Errorf("transit: %s has no version %d", s.keyPath(), ver)
	case want != nil && !pub.Equal(want):
		// Never replace a key that exists: services trust it.
		return nil, fmt.Errorf("transit: %s exists and holds another key than the one to import; choose another key.transit.name", s.keyPath())
	case info.exportable || info.plaintextBackup:
		return nil, fmt.Errorf("transit: %s is exportable or allows plaintext backup; the daemon will refuse it (docs/key-service.md)", s.keyPath())
	}
	return &InitResult{Public: pub, Version: int(ver), Action: action}, nil
}

// importKey sends seed through the BYOK import: an ephemeral AES-256 key
// encrypted with RSA-OAEP (SHA-256) under the engine's wrapping key, followed
// by the PKCS#8 private key wrapped with AES-KWP (RFC 5649) under the
// ephemeral key.
func (s *Signer) importKey(ctx context.Context, seed []byte) error {
	var wrapPEM string
	err := s.attempt(ctx, func(ctx context.Context, c *api.Client) error {
		sec, err := c.Logical().ReadWithContext(ctx, s.cfg.Mount+"/wrapping_key")
		if err != nil {
			return err
		}
		if sec == nil || sec.Data == nil {
			return &localError{errors.New("no wrapping key")}
		}
		wrapPEM, _ = sec.Data["public_key"].(string)
		return nil
	})
	if err != nil {
		return fmt.Errorf("wrapping key: %w", err)
	}
	ct, err := wrapForImport(wrapPEM, seed)
	if err != nil {
		return err
	}
	return s.attempt(ctx, func(ctx context.Context, c *api.Client) error {
		_, err := c.Logical().WriteWithContext(ctx, s.keyPath()+"/import", map[string]any{
			"ciphertext": base64.StdEncoding.EncodeToString(ct), "type": "ed25519", "hash_function": "SHA256",
			"exportable": false, "allow_plaintext_backup": false,
		})
		return err
	})
}

// wrapForImport builds the BYOK ciphertext for seed under the PEM RSA
// wrapping key.
func wrapForImport(wrapPEM string, seed []byte) ([]byte, error) {
	blk, _ := pem.Decode([]byte(wrapPEM))
	if blk == nil {
		return nil, errors.New("the wrapping key is not PEM")
	}
	parsed, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("wrapping key: %w", err)
	}
	rk, ok := parsed.(*rsa.PublicKey)
	if !ok || rk.Size() != 512 {
		// The engine splits the ciphertext after 512 bytes: its wrapping
		// key is RSA-4096.
		return nil, errors.New("the wrapping key is not an RSA-4096 key")
	}
	priv := ed25519.NewKeyFromSeed(seed)
	defer clear(priv)
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	defer clear(der)
	eph := make([]byte, 32)
	defer clear(eph)
	if _, err := rand.Read(eph); err != nil {
		return nil, err
	}
	wrappedEph, err := rsa.EncryptOAEP(sha256.New(), rand.Reader, rk, eph, nil)
	if err != nil {
		return nil, err
	}
	wrappedKey, err := keywrap.Wrap(eph, der)
	if err != nil {
		return nil, err
	}
	return append(wrappedEph, wrappedKey...), nil
}

// readBack reads the key just made. A standby that took the request (and
// forwarded it to the leader) serves reads from what raft replicated to it,
// and says the key does not exist until it has it: try again, within ctx.
func (s *Signer) readBack(ctx context.Context) (*keyInfo, error) {
	for {
		info, err := s.readKey(ctx)
		if !errors.Is(err, errNoKey) {
			return info, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (not yet replicated to the node that answered, within the deadline)", err)
		case <-time.After(200 * time.Millisecond): // a remote condition, within ctx
		}
	}
}
