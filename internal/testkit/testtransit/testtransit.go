// Package testtransit is a stand-in for the transit secrets engine of
// OpenBao and HashiCorp Vault, for tests and the benchmark: an HTTP server
// that answers the endpoints parley-keyd uses exactly as the engine's API
// documentation describes them, with real Ed25519 keys, and that can be made
// to fail the ways a real cluster fails. It is not OpenBao; the opt-in tests
// in keyd/signer/transit run against a real server.
//
// Endpoints (under /v1/):
//
//	GET    <mount>/keys/<name>            the key: type, latest_version, keys{version: {public_key}}
//	POST   <mount>/keys/<name>            create (type ed25519)
//	DELETE <mount>/keys/<name>            delete, when deletion_allowed
//	POST   <mount>/keys/<name>/config     deletion_allowed, exportable, min_encryption_version
//	POST   <mount>/keys/<name>/rotate     a new version
//	GET    <mount>/wrapping_key           the RSA-4096 wrapping key (BYOK)
//	POST   <mount>/keys/<name>/import     BYOK import: RSA-OAEP-wrapped AES key || KWP-wrapped PKCS#8 key
//	POST   <mount>/sign/<name>[/<hash>]   sign base64 input with key_version
//	POST   auth/<approle>/login           AppRole login
//	POST   auth/token/renew-self          renew the caller's token
//	GET    auth/token/lookup-self         the caller's token's ttl and renewable
//	POST   sys/mounts/<path>              enable the engine at path (type transit): it moves there
//	DELETE sys/mounts/<path>              disable it: its keys are gone
//
// Every other path answers 404; a missing, unknown or expired token 403.
package testtransit

import (
	"compress/gzip"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/keywrap"
)

// Fault makes the server misbehave on the requests it matches.
type Fault struct {
	// Path limits the fault to request paths containing it ("/sign/",
	// "/keys/"); empty matches every path.
	Path string
	// Status, when not 0, answers with this HTTP status and an error body.
	Status int
	// Delay holds the answer back this long (or until the client gives up).
	Delay time.Duration
	// Close hijacks the connection and closes it without an answer.
	Close bool
	// BadSignature signs with another key.
	BadSignature bool
	// Version, when not 0, signs with this version whatever was asked.
	Version int

	// The hostile modes: a service (or whoever answers at its address)
	// trying to exhaust the daemon's memory or time, or to get its token.

	// Endless streams a body that never ends: a sign reply whose signature
	// goes on for ever, or with Status an error body that does. It ends
	// when the client goes away or the server closes.
	Endless bool
	// Gzip sends an Endless body gzip-compressed, with Content-Encoding:
	// gzip: a few KiB on the wire that inflate to gigabytes.
	Gzip bool
	// Drip sends the genuine reply one byte at a time, this long apart.
	Drip time.Duration
	// Redirect answers with RedirectStatus (307 when 0) and a Location of
	// Redirect followed by the request's path.
	Redirect       string
	RedirectStatus int
}

// Token is a token the server accepts.
type Token struct {
	TTL       time.Duration // 0: never expires
	Renewable bool
	MaxTTL    time.Duration // renewals never reach past issue time + MaxTTL; 0: no cap
	issued    time.Time
	expires   time.Time
}

type key struct {
	versions        map[int]ed25519.PrivateKey
	latest          int
	minEncryption   int
	exportable      bool
	plaintextBackup bool
	deletionAllowed bool
	imported        bool
}

// Server is the stand-in transit engine. Its methods are safe for concurrent
// use with the requests it serves.
type Server struct {
	*httptest.Server
	Mount string

	mu       sync.Mutex
	keys     map[string]*key
	tokens   map[string]*Token
	roleID   string
	secretID string
	roleTok  Token
	fault    *Fault
	wrapKey  *rsa.PrivateKey
	quit     chan struct{}
	quitOnce sync.Once

	Signs, Reads, Logins, Renewals, Lookups atomic.Int64
	// Failed counts the requests a fault answered.
	Failed atomic.Int64
	// Requests counts every request; Streamed the bytes an Endless fault
	// sent.
	Requests, Streamed atomic.Int64

	seenMu sync.Mutex
	seen   map[string]int // tokens that arrived, with their counts
}

