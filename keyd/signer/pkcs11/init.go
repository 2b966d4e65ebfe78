//go:build cgo

package pkcs11

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"

	"github.com/miekg/pkcs11"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
)

// Init generates the daemon's key pair in the token with
// CKM_EC_EDWARDS_KEY_PAIR_GEN: a token object, private, sensitive, never
// extractable, usable only to sign. A key pair with the label that exists
// already is used as it is (as on a second host of a network HSM), never
// replaced, but only when it cannot leave the token either. Init returns
// the public key and whether it made the key.
func Init(cfg signer.PKCS11Config) (ed25519.PublicKey, bool, error) {
	ctx, err := loadModule(cfg.Module)
	if err != nil {
		return nil, false, err
	}
	defer releaseModule(cfg.Module)
	slot, err := findSlot(ctx, cfg.Module, cfg.Token)
	if err != nil {
		return nil, false, err
	}
	h, err := ctx.OpenSession(slot, pkcs11.CKF_SERIAL_SESSION|pkcs11.CKF_RW_SESSION)
	if err != nil {
		return nil, false, fmt.Errorf("pkcs11: opening a session on token %q: %w", cfg.Token, err)
	}
	defer ctx.CloseSession(h)
	s := &Signer{cfg: cfg, ctx: ctx}
	if err := s.loginLocked(h); err != nil {
		return nil, false, err
	}
	key, pub, _, err := findKey(ctx, h, cfg.Key, nil)
	if err == nil {
		if err := checkPrivate(ctx, h, key, cfg.Key); err != nil {
			return nil, false, err
		}
		return pub, false, nil
	}
	if !strings.Contains(err.Error(), "no Ed25519 private key") {
		return nil, false, err
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return nil, false, err
	}
	pubTmpl := []*pkcs11.Attribute{
		pkcs11.NewAttribute(pkcs11.CKA_CLASS, pkcs11.CKO_PUBLIC_KEY),
		pkcs11.NewAttribute(pkcs11.CKA_KEY_TYPE, ckkECEdwards),
		pkcs11.NewAttribute(pkcs11.CKA_TOKEN, true),
		pkcs11.NewAttribute(pkcs11.CKA_VERIFY, true),
		pkcs11.NewAttribute(pkcs11.CKA_EC_PARAMS, ed25519Params),
		pkcs11.NewAttribute(pkcs11.CKA_LABEL, cfg.Key),
		pkcs11.NewAttribute(pkcs11.CKA_ID, id),
	}
	privTmpl := []*pkcs11.Attribute{
		pkcs11.NewAttribute(pkcs11.CKA_CLASS, pkcs11.CKO_PRIVATE_KEY),
		pkcs11.NewAttribute(pkcs11.CKA_KEY_TYPE, ckkECEdwards),
		pkcs11.NewAttribute(pkcs11.CKA_TOKEN, true),
		pkcs11.NewAttribute(pkcs11.CKA_PRIVATE, true),
		pkcs11.NewAttribute(pkcs11.CKA_SENSITIVE, true),
		pkcs11.NewAttribute(pkcs11.CKA_EXTRACTABLE, false),
		pkcs11.NewAttribute(pkcs11.CKA_SIGN, true),
		pkcs11.NewAttribute(pkcs11.CKA_DECRYPT, false),
		pkcs11.NewAttribute(pkcs11.CKA_DERIVE, false),
		pkcs11.NewAttribute(pkcs11.CKA_UNWRAP, false),
		pkcs11.NewAttribute(pkcs11.CKA_LABEL, cfg.Key),
		pkcs11.NewAttribute(pkcs11.CKA_ID, id),
	}
	if _, _, err := ctx.GenerateKeyPair(h, []*pkcs11.Mechanism{pkcs11.NewMechanism(ckmECEdwardsKeyPairGen, nil)}, pubTmpl, privTmpl); err != nil {
		if errors.Is(err, pkcs11.Error(pkcs11.CKR_MECHANISM_INVALID)) {
			return nil, false, fmt.Errorf("pkcs11: token %q cannot generate Ed25519 keys (CKM_EC_EDWARDS_KEY_PAIR_GEN): %w", cfg.Token, err)
		}
		return nil, false, fmt.Errorf("pkcs11: generating the key pair in token %q: %w", cfg.Token, err)
	}
	key, pub, _, err = findKey(ctx, h, cfg.Key, id)
	if err != nil {
		return nil, false, err
	}
	if err := checkPrivate(ctx, h, key, cfg.Key); err != nil {
		return nil, false, err
	}
	return pub, true, nil
}
