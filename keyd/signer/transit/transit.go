// Package transit signs with the principal key kept in the transit secrets
// engine of OpenBao or HashiCorp Vault (their APIs are the same), so that
// the key is on no agent host's disk. It talks to the service with OpenBao's
// official Go client.
//
// # Guarantees
//
//   - The key version is pinned: every sign call names it, and the daemon
//     refuses to start when that version's public key is not principal.pub.
//   - Every signature the service returns is verified against principal.pub
//     before Sign returns it; one that does not verify is an error.
//   - Every call has a deadline (key.transit.timeout, shared among the
//     addresses, which are tried in turn). A service that is down, slow,
//     refuses or answers garbage makes Sign return a
//     *signer.UnavailableError within that deadline; nothing hangs.
//   - Every reply is read up to a bound of a few KiB (64 KiB for a key's
//     description), error bodies too, and no redirect is followed: the
//     token goes to the configured addresses only (bounded.go).
//   - The token is renewed, and AppRole logs in again, before it lapses.
//
// The endpoints used: POST <mount>/sign/<name>, GET <mount>/keys/<name>,
// auth/token/lookup-self and renew-self, auth/<approle>/login; and for Init
// POST <mount>/keys/<name>, GET <mount>/wrapping_key and POST
// <mount>/keys/<name>/import.
package transit

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openbao/openbao/api/v2"
	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
)

// retryDown is the retry hint for a service that did not answer.
const retryDown = 5 * time.Second

// Signer signs through a transit key. It implements signer.Backend.
type Signer struct {
	cfg     signer.TransitConfig
	pub     ed25519.PublicKey // principal.pub: the only key a signature may verify under
	clients []*api.Client     // one per address, in the configured order
	logf    func(string, ...any)

	preferred atomic.Int32 // the address that answered last
	version   atomic.Int64 // pinned version; 0 until the service was first reached

	// ready is set once the service was reached, the token obtained and
	// the key checked. Until then every call tries that first.
	readyMu sync.Mutex
	ready   atomic.Bool
	fatal   error // the service answered with another key: sign nothing, ever

	auth *auth

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

var _ signer.Backend = (*Signer)(nil)

// Options are what Open needs beyond the configuration.
type Options struct {
	// Principal is principal.pub: the public key the transit key must have.
	Principal ed25519.PublicKey
	// Logf receives operational messages; nil discards them.
	Logf func(format string, args ...any)
}

// Open returns a signer for cfg (checked with signer.Config.Check). It tries
// to reach the service within cfg.Timeout: when the service answers, Open
// fails unless the pinned version's public key is opts.Principal, and
// unless the key is neither exportable nor backed up in plaintext. When no
// address answers, Open logs that through opts.Logf and still returns the
// signer, which refuses to sign (unavailable) until the service answers and
// passes the same checks, together with the *signer.UnavailableError it
// logged: the caller need not log it again.
func Open(cfg signer.TransitConfig, opts Options) (*Signer, error) {
	s, err := newSigner(cfg, opts)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout.Duration)
	defer cancel()
	err = s.ensure(ctx)
	var u *signer.UnavailableError
	switch {
	case err == nil:
	case errors.As(err, &u) && s.fatal == nil:
		s.logf("transit: the key service does not answer yet; grants are refused until it does: %v", err)
	default:
		s.Close()
		return nil, err
	}
	go s.keep()
	return s, err
}

func newSigner(cfg signer.TransitConfig, opts Options) (*Signer, error) {
	if len(opts.Principal) != ed25519.PublicKeySize {
		return nil, errors.New("transit: no principal public key (principal.pub) to check the transit key against")
	}
	s := &Signer{cfg: cfg, pub: append(ed25519.PublicKey(nil), opts.Principal...), logf: opts.Logf,
		stop: make(chan struct{}), done: make(chan struct{})}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	s.version.Store(int64(cfg.Version))
	for _, addr := range cfg.Addresses {
		c, err := newClient(cfg, addr)
		if err != nil {
			return nil, err
		}
		s.clients = append(s.clients, c)
	}
	s.auth = &auth{s: s}
	return s, nil
}

