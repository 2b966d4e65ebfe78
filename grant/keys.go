package grant

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
)

// b64 is the spec's b64url: base64url without padding (§6.1). Strict mode
// refuses non-zero trailing bits, so every value has exactly one spelling.
var b64 = base64.RawURLEncoding.Strict()

// b64Decode decodes s as b64url. It refuses every byte outside the
// alphabet: the standard decoder silently skips \r and \n, which would give
// one value several spellings (a token that is not byte-for-byte canonical).
func b64Decode(s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return nil, errors.New("invalid b64url character")
		}
	}
	return b64.DecodeString(s)
}

// b64DecodeLen decodes s as b64url and requires exactly n bytes.
func b64DecodeLen(s string, n int) ([]byte, error) {
	if len(s) != b64.EncodedLen(n) {
		return nil, fmt.Errorf("want %d bytes of b64url", n)
	}
	return b64Decode(s)
}

// PublicKeyPrefix starts every public key string (§6.1).
const PublicKeyPrefix = "ed25519:"

// FormatPublicKey returns the spec's form of pub: "ed25519:" followed by the
// b64url of its 32 bytes (§6.1).
func FormatPublicKey(pub ed25519.PublicKey) string {
	return PublicKeyPrefix + b64.EncodeToString(pub)
}

// ParsePublicKey parses a key string of the form FormatPublicKey writes. It
// is strict: the lower-case prefix, exactly 43 b64url characters without
// padding, zero trailing bits. So each key has one spelling and keys can be
// compared as strings.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	rest, ok := strings.CutPrefix(s, PublicKeyPrefix)
	if !ok {
		return nil, fmt.Errorf("public key must start with %q", PublicKeyPrefix)
	}
	b, err := b64DecodeLen(rest, ed25519.PublicKeySize)
	if err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	return ed25519.PublicKey(b), nil
}

// NewKey returns a new Ed25519 key made from 32 bytes read from rand
// (crypto/rand.Reader in production).
func NewKey(rand io.Reader) (ed25519.PrivateKey, error) {
	seed := make([]byte, ed25519.SeedSize)
	if _, err := io.ReadFull(rand, seed); err != nil {
		return nil, fmt.Errorf("new key: %w", err)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// KeyFromSeed returns the Ed25519 key of a 32-byte seed written in b64url,
// the form of the conformance vectors.
func KeyFromSeed(seedB64url string) (ed25519.PrivateKey, error) {
	seed, err := b64DecodeLen(seedB64url, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("seed: %w", err)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// signerKey returns the Ed25519 public key of s, or an error when s signs
// with another algorithm.
func signerKey(s crypto.Signer) (ed25519.PublicKey, error) {
	if s == nil {
		return nil, errors.New("no signer")
	}
	pub, ok := s.Public().(ed25519.PublicKey)
	if !ok || len(pub) != ed25519.PublicKeySize {
		return nil, errors.New("signer is not an ed25519 key")
	}
	return pub, nil
}

// sign signs msg with s as pure Ed25519 and checks the signature, so that a
// faulty remote signer cannot make this package hand out a broken grant.
func sign(s crypto.Signer, msg []byte) ([]byte, error) {
	pub, err := signerKey(s)
	if err != nil {
		return nil, err
	}
	sig, err := s.Sign(nil, msg, crypto.Hash(0))
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	if len(sig) != ed25519.SignatureSize || !ed25519.Verify(pub, msg, sig) {
		return nil, errors.New("sign: signer returned an invalid signature")
	}
	return sig, nil
}

// The agent key file (docs/key-file.md). It is three lines of text:
//
//	# parley agent key
//	# public key: ed25519:<b64url of the public key>
//	PARLEY-AGENT-KEY-1 <b64url of the 32-byte seed>
//
// Lines starting with '#' are comments, except that a "# public key:"
// comment, when present, must name the key of the seed. Blank lines are
// ignored. Exactly one key line is allowed.
const (
	keyFileTag       = "PARLEY-AGENT-KEY-1"
	keyFileComment   = "# parley agent key"
	keyFilePubPrefix = "# public key: "
	maxKeyFileLen    = 4096
)

// MarshalKeyFile returns the key file text for priv (docs/key-file.md).
func MarshalKeyFile(priv ed25519.PrivateKey) []byte {
	var b bytes.Buffer
	b.WriteString(keyFileComment + "\n")
	b.WriteString(keyFilePubPrefix + FormatPublicKey(priv.Public().(ed25519.PublicKey)) + "\n")
	b.WriteString(keyFileTag + " " + b64.EncodeToString(priv.Seed()) + "\n")
	return b.Bytes()
}

// ParseKeyFile parses the key file text that MarshalKeyFile writes. It is
// pure: checking the file's permissions is the caller's job.
func ParseKeyFile(data []byte) (ed25519.PrivateKey, error) {
	if len(data) > maxKeyFileLen {
		return nil, errors.New("key file: too large")
	}
	var priv ed25519.PrivateKey
	var wantPub string
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSuffix(line, "\r")
		switch {
		case strings.TrimSpace(line) == "":
		case strings.HasPrefix(line, keyFilePubPrefix):
			wantPub = strings.TrimSpace(strings.TrimPrefix(line, keyFilePubPrefix))
		case strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, keyFileTag+" "):
			if priv != nil {
				return nil, fmt.Errorf("key file: line %d: a second key", n+1)
			}
			k, err := KeyFromSeed(strings.TrimSpace(strings.TrimPrefix(line, keyFileTag+" ")))
			if err != nil {
				return nil, fmt.Errorf("key file: line %d: %w", n+1, err)
			}
			priv = k
		default:
			return nil, fmt.Errorf("key file: line %d: not a %s line", n+1, keyFileTag)
		}
	}
	if priv == nil {
		return nil, fmt.Errorf("key file: no %s line", keyFileTag)
	}
	if wantPub != "" && wantPub != FormatPublicKey(priv.Public().(ed25519.PublicKey)) {
		return nil, errors.New("key file: the public key comment does not match the seed")
	}
	return priv, nil
}
