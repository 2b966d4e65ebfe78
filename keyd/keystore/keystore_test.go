package keystore

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
)

func init() {
	// Keep encrypted key files quick to open in tests (2^10 instead of 2^18).
	scryptLogN = 10
}

func testMode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func testInit(t *testing.T, passphrase string) (string, ed25519.PublicKey) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	pub, err := Init(dir, []byte(passphrase))
	if err != nil {
		t.Fatalf("Init: %v", err)
	}
	return dir, pub
}

func noPassphrase(t *testing.T) func() ([]byte, error) {
	return func() ([]byte, error) {
		t.Error("passphrase asked for a plain key file")
		return nil, errors.New("no")
	}
}

func TestInitStateCreates(t *testing.T) {
	dir, pub := testInit(t, "")
	for path, want := range map[string]fs.FileMode{
		dir:                                   0o700,
		filepath.Join(dir, KeyFileName):       0o600,
		filepath.Join(dir, PublicKeyFileName): 0o644,
	} {
		if got := testMode(t, path); got != want {
			t.Errorf("%s: mode %04o, want %04o", path, got, want)
		}
	}
	if err := CheckPerms(dir); err != nil {
		t.Errorf("CheckPerms after init: %v", err)
	}
	data, _ := os.ReadFile(filepath.Join(dir, KeyFileName))
	if !bytes.Contains(data, []byte("\nPARLEY-PRINCIPAL-KEY-1 ")) || !bytes.Contains(data, []byte("# public key: "+formatPub(pub)+"\n")) {
		t.Errorf("key file not in the documented format:\n%s", data)
	}
	got, err := PublicKey(dir)
	if err != nil || !got.Equal(pub) {
		t.Errorf("PublicKey = %x, %v; want %x", got, err, pub)
	}
	pubFile, _ := os.ReadFile(filepath.Join(dir, PublicKeyFileName))
	if string(pubFile) != formatPub(pub)+"\n" {
		t.Errorf("principal.pub = %q", pubFile)
	}

	s, err := Load(dir, noPassphrase(t))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	defer s.Close()
	if !s.PublicKey().Equal(pub) || !s.Public().(ed25519.PublicKey).Equal(pub) {
		t.Error("loaded key has another public key")
	}
	if err := s.MlockError(); err != nil {
		t.Logf("mlock not available here: %v", err)
	}
}

func TestInitStateRefuses(t *testing.T) {
	t.Run("fail/overwrite", func(t *testing.T) {
		dir, _ := testInit(t, "")
		before, _ := os.ReadFile(filepath.Join(dir, KeyFileName))
		if _, err := Init(dir, nil); !errors.Is(err, ErrKeyExists) {
			t.Fatalf("second Init: %v, want ErrKeyExists", err)
		}
		after, _ := os.ReadFile(filepath.Join(dir, KeyFileName))
		if !bytes.Equal(before, after) {
			t.Error("the existing key was changed")
		}
	})
	t.Run("ok/existing-empty-folder", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "state")
		os.Mkdir(dir, 0o700)
		os.WriteFile(filepath.Join(dir, "audit.log"), nil, 0o600)
		if _, err := Init(dir, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("fail/existing-folder-0755", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "state")
		os.Mkdir(dir, 0o755)
		os.Chmod(dir, 0o755)
		_, err := Init(dir, nil)
		var pe *PermError
		if !errors.As(err, &pe) || pe.Fix != "chmod 700 "+dir {
			t.Fatalf("Init: %v, want PermError with chmod 700", err)
		}
		if _, err := os.Stat(filepath.Join(dir, KeyFileName)); err == nil {
			t.Error("a key was written into an unsafe folder")
		}
	})
}

