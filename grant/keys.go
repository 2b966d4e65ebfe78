package grant

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
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

// publicKeyPrefix starts every public key string (§6.1).
const publicKeyPrefix = "ed25519:"

// FormatPublicKey returns the spec's form of pub: "ed25519:" followed by the
// b64url of its 32 bytes (§6.1).
func FormatPublicKey(pub ed25519.PublicKey) string {
	return publicKeyPrefix + b64.EncodeToString(pub)
}

// ParsePublicKey parses a key string of the form FormatPublicKey writes. It
// is strict: the lower-case prefix, exactly 43 b64url characters without
// padding, zero trailing bits, and 32 bytes that CheckPublicKey accepts. So
// each key has one spelling, keys can be compared as strings, and no key
// that parses is one for which anyone can forge a signature.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	rest, ok := strings.CutPrefix(s, publicKeyPrefix)
	if !ok {
		return nil, fmt.Errorf("public key must start with %q", publicKeyPrefix)
	}
	b, err := b64DecodeLen(rest, ed25519.PublicKeySize)
	if err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	if err := CheckPublicKey(b); err != nil {
		return nil, err
	}
	return ed25519.PublicKey(b), nil
}

// The two reasons CheckPublicKey refuses a key of 32 bytes; its errors wrap
// one of them, as do ParsePublicKey's.
var (
	// errKeyNotCanonical: the bytes are not the canonical encoding of an
	// Ed25519 point (y ≥ p, or x = 0 with the sign bit set).
	errKeyNotCanonical = errors.New("not the canonical encoding of an ed25519 point")
	// errKeySmallOrder: the key is one of the eight points of small order,
	// for which anyone can make a signature without a private key.
	errKeySmallOrder = errors.New("a small-order ed25519 point, for which anyone can forge a signature")
)

// CheckPublicKey returns nil when pub is a key that this package accepts
// anywhere a key enters (DESIGN.md property 10): 32 bytes, the canonical
// encoding of a point (RFC 8032 §5.1.3: y < p, and no sign bit on x = 0),
// and not one of the eight points of small order. It costs a few byte
// comparisons.
//
// The attack it stops is the keyless grant (issue 10 item 1). For a
// small-order key A, crypto/ed25519 accepts R = the identity and S = 0 as a
// signature of every message whose hash k makes [k]A the identity: every
// message for the identity point, one in ord(A) for the others. A grant
// held by such a key, a proof by it, a chain through it or a trusted issuer
// equal to it can therefore be used, made or extended by anyone who sees
// it. Non-canonical encodings are refused because crypto/ed25519 accepts
// them too: they would give a point a second name (and the small-order
// points six more), so that keys could no longer be compared as strings.
//
// CheckPublicKey does not decode the point, so it neither refuses an
// encoding that is not on the curve nor one of mixed order (a point of
// order 8ℓ: one of full order plus a small-order one); checking either
// needs field arithmetic that the standard library does not expose, and
// costs more than an Ed25519 verification with math/big. Neither is a
// forgery risk. An encoding that is not a point verifies no signature at
// all (crypto/ed25519 refuses it), so whatever is bound to it is unusable.
// A mixed-order key P + T verifies a signature only for whoever knows the
// discrete log of P: without it, [S]B = R + [k](P + T) cannot be met for
// the k that the hash picks. The torsion part only lets that owner make
// signatures that verifiers with and without the cofactor judge
// differently, and every verifier here is crypto/ed25519's.
func CheckPublicKey(pub ed25519.PublicKey) error {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("public key: want %d bytes, got %d", ed25519.PublicKeySize, len(pub))
	}
	if !canonicalPoint(pub) {
		return fmt.Errorf("public key: %w", errKeyNotCanonical)
	}
	// Every small-order point starts with one of these bytes; most keys
	// are done after this one comparison.
	switch pub[0] {
	case 0x00, 0x01, 0x26, 0xc7, 0xec:
		for i := range smallOrderPoints {
			if [32]byte(pub) == smallOrderPoints[i] {
				return fmt.Errorf("public key: %w", errKeySmallOrder)
			}
		}
	}
	return nil
}

