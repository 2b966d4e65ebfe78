//go:build cgo

// Package pkcs11 signs with the principal key inside a PKCS#11 3.0 token
// (an HSM such as a YubiHSM 2 or a cloud HSM, or SoftHSM2), through the
// mechanisms CKM_EC_EDWARDS_KEY_PAIR_GEN and CKM_EDDSA. The key is generated
// in the token, sensitive and not extractable, and never leaves it.
//
// # Guarantees
//
//   - Open refuses a key whose public key is not principal.pub, and a
//     private key that is extractable or not sensitive.
//   - Every signature is verified against principal.pub before Sign
//     returns it.
//   - Every call has a deadline (key.pkcs11.timeout). PKCS#11 calls cannot
//     be cancelled, so a call past its deadline is left to finish in the
//     background while Sign answers *signer.UnavailableError; at most
//     key.pkcs11.sessions calls are ever outstanding, so a hung module
//     cannot pile up threads.
//   - A session the module invalidated (a token removed, a device error) is
//     closed and opened again on a later call; a wrong PIN is never retried,
//     so the daemon cannot lock the token.
//
// It needs cgo (github.com/miekg/pkcs11 loads the module with dlopen); built
// without cgo, Open reports that instead.
package pkcs11

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/pkcs11"
	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
)

// PKCS#11 3.0 values that github.com/miekg/pkcs11 v1.1 does not name.
const (
	ckkECEdwards           = 0x40   // CKK_EC_EDWARDS
	ckmECEdwardsKeyPairGen = 0x1055 // CKM_EC_EDWARDS_KEY_PAIR_GEN
	ckmEdDSA               = 0x1057 // CKM_EDDSA
)

// ed25519Params is CKA_EC_PARAMS for Ed25519: the DER of the curve's object
// identifier, 1.3.101.112 (RFC 8410).
var ed25519Params = []byte{0x06, 0x03, 0x2b, 0x65, 0x70}

// retryDown is the retry hint for a token that did not answer.
const retryDown = 5 * time.Second

// modules shares one initialized module per library path within the
// process: C_Initialize may run once, and C_Finalize only after the last
// user has closed.
var modules = struct {
	sync.Mutex
	m map[string]*module
}{m: map[string]*module{}}

type module struct {
	ctx   *pkcs11.Ctx
	users int
}

func loadModule(path string) (*pkcs11.Ctx, error) {
	modules.Lock()
	defer modules.Unlock()
	if m := modules.m[path]; m != nil {
		m.users++
		return m.ctx, nil
	}
	ctx := pkcs11.New(path)
	if ctx == nil {
		return nil, fmt.Errorf("pkcs11: cannot load the module %s", path)
	}
	if err := ctx.Initialize(); err != nil && !errors.Is(err, pkcs11.Error(pkcs11.CKR_CRYPTOKI_ALREADY_INITIALIZED)) {
		ctx.Destroy()
		return nil, fmt.Errorf("pkcs11: initializing %s: %w", path, err)
	}
	modules.m[path] = &module{ctx: ctx, users: 1}
	return ctx, nil
}

func releaseModule(path string) {
	modules.Lock()
	defer modules.Unlock()
	m := modules.m[path]
	if m == nil {
		return
	}
	if m.users--; m.users == 0 {
		m.ctx.Finalize()
		m.ctx.Destroy()
		delete(modules.m, path)
	}
}

// Options are what Open needs beyond the configuration.
type Options struct {
	// Principal is principal.pub: the public key the token's key must have.
	Principal ed25519.PublicKey
	// Logf receives operational messages; nil discards them.
	Logf func(format string, args ...any)
}

// Signer signs with an Ed25519 key in a PKCS#11 token. It implements
// signer.Backend.
type Signer struct {
	cfg  signer.PKCS11Config
	pub  ed25519.PublicKey
	ctx  *pkcs11.Ctx
	logf func(string, ...any)

	// pool holds cfg.Sessions sessions; a nil entry is a session to open
	// again. Taking from it is what bounds the calls in flight.
	pool chan *session

	mu     sync.Mutex // guards slot, key, fatal and re-logging in
	slot   uint
	keyID  []byte
	fatal  error
	closed atomic.Bool
	once   sync.Once
}