func TestLoadKeyRefusesUnsafeState(t *testing.T) {
	tests := []struct {
		name     string
		root     bool // needs root (chown)
		setup    func(t *testing.T, dir string)
		path     string // relative to dir; "" is dir itself
		problem  string
		fix      string // with {path} for the full path
		notPerms bool   // the error is not a PermError
	}{
		{"fail/key-group-readable", false, func(t *testing.T, dir string) {
			os.Chmod(filepath.Join(dir, KeyFileName), 0o640)
		}, KeyFileName, "has mode 0640", "chmod 600 {path}", false},
		{"fail/key-other-readable", false, func(t *testing.T, dir string) {
			os.Chmod(filepath.Join(dir, KeyFileName), 0o604)
		}, KeyFileName, "has mode 0604", "chmod 600 {path}", false},
		{"fail/key-owner-executable", false, func(t *testing.T, dir string) {
			os.Chmod(filepath.Join(dir, KeyFileName), 0o700)
		}, KeyFileName, "has mode 0700", "chmod 600 {path}", false},
		{"fail/key-wrong-owner", true, func(t *testing.T, dir string) {
			os.Chown(filepath.Join(dir, KeyFileName), 65534, 65534)
		}, KeyFileName, "is owned by", "chown root {path}", false},
		{"fail/key-symlink", false, func(t *testing.T, dir string) {
			key := filepath.Join(dir, KeyFileName)
			os.Rename(key, key+".real")
			os.Symlink(key+".real", key)
		}, KeyFileName, "is a symbolic link", `mv "$(readlink -f {path})" {path}`, false},
		{"fail/key-is-folder", false, func(t *testing.T, dir string) {
			key := filepath.Join(dir, KeyFileName)
			os.Remove(key)
			os.Mkdir(key, 0o700)
		}, KeyFileName, "is not a regular file", "restore the key file", false},
		{"fail/dir-0755", false, func(t *testing.T, dir string) {
			os.Chmod(dir, 0o755)
		}, "", "has mode 0755", "chmod 700 {path}", false},
		{"fail/dir-0710", false, func(t *testing.T, dir string) {
			os.Chmod(dir, 0o710)
		}, "", "has mode 0710", "chmod 700 {path}", false},
		{"fail/dir-wrong-owner", true, func(t *testing.T, dir string) {
			// Never "chown root": the folder is the daemon's user's,
			// and root ran the command by mistake.
			os.Chown(dir, 65534, 65534)
		}, "", "is owned by", "run this as nobody, who owns the folder (sudo -u nobody parley-keyd …)", false},
		{"fail/pub-writable", false, func(t *testing.T, dir string) {
			os.Chmod(filepath.Join(dir, PublicKeyFileName), 0o666)
		}, PublicKeyFileName, "others can replace the public key", "chmod 644 {path}", false},
		{"fail/pub-mismatch", false, func(t *testing.T, dir string) {
			other, _, _ := ed25519.GenerateKey(nil)
			os.WriteFile(filepath.Join(dir, PublicKeyFileName), []byte(formatPub(other)+"\n"), 0o644)
		}, PublicKeyFileName, "does not match the principal key", "", true},
		{"fail/comment-mismatch", false, func(t *testing.T, dir string) {
			key := filepath.Join(dir, KeyFileName)
			data, _ := os.ReadFile(key)
			other, _, _ := ed25519.GenerateKey(nil)
			lines := strings.Split(string(data), "\n")
			lines[1] = "# public key: " + formatPub(other)
			os.WriteFile(key, []byte(strings.Join(lines, "\n")), 0o600)
		}, KeyFileName, "public key comment does not match", "", true},
		{"fail/missing-key", false, func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, KeyFileName))
		}, KeyFileName, "run parley-keyd init", "", true},
		{"fail/garbage-key", false, func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, KeyFileName), []byte("PARLEY-PRINCIPAL-KEY-1 short\n"), 0o600)
		}, KeyFileName, "not 32 bytes", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root {
				testpeer.RequireRoot(t)
			}
			dir, _ := testInit(t, "")
			tt.setup(t, dir)
			path := filepath.Join(dir, tt.path)
			s, err := Load(dir, noPassphrase(t))
			if err == nil {
				s.Close()
				t.Fatal("Load succeeded")
			}
			if !strings.Contains(err.Error(), tt.problem) {
				t.Errorf("error %q does not say %q", err, tt.problem)
			}
			var pe *PermError
			if tt.notPerms {
				if errors.As(err, &pe) {
					t.Errorf("unexpected PermError %v", err)
				}
				return
			}
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is not a PermError", err)
			}
			fix := strings.ReplaceAll(tt.fix, "{path}", path)
			if pe.Path != path || !strings.HasPrefix(pe.Fix, fix) {
				t.Errorf("got path %q fix %q, want %q and %q", pe.Path, pe.Fix, path, fix)
			}
		})
	}
}