// canonicalPoint reports whether b (32 bytes: y little-endian in the low
// 255 bits, the sign of x in the top bit) is a canonical encoding: y < p
// where p = 2^255 − 19, and the sign bit clear when x = 0, which is when
// y = 1 or y = p − 1. It does not check that the point is on the curve.
func canonicalPoint(b []byte) bool {
	sign, top := b[31]&0x80 != 0, b[31]&0x7f
	switch {
	case top == 0x7f && b[0] >= 0xec && all(b[1:31], 0xff):
		// y ≥ p is never canonical; y = p − 1 only with the sign clear.
		return b[0] == 0xec && !sign
	case top == 0 && b[0] == 1 && sign && all(b[1:31], 0):
		return false // y = 1, x = 0, sign set
	}
	return true
}

func all(b []byte, c byte) bool {
	for _, x := range b {
		if x != c {
			return false
		}
	}
	return true
}

// smallOrderPoints are the canonical encodings of the eight points of order
// 1, 2, 4 and 8 (the curve's group is Z/8 × Z/ℓ, so there are exactly
// eight). Non-canonical encodings of them are refused before this list is
// consulted.
var smallOrderPoints = func() (t [8][32]byte) {
	for i, h := range [8]string{
		"0100000000000000000000000000000000000000000000000000000000000000", // the identity (0, 1), order 1
		"ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f", // (0, −1), order 2
		"0000000000000000000000000000000000000000000000000000000000000000", // (±√−1, 0), order 4
		"0000000000000000000000000000000000000000000000000000000000000080",
		"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05", // order 8
		"26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
		"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
		"c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
	} {
		if _, err := hex.Decode(t[i][:], []byte(h)); err != nil {
			panic(err)
		}
	}
	return t
}()

// keyFromSeed returns the Ed25519 key of a 32-byte seed written in b64url,
// the form of the conformance vectors.
func keyFromSeed(seedB64url string) (ed25519.PrivateKey, error) {
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
	// A signer (a remote key service, say) whose key has small order
	// would sign grants and proofs that anyone could also make.
	if err := CheckPublicKey(pub); err != nil {
		return nil, fmt.Errorf("signer: %w", err)
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
	return signAs(s, pub, msg)
}

// signAs is sign for a caller that has s's key from signerKey already.
func signAs(s crypto.Signer, pub ed25519.PublicKey, msg []byte) ([]byte, error) {
	sig, err := s.Sign(nil, msg, crypto.Hash(0))
	if err != nil {
		return nil, fmt.Errorf("sign: %w", err)
	}
	if len(sig) != ed25519.SignatureSize {
		return nil, errors.New("sign: signer returned an invalid signature")
	}
	if _, ok := s.(verifiesSignatures); ok {
		return sig, nil // checked against pub by the signer (sign.go)
	}
	if !ed25519.Verify(pub, msg, sig) {
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
// comment, when present, must name the key of the seed, and may appear only
// once. Blank lines are ignored. Exactly one key line is allowed.
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
			// One reading only: a second public key line would leave
			// which one counts to the reader (property 9).
			if wantPub != "" {
				return nil, fmt.Errorf("key file: line %d: a second public key line", n+1)
			}
			wantPub = strings.TrimSpace(strings.TrimPrefix(line, keyFilePubPrefix))
			if _, err := ParsePublicKey(wantPub); err != nil {
				return nil, fmt.Errorf("key file: line %d: %w", n+1, err)
			}
		case strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, keyFileTag+" "):
			if priv != nil {
				return nil, fmt.Errorf("key file: line %d: a second key", n+1)
			}
			k, err := keyFromSeed(strings.TrimSpace(strings.TrimPrefix(line, keyFileTag+" ")))
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
	pub := priv.Public().(ed25519.PublicKey)
	if wantPub != "" && wantPub != FormatPublicKey(pub) {
		return nil, errors.New("key file: the public key comment does not match the seed")
	}
	// A seed's key is a multiple of the base point, so this never fails
	// for a real seed; it keeps every key that enters behind one check.
	if err := CheckPublicKey(pub); err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	return priv, nil
}