type session struct {
	h   pkcs11.SessionHandle
	key pkcs11.ObjectHandle
}

var _ signer.Backend = (*Signer)(nil)

// Open loads the module, finds the token by its label, logs in with the PIN
// from cfg.PINFile, finds the key pair by its label and checks it against
// opts.Principal.
func Open(cfg signer.PKCS11Config, opts Options) (*Signer, error) {
	if len(opts.Principal) != ed25519.PublicKeySize {
		return nil, errors.New("pkcs11: no principal public key (principal.pub) to check the token's key against")
	}
	ctx, err := loadModule(cfg.Module)
	if err != nil {
		return nil, err
	}
	s := &Signer{cfg: cfg, pub: append(ed25519.PublicKey(nil), opts.Principal...), ctx: ctx, logf: opts.Logf,
		pool: make(chan *session, cfg.Sessions)}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	first, err := s.openSession(true)
	if err != nil {
		releaseModule(cfg.Module)
		return nil, err
	}
	s.pool <- first
	for i := 1; i < cfg.Sessions; i++ {
		s.pool <- nil // opened when first needed
	}
	return s, nil
}

// findSlot returns the slot of the token labelled label.
func findSlot(ctx *pkcs11.Ctx, module, label string) (uint, error) {
	slots, err := ctx.GetSlotList(true)
	if err != nil {
		return 0, fmt.Errorf("pkcs11: listing the slots of %s: %w", module, err)
	}
	var seen []string
	for _, sl := range slots {
		ti, err := ctx.GetTokenInfo(sl)
		if err != nil {
			continue
		}
		l := strings.TrimRight(ti.Label, " \x00")
		if l == label {
			return sl, nil
		}
		seen = append(seen, fmt.Sprintf("%q", l))
	}
	if len(seen) == 0 {
		return 0, fmt.Errorf("pkcs11: no token labelled %q in %s: it has no token at all", label, module)
	}
	return 0, fmt.Errorf("pkcs11: no token labelled %q in %s (tokens: %s)", label, module, strings.Join(seen, ", "))
}

// openSession opens a session on the token, logs in when the token is not
// logged in yet, and finds the key. first also checks the key against
// principal.pub and its attributes, and fixes the key's CKA_ID: a session
// opened later must find the same key, not one that replaced it.
func (s *Signer) openSession(first bool) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fatal != nil {
		return nil, s.fatal
	}
	slot, err := findSlot(s.ctx, s.cfg.Module, s.cfg.Token)
	if err != nil {
		return nil, err
	}
	s.slot = slot
	h, err := s.ctx.OpenSession(slot, pkcs11.CKF_SERIAL_SESSION|pkcs11.CKF_RW_SESSION)
	if err != nil {
		return nil, fmt.Errorf("pkcs11: opening a session on token %q: %w", s.cfg.Token, err)
	}
	if err := s.loginLocked(h); err != nil {
		s.ctx.CloseSession(h)
		return nil, err
	}
	key, pub, id, err := findKey(s.ctx, h, s.cfg.Key, s.keyID)
	if err == nil && !pub.Equal(s.pub) {
		// Key substitution: a token (or a label) that holds another key
		// would sign grants of another principal.
		err = fmt.Errorf("pkcs11: key %q in token %q is not principal.pub", s.cfg.Key, s.cfg.Token)
		if !first {
			s.fatal = err
		}
	}
	if err == nil && first {
		err = checkPrivate(s.ctx, h, key, s.cfg.Key)
	}
	if err != nil {
		s.ctx.CloseSession(h)
		return nil, err
	}
	s.keyID = id
	return &session{h: h, key: key}, nil
}

