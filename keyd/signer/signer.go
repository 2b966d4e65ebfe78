// Package signer holds what the daemon knows about where the principal key
// lives: the [key] table of config.toml, the error a key service answers
// with when it cannot sign now, and the description and health check that
// the audit log's start record and `parley-grant status` show.
//
// The backends themselves are in sub-packages: transit (OpenBao or Vault's
// transit engine) and pkcs11 (an HSM or SoftHSM2); backend.Open picks the
// configured one. This package has no backend code and imports only the
// standard library, so that the daemon's package can use its types without
// pulling in a key service client.
//
// # Guarantees
//
// A backend is a crypto.Signer for pure Ed25519 (§6) whose Sign returns only
// a signature that it has verified against the principal public key pinned
// at start (principal.pub); a remote signer that returns anything else is
// an error, never a signature. Sign has no context, so every backend bounds
// each call with its own deadline: a key service that is down or slow makes
// Sign return an *UnavailableError within that deadline, never hang.
package signer

import (
	"bytes"
	"context"
	"crypto"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/duration"
	"github.com/parley-keyd/parley-keyd/internal/filetrust"
)

// Backend names, as written in config.toml's [key] backend.
const (
	File    = "file"
	Transit = "transit"
	PKCS11  = "pkcs11"
)

// Config is the [key] table of config.toml. Unknown keys are errors (the
// daemon decodes its configuration strictly); an absent table means the file
// key in the state folder.
type Config struct {
	// Backend is "file" (the default), "transit" or "pkcs11".
	Backend string        `toml:"backend"`
	Transit TransitConfig `toml:"transit"`
	PKCS11  PKCS11Config  `toml:"pkcs11"`
}

// TransitConfig is [key.transit]: a transit key of type ed25519 in OpenBao
// or HashiCorp Vault.
type TransitConfig struct {
	// Addresses of the cluster's nodes ("https://bao-1.example:8200"),
	// tried in turn; the one that last answered is tried first.
	Addresses []string `toml:"addresses"`
	// Mount is the transit engine's mount path (default "transit").
	Mount string `toml:"mount"`
	// Name is the transit key's name (default "parley-principal").
	Name string `toml:"name"`
	// Version pins the key version that signs. 0 pins the latest version
	// at start; either way the daemon refuses to start when that
	// version's public key is not principal.pub.
	Version int `toml:"version"`
	// Namespace is the Vault Enterprise or OpenBao namespace, if any.
	Namespace string `toml:"namespace"`
	// CAFile is the PEM file of the CA that signed the servers'
	// certificates; empty uses the system's roots.
	CAFile string `toml:"ca_file"`
	// TLSServerName overrides the name checked in the servers'
	// certificates (for addresses given as IP addresses).
	TLSServerName string `toml:"tls_server_name"`
	// TokenFile holds a token (first line). Or AppRole: RoleIDFile and
	// SecretIDFile, logging in at AppRoleMount (default "approle").
	// A relative path names a systemd credential: the file of that name
	// in $CREDENTIALS_DIRECTORY (LoadCredentialEncrypted= in the unit).
	TokenFile    string `toml:"token_file"`
	RoleIDFile   string `toml:"role_id_file"`
	SecretIDFile string `toml:"secret_id_file"`
	AppRoleMount string `toml:"approle_mount"`
	// Timeout is the deadline of one signature across all addresses
	// (default 3s).
	Timeout duration.Value `toml:"timeout"`
}

// PKCS11Config is [key.pkcs11]: an Ed25519 key in a PKCS#11 3.0 token.
type PKCS11Config struct {
	// Module is the PKCS#11 library, such as
	// /usr/lib/softhsm/libsofthsm2.so.
	Module string `toml:"module"`
	// Token is the token's label.
	Token string `toml:"token"`
	// Key is the label of the key pair (default "parley-principal").
	Key string `toml:"key"`
	// PINFile holds the user PIN (first line); a relative path names a
	// systemd credential, as for transit.
	PINFile string `toml:"pin_file"`
	// Sessions bounds the signatures made at once (default 4).
	Sessions int `toml:"sessions"`
	// Timeout is the deadline of one signature (default 2s).
	Timeout duration.Value `toml:"timeout"`
}

// Defaults for what the [key] table leaves out.
const (
	DefaultMount          = "transit"
	DefaultKeyName        = "parley-principal"
	DefaultAppRoleMount   = "approle"
	DefaultTransitTimeout = 3 * time.Second
	DefaultPKCS11Timeout  = 2 * time.Second
	DefaultSessions       = 4
)

// Check fills in defaults and returns an error naming the first key that is
// missing or wrong for the chosen backend. It reads no file.
func (c *Config) Check() error {
	switch c.Backend {
	case "":
		c.Backend = File
	case File, Transit, PKCS11:
	default:
		return fmt.Errorf("key.backend %q is not one of \"file\", \"transit\", \"pkcs11\"", c.Backend)
	}
	switch c.Backend {
	case Transit:
		return c.Transit.check()
	case PKCS11:
		return c.PKCS11.check()
	}
	return nil
}

