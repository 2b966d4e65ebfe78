package grant

import (
	"bytes"
	"crypto/ed25519"
	"strings"
	"testing"
)

const principalPub = "ed25519:iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w"

func TestParsePublicKey(t *testing.T) {
	ok := principalPub
	tests := []struct {
		name, in string
	}{
		{"fail/no-prefix", strings.TrimPrefix(ok, "ed25519:")},
		{"fail/upper-prefix", "ED25519:" + strings.TrimPrefix(ok, "ed25519:")},
		{"fail/other-algorithm", "x25519:" + strings.TrimPrefix(ok, "ed25519:")},
		{"fail/padding", ok + "="},
		{"fail/short", ok[:len(ok)-1]},
		{"fail/long", ok + "A"},
		{"fail/std-alphabet", "ed25519:6kpsY+KcUgq+9VB7Ey7F+ZVHdq6+vnuSQh7qaRRG0iw"},
		// The last character carries two unused bits; 'x' sets them where
		// 'w' does not, so it would be a second spelling of the same key.
		{"fail/nonzero-trailing-bits", ok[:len(ok)-1] + "x"},
		{"fail/newline-inside", ok[:20] + "\n" + ok[20:len(ok)-1]},
		{"fail/empty", ""},
	}
	if _, err := ParsePublicKey(ok); err != nil {
		t.Fatalf("ParsePublicKey(%q): %v", ok, err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if k, err := ParsePublicKey(tt.in); err == nil {
				t.Errorf("ParsePublicKey(%q) = %x, want an error", tt.in, k)
			}
		})
	}
}

func TestKeyFromSeed(t *testing.T) {
	k := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	if got, want := FormatPublicKey(k.Public().(ed25519.PublicKey)), "ed25519:6kpsY-KcUgq-9VB7Ey7F-ZVHdq6-vnuSQh7qaRRG0iw"; got != want {
		t.Errorf("the key of seed 7…: %s, want %s", got, want)
	}
	if k2, err := keyFromSeed("BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc"); err != nil || !k2.Equal(k) {
		t.Errorf("keyFromSeed of seed 7…: %v", err)
	}
	if _, err := keyFromSeed("AAAA"); err == nil {
		t.Error("keyFromSeed with a short seed: no error")
	}
}

func TestKeyFile(t *testing.T) {
	k, err := keyFromSeed("AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI")
	if err != nil {
		t.Fatal(err)
	}
	data := MarshalKeyFile(k)
	want := "# parley agent key\n" +
		"# public key: ed25519:gTl3Dqh9F19Wo1Rmw0x-zMuNipG07jeiXfYPW4_Js5Q\n" +
		"PARLEY-AGENT-KEY-1 AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI\n"
	if string(data) != want {
		t.Fatalf("MarshalKeyFile:\n%s\nwant\n%s", data, want)
	}
	got, err := ParseKeyFile(data)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(k) {
		t.Error("ParseKeyFile does not give back the key")
	}

	keyLine := "PARLEY-AGENT-KEY-1 AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI"
	okCases := []struct{ name, in string }{
		{"ok/key-line-only", keyLine},
		{"ok/crlf-and-blank-lines", "# parley agent key\r\n\r\n" + keyLine + "\r\n"},
		{"ok/other-comments", "# written by hand\n" + keyLine + "\n# end\n"},
	}
	for _, tt := range okCases {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseKeyFile([]byte(tt.in))
			if err != nil || !got.Equal(k) {
				t.Errorf("ParseKeyFile: %v", err)
			}
		})
	}
	failCases := []struct{ name, in string }{
		{"fail/empty", ""},
		{"fail/comments-only", "# parley agent key\n"},
		{"fail/two-keys", keyLine + "\n" + keyLine + "\n"},
		{"fail/wrong-public-comment", "# public key: " + principalPub + "\n" + keyLine + "\n"},
		{"fail/two-public-comments", "# public key: ed25519:gTl3Dqh9F19Wo1Rmw0x-zMuNipG07jeiXfYPW4_Js5Q\n# public key: ed25519:gTl3Dqh9F19Wo1Rmw0x-zMuNipG07jeiXfYPW4_Js5Q\n" + keyLine + "\n"},
		{"fail/small-order-public-comment", "# public key: ed25519:AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n" + keyLine + "\n"},
		{"fail/unknown-line", keyLine + "\nsomething else\n"},
		{"fail/other-version", "PARLEY-AGENT-KEY-2 AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI\n"},
		{"fail/short-seed", "PARLEY-AGENT-KEY-1 AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAg\n"},
		{"fail/padded-seed", keyLine + "=\n"},
		{"fail/too-large", keyLine + "\n" + strings.Repeat("#\n", 3000)},
	}
	for _, tt := range failCases {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseKeyFile([]byte(tt.in)); err == nil {
				t.Error("ParseKeyFile: no error")
			}
		})
	}
}
