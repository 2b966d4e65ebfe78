// Package grant implements the grants of the Parley Protocol v1 (§6): keys,
// canonical JSON, tokens, caveats, verification, proofs of possession,
// proposal hashes and consent.
//
// It is what a Parley service written in Go imports to verify grants, and
// what parley-keyd uses to issue them. It is pure: no I/O, no clock (every
// function that needs the time takes now as unix seconds) and no network.
// Its only global state is two memo tables of DecodeStrict, which remember
// what reflect says about a Go type (its JSON fields, whether it has an
// UnmarshalJSON method): each entry is a function of the type alone, so no
// result depends on which calls came before. The one cache of results,
// BlockCache, is a value a caller makes (new(BlockCache)) and passes in
// Context.Cache.
// Signing goes through crypto.Signer, so a principal key can live in a key
// service.
//
// Ed25519 signatures are deterministic, so a signature computed with a fault
// can give the key away. So every signature of the principal is verified
// before a grant leaves: by Issue and IssueConsent, or, for a signer with a
// VerifiesSignatures method that says so, by the signer itself or by the
// program that releases the grant (the daemon checks its file key's
// signatures while it records the grant). Every signer other than an
// in-process ed25519.PrivateKey (an HSM, a key service) has each signature
// verified against its key in the same way. Only a holder's own in-process
// key signs its proofs and delegations unchecked: a bad one fails where it
// is verified.
//
// # Keys
//
// Public keys are written "ed25519:" + b64url of the 32 raw bytes (§6.1);
// ParsePublicKey accepts exactly one spelling of each key, so keys compare
// as strings. Every key that enters this package (a holder, a delegation's
// sub, an issuer, a proof key, a signer's key, a key file's) passes
// CheckPublicKey: the canonical encoding of a point, and not one of the
// eight points of small order, for which anyone can make a signature
// without a private key (a grant held by one would be usable by everyone
// who sees it). Agent keys are stored in the key file format of
// docs/key-file.md (MarshalKeyFile, ParseKeyFile); the permission checks on
// such a file live outside this package.
//
// # Strict JSON
//
// DecodeStrict is the one reading of JSON that an agent or a service wrote,
// and ParseProposal reads through the same reader: names match struct
// fields exactly, a name that differs from a field's only in case is an
// error, duplicate names are refused at any depth, and invalid UTF-8 and
// trailing data are refused. Parsers that fold case or keep the last of two
// names would otherwise read another document than the one that was
// hashed, decided on and shown. An error names the member at fault.
// DecodeStrictKnown also refuses members no field takes.
//
// # Canonical JSON
//
// CanonicalizeJSON produces the canonical form of §10, which is
// what is signed and hashed: keys sorted by code point, no whitespace, the
// spec's escapes and literal UTF-8 for every other character (unlike
// encoding/json, <, >, &, U+2028 and U+2029 stay literal), and only integers
// in [−(2^53−1), 2^53−1]. Floats are refused.
//
// # Tokens
//
// Decode accepts a token only when its body is exactly canonical JSON, so a
// token that decodes re-encodes to the same bytes and the bytes a signature
// covers are the bytes received. It refuses unknown payload fields and
// anything beyond its caps (MaxTokenLen bytes, 16 blocks, 32 caveats a
// block, 1024 bytes a string, 64 items a list), each of which bounds the
// work an attacker can cause; Verify looks at no more than MaxGrants grants
// of one request. Issue signs a root grant, Delegate appends a narrower
// block signed by the current holder, IssueConsent signs a consent grant
// with exactly the five caveats of §6.6 (ConsentCaveats).
//
// # Verification
//
// Verify returns a Result only after every signature, every prev link, the
// issuer's trust, the holder's match with the proof key and every caveat of
// every block of one presented grant have been checked (§6.4). It fails
// closed: an unknown caveat or a malformed value is never satisfied. Its
// errors are *Error with the spec's codes: unauthorized for a bad grant,
// forbidden with the blocking caveats in Need, and consent_required when
// only per, spend or risk caveats stand in the way of a COMMIT. The caller
// checks the proof of possession with VerifyProof and reserves spend
// against Result.SpendBlocks.
//
// A service sees the same grant on every request of an agent. A BlockCache
// in Context.Cache remembers the block signatures already checked, keyed by
// the signer's key, the exact signed bytes and the signature, so that such a
// grant costs microseconds instead of one Ed25519 verification per block;
// expiry, trust, the holder and every caveat are still checked on each call.
//
// # Proofs and consent
//
// MakeProof and VerifyProof implement §6.5 with its window of ±300 seconds.
// ParseProposal reads a proposal once, strictly, and computes its hash of
// §5.1 from that reading (Hashed); its fields, its hash and what
// grant/lens displays of it all come from that one parse. CheckConsent is the check a consent
// request must pass before it is ever shown to a human: the parsed proposal
// the agent received hashes to the consent's hash and matches its id,
// service and capability, and has not expired.
//
// # What caveats mean
//
// This package alone says what a caveat means. Svc, Verbs, Can, Exp, Nbf,
// Per, Spend, Risk and Only build the caveats of §6.3, Caveat.Check checks
// one, CaveatValue reads its value and Caveat.AppendJSON writes it into a
// larger text; a caveat kind or a risk level is the spec's string ("exp",
// "low"), compared as such. ParseRequest checks the caveats of a request
// for a new grant (kinds, values, repeats, verbs, patterns, times, money)
// and returns a Request, the one shape of a request and of a policy's
// decision, whose Caveats method gives the caveats back; its errors are one
// sentence for the requester. ParleyVerbs lists the verbs of §4, HELLO
// first and then those that carry grants; ValidPattern checks a can
// pattern. Token.Narrowing says whether a new caveat would narrow what a
// chain already allows.
//
// # Errors
//
// Verify, VerifyProof, CheckChain and CheckConsent return *Error, whose Code
// is the spec's error code (§7) a service answers with, written as the spec
// writes it ("forbidden"); errors.As finds it in a wrapped error.
//
// # Lens and display
//
// The Lens text of §9 that a human is shown, the neutralizing of untrusted
// text and the estimate of §8 live in grant/lens, which a service that only
// verifies grants need not link.
package grant