func TestLoadKeyAccepts0400AndRewritesMissingPub(t *testing.T) {
	dir, pub := testInit(t, "")
	os.Chmod(filepath.Join(dir, KeyFileName), 0o400)
	os.Remove(filepath.Join(dir, PublicKeyFileName))
	s, err := Load(dir, noPassphrase(t))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	got, err := PublicKey(dir)
	if err != nil || !got.Equal(pub) {
		t.Errorf("principal.pub after Load: %x, %v", got, err)
	}
	if m := testMode(t, filepath.Join(dir, PublicKeyFileName)); m != 0o644 {
		t.Errorf("rewritten principal.pub has mode %04o", m)
	}
}

func TestKeyEncrypted(t *testing.T) {
	const pass = "correct horse battery staple"
	dir, pub := testInit(t, pass)
	data, _ := os.ReadFile(filepath.Join(dir, KeyFileName))
	if !bytes.HasPrefix(data, []byte(armorMagic)) || bytes.Contains(data, []byte("PARLEY-PRINCIPAL-KEY-1")) {
		t.Fatalf("key file is not age-armored:\n%s", data)
	}
	if got, err := PublicKey(dir); err != nil || !got.Equal(pub) {
		t.Errorf("PublicKey without passphrase: %x, %v", got, err)
	}

	tests := []struct {
		name    string
		pass    func() ([]byte, error)
		wantErr error
		want    string
	}{
		{"ok/right-passphrase", func() ([]byte, error) { return []byte(pass), nil }, nil, ""},
		{"fail/wrong-passphrase", func() ([]byte, error) { return []byte("tr0ub4dor&3"), nil }, ErrWrongPassphrase, "wrong passphrase for the principal key"},
		{"fail/empty-passphrase", func() ([]byte, error) { return nil, nil }, nil, "passphrase"},
		{"fail/passphrase-source-fails", func() ([]byte, error) { return nil, errors.New("no terminal") }, nil, "read passphrase: no terminal"},
		{"fail/no-passphrase-source", nil, nil, "is encrypted and no passphrase was given"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			var src func() ([]byte, error)
			var given []byte
			if tt.pass != nil {
				src = func() ([]byte, error) {
					calls++
					b, err := tt.pass()
					given = b
					return b, err
				}
			}
			s, err := Load(dir, src)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				defer s.Close()
				if !s.PublicKey().Equal(pub) {
					t.Error("decrypted key has another public key")
				}
				if calls != 1 {
					t.Errorf("passphrase asked %d times", calls)
				}
				if !bytes.Equal(given, make([]byte, len(given))) {
					t.Error("passphrase bytes were not zeroed")
				}
				return
			}
			if err == nil {
				s.Close()
				t.Fatal("Load succeeded")
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("error %v is not %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
		})
	}
}

