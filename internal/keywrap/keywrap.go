// Package keywrap implements AES key wrap with padding (KWP, RFC 5649), the
// wrapping the transit engine's key import (BYOK) expects around the key
// material. Unwrap checks the integrity value and the padding and reveals
// nothing about which check failed.
package keywrap

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/subtle"
	"encoding/binary"
	"errors"
)

// aiv is the alternative initial value's constant half (RFC 5649 §3).
var aiv = [4]byte{0xa6, 0x59, 0x59, 0xa6}

// ErrUnwrap is returned by Unwrap for a ciphertext that is not a KWP wrap of
// anything under the key.
var ErrUnwrap = errors.New("keywrap: integrity check failed")

// MaxPlaintext bounds what Wrap and Unwrap handle; keys are far smaller.
const MaxPlaintext = 1 << 20

// Wrap wraps plaintext (1 to MaxPlaintext bytes) under kek, an AES key of
// 16, 24 or 32 bytes.
func Wrap(kek, plaintext []byte) ([]byte, error) {
	if len(plaintext) == 0 || len(plaintext) > MaxPlaintext {
		return nil, errors.New("keywrap: plaintext must be 1 byte to 1 MiB")
	}
	b, err := aes.NewCipher(kek)
	if err != nil {
		return nil, err
	}
	n := (len(plaintext) + 7) / 8
	out := make([]byte, 8+8*n)
	copy(out[:4], aiv[:])
	binary.BigEndian.PutUint32(out[4:8], uint32(len(plaintext)))
	copy(out[8:], plaintext) // the rest of out is the zero padding
	if n == 1 {
		// One block: a single AES encryption of AIV || P (§4.1).
		b.Encrypt(out, out)
		return out, nil
	}
	wrap(b, out, n)
	return out, nil
}

// wrap is the RFC 3394 wrapping process W over buf = A || R[1..n], in place.
func wrap(b cipher.Block, buf []byte, n int) {
	var blk [16]byte
	for j := 0; j < 6; j++ {
		for i := 1; i <= n; i++ {
			copy(blk[:8], buf[:8])
			copy(blk[8:], buf[8*i:8*i+8])
			b.Encrypt(blk[:], blk[:])
			t := uint64(n*j + i)
			binary.BigEndian.PutUint64(buf[:8], binary.BigEndian.Uint64(blk[:8])^t)
			copy(buf[8*i:8*i+8], blk[8:])
		}
	}
}

// unwrap is the inverse of wrap, in place.
func unwrap(b cipher.Block, buf []byte, n int) {
	var blk [16]byte
	for j := 5; j >= 0; j-- {
		for i := n; i >= 1; i-- {
			t := uint64(n*j + i)
			binary.BigEndian.PutUint64(blk[:8], binary.BigEndian.Uint64(buf[:8])^t)
			copy(blk[8:], buf[8*i:8*i+8])
			b.Decrypt(blk[:], blk[:])
			copy(buf[:8], blk[:8])
			copy(buf[8*i:8*i+8], blk[8:])
		}
	}
}

// Unwrap returns the plaintext that Wrap wrapped under kek, or ErrUnwrap.
func Unwrap(kek, ciphertext []byte) ([]byte, error) {
	if len(ciphertext) < 16 || len(ciphertext)%8 != 0 || len(ciphertext) > MaxPlaintext+16 {
		return nil, ErrUnwrap
	}
	b, err := aes.NewCipher(kek)
	if err != nil {
		return nil, err
	}
	buf := append([]byte(nil), ciphertext...)
	n := len(buf)/8 - 1
	if n == 1 {
		b.Decrypt(buf, buf)
	} else {
		unwrap(b, buf, n)
	}
	// §3: the AIV's constant, a length that fits the blocks, and zero
	// padding. Every check runs, so timing does not say which failed.
	mli := int(binary.BigEndian.Uint32(buf[4:8]))
	ok := subtle.ConstantTimeCompare(buf[:4], aiv[:])
	ok &= subtle.ConstantTimeLessOrEq(8*(n-1)+1, mli) & subtle.ConstantTimeLessOrEq(mli, 8*n)
	var pad byte
	for i := 8; i < len(buf); i++ {
		// Bytes past 8+mli must be zero.
		past := subtle.ConstantTimeLessOrEq(8+mli, i)
		pad |= byte(past) * buf[i]
	}
	ok &= subtle.ConstantTimeByteEq(pad, 0)
	if ok != 1 {
		clear(buf)
		return nil, ErrUnwrap
	}
	return buf[8 : 8+mli : 8+mli], nil
}
