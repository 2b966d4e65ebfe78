package grant

import (
	"crypto"
	"crypto/ed25519"
	"errors"
	"io"
	"testing"
)

// faultySigner is a key service that misbehaves: it returns the signature
// fault makes of the real one.
type faultySigner struct {
	key   ed25519.PrivateKey
	fault func(sig []byte, msg []byte) ([]byte, error)
}

func (s faultySigner) Public() crypto.PublicKey { return s.key.Public() }

func (s faultySigner) Sign(_ io.Reader, msg []byte, _ crypto.SignerOpts) ([]byte, error) {
	return s.fault(ed25519.Sign(s.key, msg), msg)
}

// TestSignRefusesFaultySigners checks that no grant, delegation or proof
// leaves this package with a signature that does not verify under the
// signer's key, whatever a signer other than an in-process
// ed25519.PrivateKey returns: a remote signer (HSM, key service) is checked
// against the key it claims on every signature.
func TestSignRefusesFaultySigners(t *testing.T) {
	faults := map[string]func(sig, msg []byte) ([]byte, error){
		"flipped-bit": func(sig, _ []byte) ([]byte, error) { sig[9] ^= 4; return sig, nil },
		"other-key":   func(_, msg []byte) ([]byte, error) { return ed25519.Sign(keyMallory, msg), nil },
		"short":       func(sig, _ []byte) ([]byte, error) { return sig[:63], nil },
		"long":        func(sig, _ []byte) ([]byte, error) { return append(sig, 0), nil },
		"empty":       func([]byte, []byte) ([]byte, error) { return nil, nil },
		"error":       func([]byte, []byte) ([]byte, error) { return nil, errors.New("device removed") },
		"other-message": func(_, msg []byte) ([]byte, error) {
			return ed25519.Sign(keyPrincipal, append([]byte{' '}, msg...)), nil
		},
	}
	root := issue(t, Can("shop.*"))
	for name, fault := range faults {
		t.Run(name, func(t *testing.T) {
			principal := faultySigner{keyPrincipal, fault}
			if tok, err := Issue(principal, pub(keyAgent), nil, testNow, "n"); err == nil {
				t.Errorf("Issue handed out %s", tok.Encode())
			}
			c := ConsentRequest{Proposal: "p", Hash: "h", Service: "s", Capability: "c", Principal: principalPub, Expires: testNow + 60}
			if _, err := IssueConsent(principal, pub(keyAgent), c, testNow, "n"); err == nil {
				t.Error("IssueConsent handed out a grant")
			}
			holder := faultySigner{keyAgent, fault}
			if _, err := root.Delegate(holder, pub(keySub), nil, testNow); err == nil {
				t.Error("Delegate handed out a grant")
			}
			if p, err := MakeProof(holder, principalPub, "GRANT", "x", testNow); err == nil {
				t.Errorf("MakeProof made %+v", p)
			}
		})
	}
}

// TestSignPrincipalKeyAlwaysChecked uses an ed25519.PrivateKey whose public
// half is not its seed's (a corrupted or tampered key object): Go signs with
// the seed but hashes the stored public key, and such signatures, two of one
// message under two public halves, give the private key away. The
// principal's signatures are checked whatever the signer's type, so Issue
// refuses; a holder's in-process proof is not checked here and fails where
// it is verified.
func TestSignPrincipalKeyAlwaysChecked(t *testing.T) {
	bad := append(ed25519.PrivateKey(nil), keyPrincipal...)
	copy(bad[32:], pub(keyMallory))
	if tok, err := Issue(bad, pub(keyAgent), nil, testNow, "n"); err == nil {
		t.Fatalf("Issue handed out %s", tok.Encode())
	}
	badHolder := append(ed25519.PrivateKey(nil), keyAgent...)
	copy(badHolder[32:], pub(keyMallory))
	p, err := MakeProof(badHolder, principalPub, "GRANT", "x", testNow)
	if err != nil {
		return // checked after all: fine too
	}
	if VerifyProof(p, principalPub, "GRANT", "x", testNow) == nil {
		t.Fatal("a proof by a key object with a wrong public half verified")
	}
}

// TestSignHolderProofsVerify checks the unchecked path where it is taken:
// proofs and delegations by an in-process ed25519.PrivateKey verify.
func TestSignHolderProofsVerify(t *testing.T) {
	p, err := MakeProof(keyAgent, principalPub, "GRANT", "target", testNow)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyProof(p, principalPub, "GRANT", "target", testNow); err != nil {
		t.Fatal(err)
	}
	d := delegate(t, issue(t, Can("shop.*")), keyAgent, keySub, Verbs("ASK"))
	if err := d.CheckChain(); err != nil {
		t.Fatal(err)
	}
}

// verifyingSigner is a faultySigner that claims to verify its own
// signatures (VerifiesSignatures), as the daemon's remote backends do.
type verifyingSigner struct{ faultySigner }

func (verifyingSigner) VerifiesSignatures() {}

// TestSignVerifyingSigner checks what grant leaves to a signer that
// verifies and what it still checks: a signature of the wrong length is refused; the
// check against the key is the signer's own, so a signer that broke its
// promise would get a bad signature through (the backends' own tests hold
// them to it: pkcs11 and transit refuse a signature that does not verify).
func TestSignVerifyingSigner(t *testing.T) {
	good := verifyingSigner{faultySigner{keyPrincipal, func(sig, _ []byte) ([]byte, error) { return sig, nil }}}
	tok, err := Issue(good, pub(keyAgent), []Caveat{Can("shop.*")}, testNow, "n")
	if err != nil {
		t.Fatal(err)
	}
	if b := tok.Blocks[0]; !ed25519.Verify(pub(keyPrincipal), b.signed, b.Sig) {
		t.Fatal("a grant from a verifying signer does not verify")
	}
	for _, n := range []int{0, 63, 65} {
		short := verifyingSigner{faultySigner{keyPrincipal, func(sig, _ []byte) ([]byte, error) { return append(sig, 0)[:n], nil }}}
		if tok, err := Issue(short, pub(keyAgent), nil, testNow, "n"); err == nil {
			t.Errorf("a signature of %d bytes went out in %s", n, tok.Encode())
		}
	}
	broken := verifyingSigner{faultySigner{keyPrincipal, func(sig, _ []byte) ([]byte, error) { sig[9] ^= 4; return sig, nil }}}
	if _, err := Issue(broken, pub(keyAgent), nil, testNow, "n"); err != nil {
		t.Fatalf("grant verified a verifying signer's signature itself: %v", err)
	}
}