func TestFileSignerSign(t *testing.T) {
	dir, pub := testInit(t, "")
	s, err := Load(dir, noPassphrase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	msg := []byte("parley grant block")
	tests := []struct {
		name string
		opts crypto.SignerOpts
		ok   bool
	}{
		{"ok/hash-0", crypto.Hash(0), true},
		{"ok/ed25519-options-pure", &ed25519.Options{}, true},
		{"fail/sha512-prehash", crypto.SHA512, false},
		{"fail/ed25519ph", &ed25519.Options{Hash: crypto.SHA512}, false},
		{"fail/context", &ed25519.Options{Context: "ctx"}, false},
		{"fail/nil-opts", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sig, err := s.Sign(nil, msg, tt.opts)
			if !tt.ok {
				if err == nil {
					t.Fatal("Sign succeeded")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !ed25519.Verify(pub, msg, sig) {
				t.Error("signature does not verify with the principal public key")
			}
		})
	}
}

func TestFileSignerCloseZeroes(t *testing.T) {
	dir, _ := testInit(t, "")
	s, err := Load(dir, noPassphrase(t))
	if err != nil {
		t.Fatal(err)
	}
	keyAddr := &s.key[0]
	if bytes.Equal(s.key, make([]byte, len(s.key))) {
		t.Fatal("key is all zero before Close")
	}
	var wiped bool
	onWipe = func(page []byte) {
		wiped = true
		if &page[0] != keyAddr {
			t.Error("Close wiped another page than the key's")
		}
		if !bytes.Equal(page, make([]byte, len(page))) {
			t.Error("key page not zeroed by Close")
		}
	}
	defer func() { onWipe = nil }()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !wiped {
		t.Fatal("Close did not wipe the key")
	}
	if _, err := s.Sign(nil, []byte("x"), crypto.Hash(0)); err == nil {
		t.Error("Sign after Close succeeded")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestKeystoreParse(t *testing.T) {
	seed := bytes.Repeat([]byte{7}, 32)
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	good := string(marshal(seed, pub))
	tests := []struct {
		name, in, err string
	}{
		{"ok/marshalled", good, ""},
		{"ok/no-comments-no-final-newline", "PARLEY-PRINCIPAL-KEY-1 BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc", ""},
		{"fail/empty", "", "no PARLEY-PRINCIPAL-KEY-1 line"},
		{"fail/two-keys", good + "PARLEY-PRINCIPAL-KEY-1 BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc\n", "a second key"},
		{"fail/padded", "PARLEY-PRINCIPAL-KEY-1 BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n", "not 32 bytes"},
		{"fail/std-alphabet", "PARLEY-PRINCIPAL-KEY-1 BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHB+c\n", "not 32 bytes"},
		{"fail/agent-key", "PARLEY-AGENT-KEY-1 BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc\n", "line 1: not a parley principal key file"},
		{"fail/crlf", "PARLEY-PRINCIPAL-KEY-1 BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc\r\n", "not 32 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got [32]byte
			_, err := parse([]byte(tt.in), &got)
			if tt.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got[:], seed) {
					t.Errorf("seed %x", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("error %v, want %q", err, tt.err)
			}
			if err != nil && strings.Contains(err.Error(), "BwcH") {
				t.Errorf("error %q echoes key material", err)
			}
		})
	}
}

// FuzzKeystoreParse checks that the key file parser never panics, never
// puts key material in an error, and reads back what marshal wrote.
func FuzzKeystoreParse(f *testing.F) {
	seed := bytes.Repeat([]byte{7}, 32)
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	f.Add(marshal(seed, pub))
	f.Add([]byte("PARLEY-PRINCIPAL-KEY-1 BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc"))
	f.Add([]byte("# public key: ed25519:x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var got [32]byte
		comment, err := parse(data, &got)
		if err != nil {
			// Errors are fixed sentences with a line number: never input.
			msg := regexp.MustCompile(`^line \d+: `).ReplaceAllString(err.Error(), "")
			switch msg {
			case "no PARLEY-PRINCIPAL-KEY-1 line", "a second key", "not an ed25519: public key",
				"the seed is not 32 bytes of unpadded base64url", "not a parley principal key file":
			default:
				t.Errorf("unexpected error text %q", err)
			}
			return
		}
		again := marshal(got[:], ed25519.NewKeyFromSeed(got[:]).Public().(ed25519.PublicKey))
		var seed2 [32]byte
		if _, err := parse(again, &seed2); err != nil || seed2 != got {
			t.Errorf("re-marshalled key does not parse to the same seed: %v", err)
		}
		if comment != nil && len(comment) != ed25519.PublicKeySize {
			t.Errorf("comment key of %d bytes", len(comment))
		}
	})
}
