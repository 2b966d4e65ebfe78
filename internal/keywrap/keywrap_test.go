package keywrap

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The vectors of RFC 5649 §6.
func TestRFC5649Vectors(t *testing.T) {
	kek := "5840df6e29b02af1ab493b705bf16ea1ae8338f4dcc176a8"
	for _, tc := range []struct{ name, key, wrapped string }{
		{"ok/20-bytes", "c37b7e6492584340bed12207808941155068f738", "138bdeaa9b8fa7fc61f97742e72248ee5ae6ae5360d1ae6a5f54f373fa543b6a"},
		{"ok/7-bytes", "466f7250617369", "afbeb0f07dfbf5419200f2ccb50bb24f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Wrap(unhex(t, kek), unhex(t, tc.key))
			if err != nil {
				t.Fatal(err)
			}
			if want := unhex(t, tc.wrapped); !bytes.Equal(got, want) {
				t.Fatalf("Wrap = %x, want %x", got, want)
			}
			back, err := Unwrap(unhex(t, kek), got)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back, unhex(t, tc.key)) {
				t.Fatalf("Unwrap = %x, want %x", back, tc.key)
			}
		})
	}
}

func TestRoundTripAndTamper(t *testing.T) {
	kek := make([]byte, 32)
	rand.Read(kek)
	for _, n := range []int{1, 7, 8, 9, 16, 32, 48, 100} {
		p := make([]byte, n)
		rand.Read(p)
		c, err := Wrap(kek, p)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := Unwrap(kek, c); err != nil || !bytes.Equal(got, p) {
			t.Fatalf("n=%d: Unwrap = %x, %v", n, got, err)
		}
		for i := range c {
			bad := bytes.Clone(c)
			bad[i] ^= 1
			if _, err := Unwrap(kek, bad); !errors.Is(err, ErrUnwrap) {
				t.Fatalf("n=%d: a flipped bit %d unwrapped: %v", n, i, err)
			}
		}
		other := bytes.Clone(kek)
		other[0] ^= 1
		if _, err := Unwrap(other, c); !errors.Is(err, ErrUnwrap) {
			t.Fatalf("n=%d: another key unwrapped: %v", n, err)
		}
	}
	if _, err := Unwrap(kek, make([]byte, 12)); !errors.Is(err, ErrUnwrap) {
		t.Fatal("a ciphertext not a multiple of 8 unwrapped")
	}
	if _, err := Wrap(kek, nil); err == nil {
		t.Fatal("an empty plaintext wrapped")
	}
}

func FuzzUnwrap(f *testing.F) {
	seed, _ := hex.DecodeString("afbeb0f07dfbf5419200f2ccb50bb24f")
	kek, _ := hex.DecodeString("5840df6e29b02af1ab493b705bf16ea1ae8338f4dcc176a8")
	f.Add(seed)
	f.Add(make([]byte, 24))
	f.Fuzz(func(t *testing.T, c []byte) {
		p, err := Unwrap(kek, c)
		if err != nil {
			return
		}
		// What unwraps must wrap back to the same bytes.
		again, err := Wrap(kek, p)
		if err != nil || !bytes.Equal(again, c) {
			t.Fatalf("Unwrap then Wrap changed %x into %x (%v)", c, again, err)
		}
	})
}