func (t *TransitConfig) check() error {
	if t.Mount == "" {
		t.Mount = DefaultMount
	}
	if t.Name == "" {
		t.Name = DefaultKeyName
	}
	if t.AppRoleMount == "" {
		t.AppRoleMount = DefaultAppRoleMount
	}
	if t.Timeout.Duration == 0 {
		t.Timeout.Duration = DefaultTransitTimeout
	}
	t.Mount = strings.Trim(t.Mount, "/")
	if len(t.Addresses) == 0 {
		return errors.New("key.transit.addresses is empty: name the key service, such as [\"https://bao.example:8200\"]")
	}
	for _, a := range t.Addresses {
		if !strings.HasPrefix(a, "https://") && !strings.HasPrefix(a, "http://") {
			return fmt.Errorf("key.transit.addresses: %q is not an http:// or https:// address", a)
		}
	}
	for _, s := range []string{t.Mount, t.Name, t.AppRoleMount} {
		// Path injection: a name with "/" or ".." would reach another
		// endpoint than sign/<name>.
		if s == "" || strings.Contains(s, "..") || strings.ContainsAny(s, "?#% \t\n") {
			return fmt.Errorf("key.transit: %q is not a usable mount or key name", s)
		}
	}
	if strings.Contains(t.Name, "/") {
		return fmt.Errorf("key.transit.name %q must not contain \"/\"", t.Name)
	}
	if t.Version < 0 {
		return errors.New("key.transit.version must be 0 (the latest at start) or a version number")
	}
	token := t.TokenFile != ""
	approle := t.RoleIDFile != "" || t.SecretIDFile != ""
	switch {
	case token && approle:
		return errors.New("key.transit: set token_file or role_id_file and secret_id_file, not both")
	case approle && (t.RoleIDFile == "" || t.SecretIDFile == ""):
		return errors.New("key.transit: AppRole needs both role_id_file and secret_id_file")
	case !token && !approle:
		return errors.New("key.transit: set token_file, or role_id_file and secret_id_file (AppRole)")
	}
	return nil
}

func (p *PKCS11Config) check() error {
	if p.Key == "" {
		p.Key = DefaultKeyName
	}
	if p.Sessions == 0 {
		p.Sessions = DefaultSessions
	}
	if p.Timeout.Duration == 0 {
		p.Timeout.Duration = DefaultPKCS11Timeout
	}
	switch {
	case p.Module == "":
		return errors.New("key.pkcs11.module is empty: name the PKCS#11 library, such as \"/usr/lib/softhsm/libsofthsm2.so\"")
	case !filepath.IsAbs(p.Module):
		// A relative module path would be looked up by the dynamic
		// loader, which may load another library than the admin meant.
		return fmt.Errorf("key.pkcs11.module %q must be an absolute path", p.Module)
	case p.Token == "":
		return errors.New("key.pkcs11.token is empty: name the token's label")
	case p.PINFile == "":
		return errors.New("key.pkcs11.pin_file is empty: name the file (or systemd credential) that holds the PIN")
	case p.Sessions < 1 || p.Sessions > 64:
		return errors.New("key.pkcs11.sessions must be between 1 and 64")
	}
	return nil
}

// CredentialsEnv is the variable systemd sets to the folder of a unit's
// credentials (LoadCredential=, LoadCredentialEncrypted=).
const CredentialsEnv = "CREDENTIALS_DIRECTORY"

// maxCredential bounds a credential file: a token, id or PIN is short.
const maxCredential = 16 << 10

// ReadCredential returns the first line of a credential file, without
// its line ending. A relative name is looked up in $CREDENTIALS_DIRECTORY;
// without that variable it is an error, so that a credential is never read
// from wherever the daemon happens to run. The file must be a regular file
// that others (the "other" permission bits) cannot read or write.
func ReadCredential(name string) ([]byte, error) {
	path := name
	if !filepath.IsAbs(name) {
		dir := os.Getenv(CredentialsEnv)
		if dir == "" {
			return nil, fmt.Errorf("credential %q: a relative name is a systemd credential, but $%s is not set (give an absolute path, or LoadCredentialEncrypted=%s:… in the unit)", name, CredentialsEnv, name)
		}
		if strings.Contains(name, "/") {
			return nil, fmt.Errorf("credential %q: a credential name has no \"/\"", name)
		}
		path = filepath.Join(dir, name)
	}
	// Only root and the daemon's user may be able to change it, nor any
	// folder or link on its way (property 12).
	f, err := filetrust.Open(path, uint32(os.Geteuid()))
	if err != nil {
		return nil, fmt.Errorf("credential: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("credential: %w", err)
	}
	if err := CheckSecretFile("credential", path, fi); err != nil {
		return nil, err
	}
	switch {
	case fi.Size() > maxCredential:
		return nil, fmt.Errorf("credential %s is %d bytes, too large for a token, id or PIN", path, fi.Size())
	}
	// Credential theft through a group or an ACL: a token of root's,
	// 0640, whose group an agent is in lets the agent sign as the
	// principal at the key service, past the daemon and its log.
	if who, err := filetrust.OthersRead(f, uint32(os.Geteuid())); err != nil {
		return nil, fmt.Errorf("credential: %w", err)
	} else if who != "" {
		return nil, fmt.Errorf("credential %s may be read by %s: only root and the daemon's user may read it (fix: chown %s %s && chmod 0600 %s, or load it with LoadCredential= in the unit)", path, who, daemonUserName(), path, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxCredential))
	if err != nil {
		return nil, fmt.Errorf("credential %s: %w", path, err)
	}
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		clear(b[i:])
		b = b[:i]
	}
	for len(b) > 0 && (b[len(b)-1] == '\r' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("credential %s is empty", path)
	}
	return b, nil
}

