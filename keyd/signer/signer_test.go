package signer

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReadCredential(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	for _, tc := range []struct {
		name, content string
		mode          os.FileMode
		want, fail    string
	}{
		{"ok/first-line", "s.token\nignored\n", 0o600, "s.token", ""},
		{"ok/crlf", "1234\r\n", 0o400, "1234", ""},
		{"ok/group-readable", "s.t", 0o640, "s.t", ""},
		{"fail/world-readable", "s.t", 0o644, "", "others may read it"},
		{"fail/empty", "\n", 0o600, "", "is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadCredential(write(strings.ReplaceAll(tc.name, "/", "-"), tc.content, tc.mode))
			if tc.fail != "" {
				if err == nil || !strings.Contains(err.Error(), tc.fail) {
					t.Fatalf("err = %v, want %q", err, tc.fail)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %q, %v", got, err)
			}
		})
	}
	t.Run("fail/relative-without-systemd", func(t *testing.T) {
		t.Setenv(CredentialsEnv, "")
		if _, err := ReadCredential("bao-token"); err == nil || !strings.Contains(err.Error(), "$CREDENTIALS_DIRECTORY is not set") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("ok/systemd-credential", func(t *testing.T) {
		write("bao-token", "s.cred", 0o400)
		t.Setenv(CredentialsEnv, dir)
		got, err := ReadCredential("bao-token")
		if err != nil || string(got) != "s.cred" {
			t.Fatalf("got %q, %v", got, err)
		}
		// A credential name cannot climb out of the credentials folder.
		if _, err := ReadCredential("../etc/shadow"); err == nil {
			t.Fatal("read a path outside $CREDENTIALS_DIRECTORY")
		}
	})
	t.Run("fail/not-a-file", func(t *testing.T) {
		if _, err := ReadCredential(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestConfigDefaults(t *testing.T) {
	c := Config{Backend: Transit, Transit: TransitConfig{Addresses: []string{"https://bao:8200"}, TokenFile: "t"}}
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	tr := c.Transit
	if tr.Mount != "transit" || tr.Name != "parley-principal" || tr.AppRoleMount != "approle" || tr.Timeout.Duration != 3*time.Second {
		t.Fatalf("defaults = %+v", tr)
	}
	var empty Config
	if err := empty.Check(); err != nil || empty.Backend != File {
		t.Fatalf("empty config: %v, %q", err, empty.Backend)
	}
	bad := Config{Backend: Transit, Transit: TransitConfig{Addresses: []string{"bao:8200"}, TokenFile: "t"}}
	if err := bad.Check(); err == nil {
		t.Fatal("an address without a scheme passed")
	}
}

func TestUnavailableError(t *testing.T) {
	cause := errors.New("connection refused")
	err := Unavailable(Transit, 1500*time.Millisecond, cause)
	var u *UnavailableError
	if !errors.As(err, &u) || u.RetrySeconds() != 2 || !errors.Is(err, cause) {
		t.Fatalf("%v: retry %d", err, u.RetrySeconds())
	}
	if (&UnavailableError{}).RetrySeconds() != 1 {
		t.Fatal("a zero retry must still say one second")
	}
}