// newClient returns an OpenBao client for one address: no retries of its own
// (Sign tries the next address instead), no environment variables (the
// configuration alone decides), TLS checked against the CA file.
func newClient(cfg signer.TransitConfig, addr string) (*api.Client, error) {
	conf := api.NewConfig()
	if conf.Error != nil {
		return nil, fmt.Errorf("transit: %w", conf.Error)
	}
	conf.Address = addr
	conf.MaxRetries = 0
	conf.Timeout = cfg.Timeout.Duration
	conf.DisableEnvironment = true
	// Attack: a reply redirecting to another host and port, where the
	// library would resend the request with the daemon's token. No
	// redirect is followed, by the library or by net/http.
	conf.DisableRedirects = true
	conf.HttpClient.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	tr, ok := conf.HttpClient.Transport.(*http.Transport)
	if !ok {
		return nil, errors.New("transit: the key service client has an unexpected transport")
	}
	// Keep a connection for each of the daemon's concurrent signers
	// rather than dialing (and for TLS, shaking hands) again.
	tr.MaxIdleConnsPerHost = 64
	tr.MaxResponseHeaderBytes = maxHeaders
	if cfg.CAFile != "" || cfg.TLSServerName != "" {
		if err := conf.ConfigureTLS(&api.TLSConfig{CACert: cfg.CAFile, TLSServerName: cfg.TLSServerName}); err != nil {
			return nil, fmt.Errorf("transit: TLS for %s: %w", addr, err)
		}
	}
	// Last, once TLS is set on the transport itself: every reply is cut
	// at its bound (bounded.go).
	conf.HttpClient.Transport = boundedTransport{base: tr}
	c, err := api.NewClient(conf)
	if err != nil {
		return nil, fmt.Errorf("transit: %s: %w", addr, err)
	}
	if cfg.Namespace != "" {
		c.SetNamespace(cfg.Namespace)
	}
	c.SetToken("")
	return c, nil
}

func (s *Signer) keyPath() string  { return s.cfg.Mount + "/keys/" + s.cfg.Name }
func (s *Signer) signPath() string { return s.cfg.Mount + "/sign/" + s.cfg.Name }

// Public returns the principal public key.
func (s *Signer) Public() crypto.PublicKey { return append(ed25519.PublicKey(nil), s.pub...) }

// VerifiesSignatures tells grant that Sign verifies every signature
// against principal.pub, which Public returns, so that grant does not
// verify it again (grant's sign.go).
func (s *Signer) VerifiesSignatures() {}

var _ interface {
	crypto.Signer
	VerifiesSignatures()
} = (*Signer)(nil)

// Describe names the backend, the key and the pinned version.
func (s *Signer) Describe() signer.Description {
	d := signer.Description{Backend: signer.Transit,
		Key: fmt.Sprintf("%s/%s at %s", s.cfg.Mount, s.cfg.Name, strings.Join(s.cfg.Addresses, ", "))}
	if v := s.version.Load(); v != 0 {
		d.Version = strconv.FormatInt(v, 10)
	} else {
		d.Version = "not yet known"
	}
	return d
}

// Version returns the pinned key version, 0 before the service was reached.
func (s *Signer) Version() int { return int(s.version.Load()) }

// Close stops renewing the token. Sign fails afterwards.
func (s *Signer) Close() error {
	s.once.Do(func() { close(s.stop) })
	return nil
}

func (s *Signer) closed() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// attempt runs call against each address in turn, starting with the one that
// answered last, until one answers or ctx ends. Each address gets an equal
// share of the time left, so that one hung node cannot use up the deadline
// of the others. A refusal that another node would repeat (a 4xx) ends the
// loop at once.
func (s *Signer) attempt(ctx context.Context, call func(ctx context.Context, c *api.Client) error) error {
	n := len(s.clients)
	first := int(s.preferred.Load())
	var errs []error
	for k := 0; k < n; k++ {
		i := (first + k) % n
		per := time.Duration(0)
		if dl, ok := ctx.Deadline(); ok {
			per = time.Until(dl) / time.Duration(n-k)
			if per <= 0 {
				errs = append(errs, context.DeadlineExceeded)
				break
			}
		}
		actx, cancel := ctx, context.CancelFunc(func() {})
		if per > 0 {
			actx, cancel = context.WithTimeout(ctx, per)
		}
		err := call(actx, s.clients[i])
		cancel()
		if err == nil {
			s.preferred.Store(int32(i))
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", s.cfg.Addresses[i], brief(err)))
		if !failover(err) {
			break
		}
	}
	return errors.Join(errs...)
}

// failover reports whether another node might answer where this one did not:
// a network error, a time-out, or a 5xx or 429 (sealed, standby without
// forwarding, overloaded). A 4xx comes from the cluster's shared state (a
// token or policy, a key setting) and would be the same everywhere.
func failover(err error) bool {
	var re *api.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode >= 500 || re.StatusCode == http.StatusTooManyRequests || re.StatusCode == http.StatusPreconditionFailed
	}
	var local *localError
	return !errors.As(err, &local)
}