// loginLocked logs the token in with the PIN. Login state belongs to the
// token, so one login serves every session.
func (s *Signer) loginLocked(h pkcs11.SessionHandle) error {
	info, err := s.ctx.GetSessionInfo(h)
	if err == nil && (info.State == pkcs11.CKS_RW_USER_FUNCTIONS || info.State == pkcs11.CKS_RO_USER_FUNCTIONS) {
		return nil
	}
	pin, err := signer.ReadCredential(s.cfg.PINFile)
	if err != nil {
		return fmt.Errorf("pkcs11: PIN: %w", err)
	}
	err = s.ctx.Login(h, pkcs11.CKU_USER, string(pin))
	clear(pin)
	switch {
	case err == nil, errors.Is(err, pkcs11.Error(pkcs11.CKR_USER_ALREADY_LOGGED_IN)):
		return nil
	case errors.Is(err, pkcs11.Error(pkcs11.CKR_PIN_INCORRECT)), errors.Is(err, pkcs11.Error(pkcs11.CKR_PIN_LOCKED)),
		errors.Is(err, pkcs11.Error(pkcs11.CKR_PIN_INVALID)), errors.Is(err, pkcs11.Error(pkcs11.CKR_PIN_LEN_RANGE)):
		// Token lockout: a token locks its PIN after a few wrong tries,
		// so a wrong PIN is never tried again.
		s.fatal = fmt.Errorf("pkcs11: wrong PIN for token %q (%v); not trying again, which could lock the token", s.cfg.Token, err)
		return s.fatal
	}
	return fmt.Errorf("pkcs11: logging in to token %q: %w", s.cfg.Token, err)
}

// findKey finds the Ed25519 key pair labelled label (and, once known, with
// CKA_ID id) and returns the private key's handle, the public key and the
// pair's CKA_ID.
func findKey(ctx *pkcs11.Ctx, h pkcs11.SessionHandle, label string, id []byte) (pkcs11.ObjectHandle, ed25519.PublicKey, []byte, error) {
	find := func(class uint) ([]pkcs11.ObjectHandle, error) {
		tmpl := []*pkcs11.Attribute{
			pkcs11.NewAttribute(pkcs11.CKA_CLASS, class),
			pkcs11.NewAttribute(pkcs11.CKA_KEY_TYPE, ckkECEdwards),
			pkcs11.NewAttribute(pkcs11.CKA_LABEL, label),
		}
		if id != nil {
			tmpl = append(tmpl, pkcs11.NewAttribute(pkcs11.CKA_ID, id))
		}
		if err := ctx.FindObjectsInit(h, tmpl); err != nil {
			return nil, err
		}
		objs, _, err := ctx.FindObjects(h, 2)
		if ferr := ctx.FindObjectsFinal(h); err == nil {
			err = ferr
		}
		return objs, err
	}
	privs, err := find(pkcs11.CKO_PRIVATE_KEY)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("pkcs11: looking for key %q: %w", label, err)
	}
	switch len(privs) {
	case 0:
		return 0, nil, nil, fmt.Errorf("pkcs11: no Ed25519 private key labelled %q (create it with: parley-keyd init --backend pkcs11)", label)
	case 2:
		// Ambiguity is refused: which of two keys signs must not depend on
		// the order a token lists them in.
		return 0, nil, nil, fmt.Errorf("pkcs11: more than one Ed25519 private key labelled %q", label)
	}
	attrs, err := ctx.GetAttributeValue(h, privs[0], []*pkcs11.Attribute{pkcs11.NewAttribute(pkcs11.CKA_ID, nil)})
	if err != nil {
		return 0, nil, nil, fmt.Errorf("pkcs11: reading key %q: %w", label, err)
	}
	keyID := attrs[0].Value
	if id == nil && len(keyID) > 0 {
		id = keyID
	}
	pubs, err := find(pkcs11.CKO_PUBLIC_KEY)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("pkcs11: looking for public key %q: %w", label, err)
	}
	if len(pubs) != 1 {
		return 0, nil, nil, fmt.Errorf("pkcs11: %d Ed25519 public keys labelled %q; want exactly one", len(pubs), label)
	}
	attrs, err = ctx.GetAttributeValue(h, pubs[0], []*pkcs11.Attribute{pkcs11.NewAttribute(pkcs11.CKA_EC_POINT, nil)})
	if err != nil {
		return 0, nil, nil, fmt.Errorf("pkcs11: reading public key %q: %w", label, err)
	}
	pub, err := parseECPoint(attrs[0].Value)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("pkcs11: public key %q: %w", label, err)
	}
	return privs[0], pub, keyID, nil
}