// New starts a server over plain HTTP on the loopback address, with the
// transit engine at mount "transit".
func New() *Server { return start(false) }

// NewTLS starts a server over TLS with a certificate of its own; CAFile
// writes the certificate a client must trust.
func NewTLS() *Server { return start(true) }

func start(tls bool) *Server {
	s := &Server{Mount: "transit", keys: map[string]*key{}, tokens: map[string]*Token{}, quit: make(chan struct{})}
	h := http.HandlerFunc(s.serve)
	s.Server = httptest.NewUnstartedServer(h)
	if tls {
		// Like a real OpenBao listener, the server speaks HTTP/2 over TLS.
		s.EnableHTTP2 = true
		s.StartTLS()
	} else {
		s.Start()
	}
	return s
}

// Close stops the server, ending the requests a Delay fault holds back.
func (s *Server) Close() {
	s.quitOnce.Do(func() { close(s.quit) })
	s.Server.Close()
}

// CAFile writes the server's certificate as PEM into dir and returns the
// file's path (empty for a plain HTTP server).
func (s *Server) CAFile(dir string) (string, error) {
	if s.Certificate() == nil {
		return "", nil
	}
	path := filepath.Join(dir, "transit-ca.pem")
	b := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	return path, os.WriteFile(path, b, 0o644)
}

// AddToken makes the server accept tok.
func (s *Server) AddToken(tok string, t Token) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t.issued = time.Now()
	if t.TTL > 0 {
		t.expires = t.issued.Add(t.TTL)
	}
	s.tokens[tok] = &t
}

// RevokeToken makes the server refuse tok from now on.
func (s *Server) RevokeToken(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tokens, tok)
}

// SetAppRole accepts a login with roleID and secretID, which gets a new
// token with t's lifetime.
func (s *Server) SetAppRole(roleID, secretID string, t Token) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roleID, s.secretID, s.roleTok = roleID, secretID, t
}

// SetFault makes the server misbehave as f says; nil makes it behave.
func (s *Server) SetFault(f *Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fault = f
}

// CreateKey makes a new ed25519 key and returns its public key.
func (s *Server) CreateKey(name string) ed25519.PublicKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.newKeyLocked(name)
	return k.versions[1].Public().(ed25519.PublicKey)
}

// ImportKey installs priv as version 1 of a new key name, as a BYOK import
// would.
func (s *Server) ImportKey(name string, priv ed25519.PrivateKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[name] = &key{versions: map[int]ed25519.PrivateKey{1: priv}, latest: 1, imported: true}
}

// Rotate adds a new version to name and returns its number.
func (s *Server) Rotate(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys[name]
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	k.latest++
	k.versions[k.latest] = priv
	return k.latest
}

// SetMinEncryptionVersion raises the lowest version that may sign.
func (s *Server) SetMinEncryptionVersion(name string, v int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[name].minEncryption = v
}

// SetExportable marks the key exportable, as a root token could.
func (s *Server) SetExportable(name string, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[name].exportable = on
}

// DeleteKey removes name.
func (s *Server) DeleteKey(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, name)
}

// PublicKey returns version v of name's public key, or nil.
func (s *Server) PublicKey(name string, v int) ed25519.PublicKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys[name]
	if k == nil || k.versions[v] == nil {
		return nil
	}
	return k.versions[v].Public().(ed25519.PublicKey)
}

// PrivateKey returns version v of key name, or nil: for a test that puts
// the same key in another server, as a replicated cluster holds it.
func (s *Server) PrivateKey(name string, v int) ed25519.PrivateKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys[name]
	if k == nil {
		return nil
	}
	return k.versions[v]
}

func (s *Server) newKeyLocked(name string) *key {
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	k := &key{versions: map[int]ed25519.PrivateKey{1: priv}, latest: 1}
	s.keys[name] = k
	return k
}

type apiError struct {
	status int
	msg    string
}

