// Package testkeys holds hostile Ed25519 public keys for tests: every
// encoding of every small-order point, and the signature that anyone can
// make for such a key without a private key (issue 10 item 1, keyless
// grants).
//
// A small-order key A has a "signature" that needs no private key: with R
// the identity and S = 0, crypto/ed25519 checks [0]B == R + [k]A, which
// holds whenever [k]A is the identity — always for the identity point, and
// for one hash k in ord(A) otherwise. Varying any part of the signed message
// (a timestamp, an iat) finds such a k in a few tries.
package testkeys

import (
	"crypto/ed25519"
	"encoding/hex"
)

// SmallOrderCanonical lists the eight points of order dividing 8 in their
// canonical encodings (little-endian y, the sign of x in the top bit). The
// curve's group is Z/8 × Z/ℓ, so there are exactly eight such points.
var SmallOrderCanonical = []Key{
	{"identity", mustHex("0100000000000000000000000000000000000000000000000000000000000000")},
	{"order2", mustHex("ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f")},
	{"order4-a", mustHex("0000000000000000000000000000000000000000000000000000000000000000")},
	{"order4-b", mustHex("0000000000000000000000000000000000000000000000000000000000000080")},
	{"order8-a", mustHex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05")},
	{"order8-b", mustHex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85")},
	{"order8-c", mustHex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a")},
	{"order8-d", mustHex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa")},
}

// Key is a named public key.
type Key struct {
	Name string
	Key  ed25519.PublicKey
}

func mustHex(s string) ed25519.PublicKey {
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != ed25519.PublicKeySize {
		panic("testkeys: bad key " + s)
	}
	return b
}

// SmallOrder returns every encoding of every small-order point that
// crypto/ed25519 accepts: the canonical one; y + p where that still fits in
// 255 bits (y < 19, so y = 0 and y = 1); and where x = 0 (y = 1 and
// y = p − 1), each of those with the sign bit set, which names the same
// point. That is the 8 canonical encodings and 6 others.
func SmallOrder() []Key {
	var out []Key
	for _, p := range SmallOrderCanonical {
		out = append(out, Key{p.Name, clone(p.Key)})
		y := clone(p.Key)
		y[31] &= 0x7f
		sign := p.Key[31] & 0x80
		xZero := isSmall(y, 1) || isPMinus1(y)
		if big, ok := AddP(y); ok {
			k := clone(big)
			k[31] |= sign
			out = append(out, Key{p.Name + "/y+p", k})
			if xZero {
				k := clone(big)
				k[31] |= 0x80
				out = append(out, Key{p.Name + "/y+p/x0-sign-set", k})
			}
		}
		if xZero {
			k := clone(p.Key)
			k[31] |= 0x80
			out = append(out, Key{p.Name + "/x0-sign-set", k})
		}
	}
	return out
}

// NonCanonical returns every encoding that names a point (or no point)
// another way than its canonical encoding: y ≥ p with either sign, and
// x = 0 (y = 1, y = p − 1) with the sign bit set. Forty in all.
func NonCanonical() []Key {
	var out []Key
	for v := 0; v < 19; v++ {
		y := make([]byte, 32)
		y[0] = byte(v)
		big, _ := AddP(y)
		for _, s := range []byte{0, 0x80} {
			k := clone(big)
			k[31] |= s
			out = append(out, Key{"y=p+" + itoa(v) + "/sign" + itoa(int(s>>7)), k})
		}
	}
	one := make([]byte, 32)
	one[0], one[31] = 1, 0x80
	out = append(out, Key{"y=1/sign1", one})
	out = append(out, Key{"y=p-1/sign1", mustHex("ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff")})
	return out
}

// AddP returns y + p (p = 2^255 − 19) when that is below 2^255.
func AddP(y []byte) ([]byte, bool) {
	if !all(y[1:], 0) || y[0] >= 19 {
		return nil, false
	}
	out := make([]byte, 32)
	out[0] = 0xed + y[0]
	for i := 1; i < 31; i++ {
		out[i] = 0xff
	}
	out[31] = 0x7f
	return out, true
}

func clone(b []byte) []byte { return append([]byte{}, b...) }

func all(b []byte, c byte) bool {
	for _, x := range b {
		if x != c {
			return false
		}
	}
	return true
}

func isSmall(y []byte, v byte) bool { return y[0] == v && all(y[1:], 0) }

func isPMinus1(y []byte) bool { return y[0] == 0xec && all(y[1:31], 0xff) && y[31] == 0x7f }

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return string(rune('0'+n/10)) + string(rune('0'+n%10))
}

// ForgedSig returns the keyless signature: R = the identity, S = 0.
func ForgedSig() []byte {
	s := make([]byte, ed25519.SignatureSize)
	s[0] = 1
	return s
}

// Forge returns the first i in [0, tries) for which ForgedSig verifies
// msg(i) under key, and false when there is none: for a key of small order
// one in ord(key) messages works, for any other key none does.
func Forge(key ed25519.PublicKey, tries int, msg func(i int) []byte) (int, bool) {
	sig := ForgedSig()
	for i := 0; i < tries; i++ {
		if ed25519.Verify(key, msg(i), sig) {
			return i, true
		}
	}
	return 0, false
}