// parseECPoint reads CKA_EC_POINT of an Ed25519 key: the 32-byte encoding
// (RFC 8032), wrapped in a DER OCTET STRING as most tokens return it, or
// bare.
func parseECPoint(b []byte) (ed25519.PublicKey, error) {
	if len(b) == 34 && b[0] == 0x04 && b[1] == 0x20 {
		b = b[2:]
	}
	if len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("CKA_EC_POINT of %d bytes is not an Ed25519 public key", len(b))
	}
	// DESIGN.md property 10: a token's key is checked like every other.
	if err := grant.CheckPublicKey(b); err != nil {
		return nil, fmt.Errorf("CKA_EC_POINT: %w", err)
	}
	return append(ed25519.PublicKey(nil), b...), nil
}

// checkPrivate refuses a private key that could leave the token.
func checkPrivate(ctx *pkcs11.Ctx, h pkcs11.SessionHandle, key pkcs11.ObjectHandle, label string) error {
	attrs, err := ctx.GetAttributeValue(h, key, []*pkcs11.Attribute{
		pkcs11.NewAttribute(pkcs11.CKA_SENSITIVE, nil),
		pkcs11.NewAttribute(pkcs11.CKA_EXTRACTABLE, nil),
	})
	if err != nil {
		return fmt.Errorf("pkcs11: reading the attributes of key %q: %w", label, err)
	}
	flag := func(a *pkcs11.Attribute) bool { return len(a.Value) == 1 && a.Value[0] != 0 }
	if !flag(attrs[0]) || flag(attrs[1]) {
		// Key theft: an extractable key can be wrapped out of the token
		// by anyone who holds the PIN.
		return fmt.Errorf("pkcs11: key %q is extractable or not sensitive; generate it in the token with parley-keyd init --backend pkcs11", label)
	}
	return nil
}

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

// Describe names the backend, the token and the key.
func (s *Signer) Describe() signer.Description {
	s.mu.Lock()
	id := hex.EncodeToString(s.keyID)
	s.mu.Unlock()
	d := signer.Description{Backend: signer.PKCS11, Key: fmt.Sprintf("token %q, key %q in %s", s.cfg.Token, s.cfg.Key, s.cfg.Module)}
	if id != "" {
		d.Version = "id " + id
	}
	return d
}

// Close closes the sessions and, when no other signer of the process uses
// the module, finalizes it. Calls still running get their deadline to
// finish; a module that hangs beyond that is left as it is, so that Close
// itself never hangs.
func (s *Signer) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		t := time.NewTimer(s.cfg.Timeout.Duration)
		defer t.Stop()
		for i := 0; i < s.cfg.Sessions; i++ {
			select {
			case ss := <-s.pool:
				if ss != nil {
					s.ctx.CloseSession(ss.h)
				}
			case <-t.C:
				s.logf("pkcs11: token %q: calls still running at close; the module is released when they return", s.cfg.Token)
				go func(left int) {
					for ; left > 0; left-- {
						if ss := <-s.pool; ss != nil {
							s.ctx.CloseSession(ss.h)
						}
					}
					releaseModule(s.cfg.Module)
				}(s.cfg.Sessions - i)
				return
			}
		}
		releaseModule(s.cfg.Module)
	})
	return nil
}

// broken reports whether err means the session (or the token behind it) is
// gone, so that the session must be opened again.
func broken(err error) bool {
	var e pkcs11.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e {
	case pkcs11.CKR_SESSION_HANDLE_INVALID, pkcs11.CKR_SESSION_CLOSED, pkcs11.CKR_DEVICE_REMOVED,
		pkcs11.CKR_DEVICE_ERROR, pkcs11.CKR_TOKEN_NOT_PRESENT, pkcs11.CKR_TOKEN_NOT_RECOGNIZED,
		pkcs11.CKR_USER_NOT_LOGGED_IN, pkcs11.CKR_OBJECT_HANDLE_INVALID, pkcs11.CKR_KEY_HANDLE_INVALID,
		pkcs11.CKR_GENERAL_ERROR, pkcs11.CKR_OPERATION_ACTIVE, pkcs11.CKR_FUNCTION_FAILED:
		return true
	}
	return false
}