func fail(status int, format string, args ...any) *apiError {
	return &apiError{status, fmt.Sprintf(format, args...)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if v != nil {
		json.NewEncoder(w).Encode(v)
	}
}

// TokenSeen reports how many requests carried tok (in X-Vault-Token),
// whether or not the server accepts it.
func (s *Server) TokenSeen(tok string) int {
	s.seenMu.Lock()
	defer s.seenMu.Unlock()
	return s.seen[tok]
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.Requests.Add(1)
	if tok := r.Header.Get("X-Vault-Token"); tok != "" {
		s.seenMu.Lock()
		if s.seen == nil {
			s.seen = map[string]int{}
		}
		s.seen[tok]++
		s.seenMu.Unlock()
	}
	s.mu.Lock()
	f := s.fault
	s.mu.Unlock()
	if f != nil && strings.Contains(r.URL.Path, f.Path) {
		if f.Delay > 0 {
			select {
			case <-time.After(f.Delay):
			case <-r.Context().Done():
				return
			case <-s.quit:
				return
			}
		}
		if f.Close {
			s.Failed.Add(1)
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close()
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
		if f.Redirect != "" {
			s.Failed.Add(1)
			code := f.RedirectStatus
			if code == 0 {
				code = http.StatusTemporaryRedirect
			}
			w.Header().Set("Location", f.Redirect+r.URL.Path)
			w.WriteHeader(code)
			return
		}
		if f.Endless {
			s.Failed.Add(1)
			status := http.StatusOK
			if f.Status != 0 {
				status = f.Status
			}
			s.stream(w, r, status, f.Gzip)
			return
		}
		if f.Status != 0 {
			s.Failed.Add(1)
			writeJSON(w, f.Status, map[string]any{"errors": []string{http.StatusText(f.Status)}})
			return
		}
	}
	status, body := http.StatusOK, any(nil)
	data, auth, err := s.route(r, f)
	switch {
	case err != nil:
		status, body = err.status, map[string]any{"errors": []string{err.msg}}
	case data == nil && auth == nil:
		w.WriteHeader(http.StatusNoContent)
		return
	default:
		body = map[string]any{"request_id": "test", "lease_id": "", "renewable": false, "lease_duration": 0, "data": data, "auth": auth}
	}
	if f != nil && f.Drip > 0 && strings.Contains(r.URL.Path, f.Path) {
		s.Failed.Add(1)
		s.drip(w, r, status, body, f.Drip)
		return
	}
	writeJSON(w, status, body)
}

// stream answers with a JSON body that never ends: a reply whose one
// string (a signature, or an error) goes on until the client goes away.
func (s *Server) stream(rw http.ResponseWriter, r *http.Request, status int, zip bool) {
	rw.Header().Set("Content-Type", "application/json")
	var w io.Writer = rw
	var zw *gzip.Writer
	if zip {
		rw.Header().Set("Content-Encoding", "gzip")
		zw = gzip.NewWriter(rw)
		defer zw.Close()
		w = zw
	}
	rw.WriteHeader(status)
	head := `{"data":{"key_version":1,"signature":"vault:v1:`
	if status >= 400 {
		head = `{"errors":["`
	}
	chunk := []byte(strings.Repeat("QUFB", 16<<10))
	flusher, _ := rw.(http.Flusher)
	if _, err := io.WriteString(w, head); err != nil {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.quit:
			return
		default:
		}
		n, err := w.Write(chunk)
		s.Streamed.Add(int64(n))
		if err != nil {
			return
		}
		if zw != nil {
			zw.Flush()
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}

// drip writes the reply one byte every d.
func (s *Server) drip(w http.ResponseWriter, r *http.Request, status int, body any, d time.Duration) {
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	flusher, _ := w.(http.Flusher)
	for i := range b {
		if _, err := w.Write(b[i : i+1]); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		case <-s.quit:
			return
		}
	}
}

// route answers one request: the "data" or "auth" member of the reply.
func (s *Server) route(r *http.Request, f *Fault) (map[string]any, map[string]any, *apiError) {
	path, ok := strings.CutPrefix(r.URL.Path, "/v1/")
	if !ok {
		return nil, nil, fail(404, "no handler for route %q", r.URL.Path)
	}
	var body map[string]any
	if r.Method == http.MethodPost || r.Method == http.MethodPut {
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
		dec.UseNumber()
		if err := dec.Decode(&body); err != nil && !errors.Is(err, io.EOF) {
			return nil, nil, fail(400, "failed to parse JSON input: %v", err)
		}
	}
	if rest, ok := strings.CutPrefix(path, "auth/"); ok && strings.HasSuffix(rest, "/login") {
		return s.login(body)
	}
	tok := r.Header.Get("X-Vault-Token")
	if err := s.checkToken(tok); err != nil {
		return nil, nil, err
	}
	switch {
	case path == "auth/token/renew-self":
		return s.renewSelf(tok, body)
	case path == "auth/token/lookup-self":
		return s.lookupSelf(tok)
	}
	if mount, ok := strings.CutPrefix(path, "sys/mounts/"); ok {
		return s.sysMount(mount, r.Method, body)
	}
	s.mu.Lock()
	mounted := s.Mount
	s.mu.Unlock()
	rest, ok := strings.CutPrefix(path, mounted+"/")
	if mounted == "" || !ok {
		return nil, nil, fail(404, "no handler for route %q", path)
	}
	parts := strings.Split(rest, "/")
	switch {
	case len(parts) == 1 && parts[0] == "wrapping_key" && r.Method == http.MethodGet:
		return s.wrappingKey()
	case len(parts) == 2 && parts[0] == "keys":
		switch r.Method {
		case http.MethodGet:
			s.Reads.Add(1)
			return s.readKey(parts[1])
		case http.MethodPost, http.MethodPut:
			return s.createKey(parts[1], body)
		case http.MethodDelete:
			return s.deleteKey(parts[1])
		}
	case len(parts) == 3 && parts[0] == "keys" && parts[2] == "import":
		return s.importKey(parts[1], body)
	case len(parts) == 3 && parts[0] == "keys" && parts[2] == "rotate":
		s.Rotate(parts[1])
		return nil, nil, nil
	case len(parts) == 3 && parts[0] == "keys" && parts[2] == "config":
		return s.configKey(parts[1], body)
	case (len(parts) == 2 || len(parts) == 3) && parts[0] == "sign":
		s.Signs.Add(1)
		return s.sign(parts[1], body, f)
	}
	return nil, nil, fail(405, "unsupported operation")
}

// sysMount enables the engine at mount (one mount per server: it moves
// there, with no keys) or disables it.
func (s *Server) sysMount(mount, method string, body map[string]any) (map[string]any, map[string]any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch method {
	case http.MethodPost, http.MethodPut:
		if typ, _ := body["type"].(string); typ != "transit" {
			return nil, nil, fail(400, "only transit mounts are served here")
		}
		if s.Mount == mount {
			return nil, nil, fail(400, "path is already in use at %s/", mount)
		}
		s.Mount, s.keys = mount, map[string]*key{}
		return nil, nil, nil
	case http.MethodDelete:
		if s.Mount == mount {
			s.Mount, s.keys = "", map[string]*key{}
		}
		return nil, nil, nil
	}
	return nil, nil, fail(405, "unsupported operation")
}

// Mounted returns the engine's mount path, "" once disabled.
func (s *Server) Mounted() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.Mount
}

func (s *Server) checkToken(tok string) *apiError {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tokens[tok]
	if t == nil || (!t.expires.IsZero() && time.Now().After(t.expires)) {
		return fail(403, "permission denied")
	}
	return nil
}

func (s *Server) login(body map[string]any) (map[string]any, map[string]any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	role, _ := body["role_id"].(string)
	secret, _ := body["secret_id"].(string)
	if s.roleID == "" || role != s.roleID || secret != s.secretID {
		return nil, nil, fail(400, "invalid role or secret ID")
	}
	s.Logins.Add(1)
	tok := "s.approle-" + strconv.FormatInt(s.Logins.Load(), 10)
	t := s.roleTok
	t.issued = time.Now()
	if t.TTL > 0 {
		t.expires = t.issued.Add(t.TTL)
	}
	s.tokens[tok] = &t
	return nil, map[string]any{"client_token": tok, "accessor": "a", "policies": []string{"parley-keyd"},
		"lease_duration": int(t.TTL.Seconds()), "renewable": t.Renewable}, nil
}

func (s *Server) renewSelf(tok string, body map[string]any) (map[string]any, map[string]any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tokens[tok]
	if !t.Renewable || t.TTL == 0 {
		return nil, nil, fail(400, "lease is not renewable")
	}
	s.Renewals.Add(1)
	inc := t.TTL
	if n, ok := body["increment"].(json.Number); ok {
		if v, err := n.Int64(); err == nil && v > 0 {
			inc = time.Duration(v) * time.Second
		}
	}
	exp := time.Now().Add(inc)
	if t.MaxTTL > 0 && exp.After(t.issued.Add(t.MaxTTL)) {
		exp = t.issued.Add(t.MaxTTL)
	}
	t.expires = exp
	return nil, map[string]any{"client_token": tok, "lease_duration": int(time.Until(exp).Seconds()), "renewable": true}, nil
}

func (s *Server) lookupSelf(tok string) (map[string]any, map[string]any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Lookups.Add(1)
	t := s.tokens[tok]
	ttl := 0
	if !t.expires.IsZero() {
		ttl = int(time.Until(t.expires).Seconds())
	}
	return map[string]any{"id": tok, "ttl": ttl, "renewable": t.Renewable, "policies": []string{"parley-keyd"}}, nil, nil
}

func (s *Server) readKey(name string) (map[string]any, map[string]any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys[name]
	if k == nil {
		return nil, nil, fail(404, "")
	}
	versions := map[string]any{}
	for v, priv := range k.versions {
		versions[strconv.Itoa(v)] = map[string]any{
			"name": "ed25519", "creation_time": time.Now().UTC().Format(time.RFC3339Nano), "certificate_chain": "",
			"public_key": base64.StdEncoding.EncodeToString(priv.Public().(ed25519.PublicKey)),
		}
	}
	return map[string]any{
		"name": name, "type": "ed25519", "keys": versions, "latest_version": k.latest,
		"min_available_version": 0, "min_decryption_version": 1, "min_encryption_version": k.minEncryption,
		"exportable": k.exportable, "allow_plaintext_backup": k.plaintextBackup, "deletion_allowed": k.deletionAllowed,
		"derived": false, "supports_signing": true, "supports_encryption": false, "supports_decryption": false,
		"supports_derivation": true, "auto_rotate_period": 0, "imported_key": k.imported,
	}, nil, nil
}

func boolField(body map[string]any, name string) bool {
	switch v := body[name].(type) {
	case bool:
		return v
	case string:
		b, _ := strconv.ParseBool(v)
		return b
	}
	return false
}

func (s *Server) createKey(name string, body map[string]any) (map[string]any, map[string]any, *apiError) {
	if t, _ := body["type"].(string); t != "ed25519" {
		return nil, nil, fail(400, "this test server makes ed25519 keys only, not %q", t)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys[name] == nil {
		k := s.newKeyLocked(name)
		k.exportable = boolField(body, "exportable")
		k.plaintextBackup = boolField(body, "allow_plaintext_backup")
	}
	return nil, nil, nil
}

func (s *Server) deleteKey(name string) (map[string]any, map[string]any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys[name]
	if k != nil && !k.deletionAllowed {
		return nil, nil, fail(400, "deletion is not allowed for this key")
	}
	delete(s.keys, name)
	return nil, nil, nil
}

func (s *Server) configKey(name string, body map[string]any) (map[string]any, map[string]any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys[name]
	if k == nil {
		return nil, nil, fail(400, "no existing key named %s could be found", name)
	}
	if _, ok := body["deletion_allowed"]; ok {
		k.deletionAllowed = boolField(body, "deletion_allowed")
	}
	if boolField(body, "exportable") {
		k.exportable = true
	}
	if n, ok := body["min_encryption_version"].(json.Number); ok {
		v, _ := n.Int64()
		k.minEncryption = int(v)
	}
	return nil, nil, nil
}

func (s *Server) wrappingKey() (map[string]any, map[string]any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wrapKey == nil {
		k, err := sharedWrapKey()
		if err != nil {
			return nil, nil, fail(500, "%v", err)
		}
		s.wrapKey = k
	}
	der, err := x509.MarshalPKIXPublicKey(&s.wrapKey.PublicKey)
	if err != nil {
		return nil, nil, fail(500, "%v", err)
	}
	return map[string]any{"public_key": string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))}, nil, nil
}

