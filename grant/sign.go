package grant

import (
	"crypto"
	"crypto/ed25519"
)

// How this package checks the signatures it makes (docs/performance.md,
// "Checking our own signatures"). Ed25519 is deterministic, which opens it
// to fault attacks: a signature computed with a fault (a glitch, a flipped
// bit in the cached expanded key) can give the private key away, one
// signature or a few at a time. The defence is to never release a signature
// that does not verify.
//
//   - The principal's signatures (Issue, IssueConsent) are always verified
//     against the principal key before a grant leaves, whatever the signer:
//     that key is the one worth attacking. Issue and IssueConsent verify
//     them, unless the signer says that it, or the program that made it,
//     does (verifiesSignatures below).
//   - A signer other than an in-process ed25519.PrivateKey (an HSM, a key
//     service) is not trusted to return a valid signature: each one is
//     verified against the key its Public method reports, for every use,
//     here or, for a signer that says it verifies (below), by the signer
//     itself.
//   - A holder's own in-process ed25519.PrivateKey (an agent's proof of
//     possession, §6.5, or its delegation block) is not checked: a faulty
//     signature fails where it is verified, and the agent's key sits in its
//     own process and key file, where an attacker able to cause faults has
//     easier ways to it. Skipping the check saves one verification (about
//     twice a signature's cost) on every request an agent makes.
//
// Signing twice and comparing costs one signature instead of a
// verification, but it misses a persistent fault: crypto/ed25519 keeps each
// key's expanded scalar in a long-lived cache, and a flipped bit there
// makes both signatures equally wrong.

// verifiesSignatures is what a crypto.Signer says, by having a method
// VerifiesSignatures() that does nothing, when every signature it returns
// is verified with ed25519.Verify in this process, against the key its
// Public method returns (or the same key, pinned earlier), before anything
// signed with it leaves: by the
// signer, which returns an error instead of a signature that fails, or by
// the program that made the signer and holds back what was signed until
// its own check passed. The daemon's remote backends are signers of the
// first kind (an HSM's or a key service's signature is checked where it
// arrives); its file key is given to grant as one of the second
// (keyd/sigcheck.go: the check runs while the grant's record is written).
// grant does not verify their signatures a second time, which saved a
// grant one ed25519.Verify (about 50 µs) in sequence. The contract is the
// method, as an Is method is errors.Is's: a signer that lacks it costs one
// check more, and is never trusted more.
type verifiesSignatures interface {
	VerifiesSignatures()
}

// signHolder signs msg with a holder key: a proof of possession or a
// delegation block. An in-process ed25519.PrivateKey signs unchecked (see
// above); any other signer goes through sign, which verifies.
func signHolder(s crypto.Signer, msg []byte) ([]byte, error) {
	if k, ok := s.(ed25519.PrivateKey); ok && len(k) == ed25519.PrivateKeySize {
		return ed25519.Sign(k, msg), nil
	}
	return sign(s, msg)
}