// call runs f on a session from the pool within ctx. f runs in its own
// goroutine: when ctx ends first, call returns and the session goes back to
// the pool only once f has finished.
func (s *Signer) call(ctx context.Context, f func(*session) error) error {
	if s.closed.Load() {
		return errors.New("pkcs11: signer is closed")
	}
	var ss *session
	select {
	case ss = <-s.pool:
	case <-ctx.Done():
		return signer.Unavailable(signer.PKCS11, retryDown, fmt.Errorf("every session is busy: %w", ctx.Err()))
	}
	done := make(chan error, 1)
	go func() {
		var err error
		if ss == nil {
			ss, err = s.openSession(false)
		}
		if err == nil {
			err = f(ss)
			if broken(err) {
				s.logf("pkcs11: token %q: %v; opening a new session", s.cfg.Token, err)
				s.ctx.CloseSession(ss.h)
				ss = nil
			}
		}
		s.pool <- ss
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			var u *signer.UnavailableError
			if !errors.As(err, &u) {
				err = signer.Unavailable(signer.PKCS11, retryDown, err)
			}
		}
		return err
	case <-ctx.Done():
		return signer.Unavailable(signer.PKCS11, retryDown, fmt.Errorf("the token did not answer: %w", ctx.Err()))
	}
}

// Sign signs message with CKM_EDDSA (pure Ed25519) and returns the signature
// only after verifying it against principal.pub. opts must ask for pure
// Ed25519 (crypto.Hash(0), no context); rand is ignored.
func (s *Signer) Sign(_ io.Reader, message []byte, opts crypto.SignerOpts) ([]byte, error) {
	if opts == nil || opts.HashFunc() != crypto.Hash(0) {
		return nil, errors.New("pkcs11: the principal key signs pure Ed25519 only")
	}
	if o, ok := opts.(*ed25519.Options); ok && o.Context != "" {
		return nil, errors.New("pkcs11: the principal key does not sign with an Ed25519 context")
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout.Duration)
	defer cancel()
	msg := append([]byte(nil), message...) // the call may outlive Sign
	var sig []byte
	err := s.call(ctx, func(ss *session) error {
		if err := s.ctx.SignInit(ss.h, []*pkcs11.Mechanism{pkcs11.NewMechanism(ckmEdDSA, nil)}, ss.key); err != nil {
			return fmt.Errorf("pkcs11: C_SignInit: %w", err)
		}
		b, err := s.ctx.Sign(ss.h, msg)
		if err != nil {
			return fmt.Errorf("pkcs11: C_Sign: %w", err)
		}
		sig = b
		return nil
	})
	if err != nil {
		return nil, err
	}
	// A token that returns a wrong signature (a fault, another key under
	// the same label) must not make a grant no service accepts.
	if len(sig) != ed25519.SignatureSize || !ed25519.Verify(s.pub, message, sig) {
		return nil, signer.Unavailable(signer.PKCS11, retryDown, errors.New("the token's signature does not verify under principal.pub"))
	}
	return sig, nil
}

// Check asks the token, within ctx and the signing deadline, whether the
// session and the key are still there.
func (s *Signer) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout.Duration)
	defer cancel()
	return s.call(ctx, func(ss *session) error {
		if _, err := s.ctx.GetSessionInfo(ss.h); err != nil {
			return fmt.Errorf("pkcs11: C_GetSessionInfo: %w", err)
		}
		if _, err := s.ctx.GetAttributeValue(ss.h, ss.key, []*pkcs11.Attribute{pkcs11.NewAttribute(pkcs11.CKA_LABEL, nil)}); err != nil {
			return fmt.Errorf("pkcs11: reading the key: %w", err)
		}
		return nil
	})
}