// sharedWrapKey is one RSA-4096 wrapping key for every server of the
// process: making one takes seconds.
var sharedWrapKey = sync.OnceValues(func() (*rsa.PrivateKey, error) {
	return rsa.GenerateKey(rand.Reader, 4096)
})

// importKey unwraps a BYOK ciphertext as the engine does: the first 512
// bytes are the ephemeral AES-256 key under RSA-OAEP with the wrapping key
// and hash_function (default SHA256), the rest the key material, PKCS#8,
// under AES-KWP (RFC 5649) with the ephemeral key.
func (s *Server) importKey(name string, body map[string]any) (map[string]any, map[string]any, *apiError) {
	if t, _ := body["type"].(string); t != "ed25519" {
		return nil, nil, fail(400, "this test server imports ed25519 keys only, not %q", t)
	}
	var h hash.Hash
	switch hf, _ := body["hash_function"].(string); strings.ToUpper(hf) {
	case "", "SHA256":
		h = sha256.New()
	case "SHA1":
		h = sha1.New()
	case "SHA224":
		h = sha256.New224()
	case "SHA384":
		h = sha512.New384()
	case "SHA512":
		h = sha512.New()
	default:
		return nil, nil, fail(400, "unknown hash function: %s", hf)
	}
	ctB64, _ := body["ciphertext"].(string)
	ct, err := base64.StdEncoding.DecodeString(ctB64)
	if err != nil {
		return nil, nil, fail(400, "ciphertext is not base64")
	}
	if len(ct) <= 512 {
		return nil, nil, fail(400, "provided ciphertext is too short")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wrapKey == nil {
		return nil, nil, fail(400, "no wrapping key was ever read")
	}
	if s.keys[name] != nil {
		return nil, nil, fail(400, "the import path cannot be used with an existing key; use import-version to rotate an existing imported key")
	}
	eph, err := rsa.DecryptOAEP(h, rand.Reader, s.wrapKey, ct[:512], nil)
	if err != nil {
		return nil, nil, fail(400, "%v", err)
	}
	if len(eph) != 32 {
		return nil, nil, fail(400, "expected ephemeral AES key to be 256-bit")
	}
	der, err := keywrap.Unwrap(eph, ct[512:])
	if err != nil {
		return nil, nil, fail(400, "%v", err)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, nil, fail(400, "error parsing asymmetric key: %v", err)
	}
	priv, ok := parsed.(ed25519.PrivateKey)
	if !ok {
		return nil, nil, fail(400, "provided key is not an ed25519 key")
	}
	s.keys[name] = &key{versions: map[int]ed25519.PrivateKey{1: priv}, latest: 1, imported: true,
		exportable: boolField(body, "exportable"), plaintextBackup: boolField(body, "allow_plaintext_backup")}
	return nil, nil, nil
}

func (s *Server) sign(name string, body map[string]any, f *Fault) (map[string]any, map[string]any, *apiError) {
	in, _ := body["input"].(string)
	msg, err := base64.StdEncoding.DecodeString(in)
	if err != nil {
		return nil, nil, fail(400, "unable to decode input as base64: %v", err)
	}
	ver := 0
	if n, ok := body["key_version"].(json.Number); ok {
		v, _ := n.Int64()
		ver = int(v)
	}
	s.mu.Lock()
	k := s.keys[name]
	if k == nil {
		s.mu.Unlock()
		return nil, nil, fail(400, "signing key not found")
	}
	switch {
	case ver == 0:
		ver = k.latest
	case ver < 0:
		s.mu.Unlock()
		return nil, nil, fail(400, "requested version for signing is negative")
	case ver > k.latest:
		s.mu.Unlock()
		return nil, nil, fail(400, "requested version for signing is higher than the latest key version")
	case k.minEncryption > 0 && ver < k.minEncryption:
		s.mu.Unlock()
		return nil, nil, fail(400, "requested version for signing is less than the minimum encryption key version")
	}
	if f != nil && f.Version != 0 && k.versions[f.Version] != nil {
		ver = f.Version
	}
	priv := k.versions[ver]
	s.mu.Unlock()
	if f != nil && f.BadSignature {
		_, priv, _ = ed25519.GenerateKey(rand.Reader)
	}
	sig, err := priv.Sign(nil, msg, crypto.Hash(0))
	if err != nil {
		return nil, nil, fail(500, "%v", err)
	}
	return map[string]any{"signature": fmt.Sprintf("vault:v%d:%s", ver, base64.StdEncoding.EncodeToString(sig)), "key_version": ver}, nil, nil
}

// Addr returns the server's address without the scheme, for tests that
// need to reach its port directly.
func (s *Server) Addr() net.Addr { return s.Listener.Addr() }