// CheckSecretFile refuses a file holding a secret (what names it: a
// "credential", a "passphrase file") that is not a regular file, or that
// others (the "other" permission bits) may read or write: a token, PIN or
// passphrase every user can read lets any local user sign as the principal.
// fi is the Stat of the open file.
func CheckSecretFile(what, path string, fi fs.FileInfo) error {
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s %s is not a regular file", what, path)
	case fi.Mode().Perm()&0o007 != 0:
		return fmt.Errorf("%s %s has mode %04o: others may read it (fix: chmod o-rwx %s)", what, path, fi.Mode().Perm(), path)
	}
	return nil
}

// UnavailableError is a backend's refusal to sign now: the key service did
// not answer within its deadline, refused the call, or answered something
// that does not verify. The daemon answers the request with the wire code
// "unavailable" and a retry hint; Err holds the detail for the log.
type UnavailableError struct {
	Backend string
	// Retry is how long a client should wait before asking again.
	Retry time.Duration
	Err   error
	// Answered is set when the service did answer, and refused (an HTTP
	// error status such as 403: the daemon's token or its policy) or
	// answered something that does not verify, rather than not answering
	// at all: status says which.
	Answered bool
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("%s key service unavailable: %v", e.Backend, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// RetrySeconds is Retry in whole seconds, at least 1.
func (e *UnavailableError) RetrySeconds() int {
	s := int((e.Retry + time.Second - 1) / time.Second)
	return max(s, 1)
}

// Unavailable wraps err as an *UnavailableError of backend with a retry hint.
func Unavailable(backend string, retry time.Duration, err error) error {
	return &UnavailableError{Backend: backend, Retry: retry, Err: err}
}

// Description says which key signs, for the start record and for status.
type Description struct {
	Backend string `json:"backend"`
	// Key names the key inside the backend: "transit/parley-principal at
	// https://bao-1:8200", "token parley, key parley-principal".
	Key string `json:"key"`
	// Version is the pinned key version (transit), or "" where the
	// backend has none.
	Version string `json:"version,omitempty"`
}

func (d Description) String() string {
	s := d.Backend + " " + d.Key
	if d.Version != "" {
		s += " version " + d.Version
	}
	return s
}

// Health is what a backend tells status besides signing: its description,
// and whether it answers. Check returns nil when the backend answered within
// ctx and still holds the pinned key.
type Health interface {
	Describe() Description
	Check(ctx context.Context) error
}

// Backend is a signer of the principal key as backend.Open returns it.
type Backend interface {
	crypto.Signer
	Health
	Close() error
}

// Template returns a commented [key] table for backend, which init appends
// to a new config.toml. The remote backends' tables need the admin's
// values before the daemon can start.
func Template(backend string) string {
	switch backend {
	case Transit:
		return `
[key]
# Where the principal key lives: "file" (principal.key in the state folder),
# "transit" (OpenBao or Vault) or "pkcs11" (an HSM). docs/key-service.md.
backend = "transit"

[key.transit]
# The cluster's nodes, tried in turn.
addresses = ["https://bao.example:8200"]
mount = "transit"
name = "parley-principal"
# The key version that signs; 0 pins the latest version at start.
version = 0
# The CA of the servers' certificates (empty: the system's roots).
ca_file = ""
# A token file, or AppRole (role_id_file and secret_id_file). A relative
# name is a systemd credential (LoadCredentialEncrypted= in the unit).
token_file = "bao-token"
# role_id_file = "bao-role-id"
# secret_id_file = "bao-secret-id"
# The deadline of one signature, across all addresses.
timeout = "3s"
`
	case PKCS11:
		return `
[key]
# Where the principal key lives: "file" (principal.key in the state folder),
# "transit" (OpenBao or Vault) or "pkcs11" (an HSM). docs/key-service.md.
backend = "pkcs11"

[key.pkcs11]
module = "/usr/lib/softhsm/libsofthsm2.so"
token = "parley"
key = "parley-principal"
# The user PIN. A relative name is a systemd credential.
pin_file = "hsm-pin"
# Signatures made at once, and the deadline of one.
sessions = 4
timeout = "2s"
`
	}
	return `
[key]
# Where the principal key lives: "file" (principal.key in the state folder),
# "transit" (OpenBao or Vault) or "pkcs11" (an HSM). docs/key-service.md.
backend = "file"
`
}

// daemonUserName names this process's user, the daemon's.
func daemonUserName() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return strconv.Itoa(os.Geteuid())
}