// localError is a failure decided here (a reply that does not parse or
// verify), not by the network.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

func statusOf(err error) int {
	var re *api.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

// Sign signs message with the pinned transit key version and returns the
// signature only after verifying it against principal.pub. opts must ask
// for pure Ed25519 (crypto.Hash(0), no context); rand is ignored.
func (s *Signer) Sign(_ io.Reader, message []byte, opts crypto.SignerOpts) ([]byte, error) {
	if opts == nil || opts.HashFunc() != crypto.Hash(0) {
		return nil, errors.New("transit: the principal key signs pure Ed25519 only")
	}
	if o, ok := opts.(*ed25519.Options); ok && o.Context != "" {
		return nil, errors.New("transit: the principal key does not sign with an Ed25519 context")
	}
	if s.closed() {
		return nil, errors.New("transit: signer is closed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout.Duration)
	defer cancel()
	if err := s.ensure(ctx); err != nil {
		return nil, s.unavailable(err)
	}
	ver := s.version.Load()
	var sig []byte
	err := s.attempt(ctx, func(ctx context.Context, c *api.Client) error {
		sec, err := c.Logical().WriteWithContext(ctx, s.signPath(), map[string]any{
			"input":       base64.StdEncoding.EncodeToString(message),
			"key_version": ver,
		})
		if err != nil {
			return err
		}
		sig, err = s.parseSignature(sec, ver, message)
		return err
	})
	if err != nil {
		if statusOf(err) == http.StatusForbidden {
			// The token lapsed or was revoked: get a new one now rather
			// than at the next renewal.
			s.auth.kick()
		}
		return nil, s.unavailable(err)
	}
	return sig, nil
}

// parseSignature reads a sign reply, {"signature": "vault:v<N>:<base64>",
// "key_version": N}, and verifies the signature against principal.pub.
// Attack: a key service (or whoever answers at its address) returning a
// signature by another key, or by another version of the key after a
// rotation, which would issue grants that services reject or, worse, that a
// different principal signed.
func (s *Signer) parseSignature(sec *api.Secret, ver int64, message []byte) ([]byte, error) {
	if sec == nil || sec.Data == nil {
		return nil, &localError{errors.New("the sign reply has no data")}
	}
	str, _ := sec.Data["signature"].(string)
	if got, ok := intField(sec.Data["key_version"]); ok && got != ver {
		return nil, &localError{fmt.Errorf("the service signed with key version %d, not the pinned version %d", got, ver)}
	}
	i := strings.LastIndexByte(str, ':')
	if i < 0 || !strings.HasSuffix(str[:i], ":v"+strconv.FormatInt(ver, 10)) {
		return nil, &localError{fmt.Errorf("the sign reply is not a version %d signature", ver)}
	}
	sig, err := base64.StdEncoding.DecodeString(str[i+1:])
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, &localError{errors.New("the sign reply's signature is not 64 bytes of base64")}
	}
	if !ed25519.Verify(s.pub, message, sig) {
		return nil, &localError{errors.New("the signature the service returned does not verify under principal.pub")}
	}
	return sig, nil
}

func intField(v any) (int64, bool) {
	switch n := v.(type) {
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	case float64:
		return int64(n), true
	case int:
		return int64(n), true
	}
	return 0, false
}

// keyInfo is what GET <mount>/keys/<name> says about the key.
type keyInfo struct {
	typ             string
	latest          int64
	minEncryption   int64
	exportable      bool
	plaintextBackup bool
	public          map[int64]ed25519.PublicKey
}

// errNoKey is the key service saying that the key does not exist.
var errNoKey = errors.New("no such key")

func parseKeyInfo(sec *api.Secret) (*keyInfo, error) {
	if sec == nil || sec.Data == nil {
		return nil, errNoKey
	}
	k := &keyInfo{public: map[int64]ed25519.PublicKey{}}
	k.typ, _ = sec.Data["type"].(string)
	k.latest, _ = intField(sec.Data["latest_version"])
	k.minEncryption, _ = intField(sec.Data["min_encryption_version"])
	k.exportable, _ = sec.Data["exportable"].(bool)
	k.plaintextBackup, _ = sec.Data["allow_plaintext_backup"].(bool)
	versions, _ := sec.Data["keys"].(map[string]any)
	for v, raw := range versions {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		m, _ := raw.(map[string]any)
		b64, _ := m["public_key"].(string)
		pub, err := base64.StdEncoding.DecodeString(b64)
		// A key the service names must be one grant accepts (DESIGN.md
		// property 10): a small-order one would verify forged signatures.
		if err == nil && grant.CheckPublicKey(pub) == nil {
			k.public[n] = pub
		}
	}
	return k, nil
}

// readKey reads the key's description from the first node that answers.
func (s *Signer) readKey(ctx context.Context) (*keyInfo, error) {
	var info *keyInfo
	err := s.attempt(ctx, func(ctx context.Context, c *api.Client) error {
		sec, err := c.Logical().ReadWithContext(ctx, s.keyPath())
		if err != nil {
			return err
		}
		info, err = parseKeyInfo(sec)
		if err != nil {
			return &localError{fmt.Errorf("transit key %s: %w", s.keyPath(), err)}
		}
		return nil
	})
	return info, err
}

// checkKey returns nil when version ver of k is principal.pub and the key
// cannot leave the service. With ver 0 it returns the version to pin: the
// latest.
func (s *Signer) checkKey(k *keyInfo, ver int64) (int64, error) {
	if k.typ != "ed25519" {
		return 0, fmt.Errorf("transit key %s has type %q, not ed25519", s.keyPath(), k.typ)
	}
	if ver == 0 {
		ver = k.latest
	}
	pub, ok := k.public[ver]
	if !ok {
		return 0, fmt.Errorf("transit key %s has no version %d", s.keyPath(), ver)
	}
	if !pub.Equal(s.pub) {
		hint := ""
		for v, p := range k.public {
			if p.Equal(s.pub) {
				hint = fmt.Sprintf("; version %d is: set key.transit.version = %d", v, v)
			}
		}
		// Key substitution: a service (or a name) that holds another key
		// would sign grants of another principal.
		return 0, fmt.Errorf("transit key %s version %d is not principal.pub%s", s.keyPath(), ver, hint)
	}
	if k.minEncryption > ver {
		return 0, fmt.Errorf("transit key %s no longer signs with version %d (min_encryption_version is %d)", s.keyPath(), ver, k.minEncryption)
	}
	if k.exportable || k.plaintextBackup {
		// The principal key may have left the service: whoever exported it
		// can sign any grant, and no policy here stops them.
		return 0, fmt.Errorf("transit key %s is exportable or allows plaintext backup, so the principal key may have left the key service (docs/key-service.md)", s.keyPath())
	}
	return ver, nil
}

// ensure authenticates and checks the key once; after that it returns nil
// at once. A service that answered with another key makes it fail for good.
func (s *Signer) ensure(ctx context.Context) error {
	if s.ready.Load() {
		return nil
	}
	s.readyMu.Lock()
	defer s.readyMu.Unlock()
	if s.fatal != nil {
		return &signer.UnavailableError{Backend: signer.Transit, Retry: time.Minute, Err: s.fatal, Answered: true}
	}
	if s.ready.Load() {
		return nil
	}
	if err := s.auth.login(ctx); err != nil {
		return s.unavailable(err)
	}
	info, err := s.readKey(ctx)
	if err != nil && !errors.Is(err, errNoKey) {
		return s.unavailable(err)
	}
	var ver int64
	if err == nil {
		ver, err = s.checkKey(info, s.version.Load())
	} else {
		err = fmt.Errorf("transit key %s does not exist (create it with: parley-keyd init --backend transit)", s.keyPath())
	}
	if err != nil {
		s.fatal = err
		s.logf("transit: %v; no grant will be signed", err)
		return err
	}
	s.version.Store(ver)
	s.ready.Store(true)
	return nil
}

func (s *Signer) unavailable(err error) error {
	var u *signer.UnavailableError
	if errors.As(err, &u) {
		return err
	}
	return &signer.UnavailableError{Backend: signer.Transit, Retry: retryDown, Err: err, Answered: answered(err)}
}

// answered reports whether the service answered and refused (a 4xx: the
// token, its policy, the key) or sent a reply refused here, rather than
// not serving at all (no answer, a 5xx: sealed, overloaded).
func answered(err error) bool {
	var re *api.ResponseError
	var local *localError
	return errors.As(err, &local) || errors.As(err, &re) && !failover(re)
}

// Check reads the key from the service within ctx and the signing deadline,
// and returns nil when the pinned version is still principal.pub and not
// exportable.
func (s *Signer) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout.Duration)
	defer cancel()
	if err := s.ensure(ctx); err != nil {
		return err
	}
	info, err := s.readKey(ctx)
	if err != nil {
		return s.unavailable(err)
	}
	if _, err := s.checkKey(info, s.version.Load()); err != nil {
		return err
	}
	return nil
}

// keep renews the token until Close.
func (s *Signer) keep() {
	defer close(s.done)
	s.auth.run()
}
