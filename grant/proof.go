package grant

import (
	"crypto"
	"crypto/ed25519"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/parley-keyd/parley-keyd/grant/internal/jsontext"
)

// proofWindow is the largest difference, in seconds, between a proof's ts
// and the verifier's clock (§6.5). It bounds how long a captured proof can
// be replayed.
const proofWindow = 300

// Proof is a proof of possession of a grant's holder key (§6.5). Its target
// depends on the request:
//
//	verb            target
//	COMMIT          the proposal hash
//	UNDO            the receipt id
//	ASK, INTENT     the capability name
//	INTENT + auto   "auto:" + capability + ":" + frame id (§4.3.1)
//	EXPAND          the handle
type Proof struct {
	Key string `json:"key"`
	Ts  int64  `json:"ts"`
	Sig string `json:"sig"`
}

// proofMessage returns the bytes a proof signs (§6.5):
// utf8(canonical({"aud": aud, "verb": verb, "target": target, "ts": ts})).
// Invalid UTF-8 in the strings is replaced by U+FFFD; VerifyProof refuses
// such strings outright.
func proofMessage(aud, verb, target string, ts int64) []byte {
	b := make([]byte, 0, 48+len(aud)+len(verb)+len(target))
	b = append(b, `{"aud":`...)
	b = jsontext.AppendString(b, validUTF8(aud))
	b = append(b, `,"target":`...)
	b = jsontext.AppendString(b, validUTF8(target))
	b = append(b, `,"ts":`...)
	b = strconv.AppendInt(b, ts, 10)
	b = append(b, `,"verb":`...)
	b = jsontext.AppendString(b, validUTF8(verb))
	return append(b, '}')
}

func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return string([]rune(s)) // replaces each invalid byte with U+FFFD
}

// MakeProof signs a proof with the holder key for a request to the service
// aud (§6.5). ts is the current time in unix seconds.
func MakeProof(holder crypto.Signer, aud, verb, target string, ts int64) (Proof, error) {
	pub, err := signerKey(holder)
	if err != nil {
		return Proof{}, fmt.Errorf("proof: %w", err)
	}
	if ts > maxSafeInt || ts < -maxSafeInt {
		return Proof{}, fmt.Errorf("proof: ts: %w", errIntRange)
	}
	sig, err := signHolder(holder, proofMessage(aud, verb, target, ts))
	if err != nil {
		return Proof{}, fmt.Errorf("proof: %w", err)
	}
	return Proof{Key: FormatPublicKey(pub), Ts: ts, Sig: b64.EncodeToString(sig)}, nil
}

// VerifyProof checks that p signs the request (aud, verb, target) with its
// key and that |now − ts| ≤ proofWindow (§6.5). The caller then passes
// p.Key to Verify as Context.ProofKey. Errors are *Error with
// codeUnauthorized.
func VerifyProof(p Proof, aud, verb, target string, now int64) error {
	fail := func(msg string) error { return newError(codeUnauthorized, "proof: "+msg) }
	// Check the window without overflow: ts is attacker-chosen.
	if p.Ts > now {
		if uint64(p.Ts)-uint64(now) > proofWindow {
			return fail("ts is too far in the future")
		}
	} else if uint64(now)-uint64(p.Ts) > proofWindow {
		return fail("ts is too old")
	}
	if !utf8.ValidString(aud) || !utf8.ValidString(verb) || !utf8.ValidString(target) {
		return fail("request text is not valid UTF-8")
	}
	key, err := ParsePublicKey(p.Key)
	if err != nil {
		return fail(err.Error())
	}
	sig, err := b64DecodeLen(p.Sig, ed25519.SignatureSize)
	if err != nil {
		return fail("signature: " + err.Error())
	}
	if !ed25519.Verify(key, proofMessage(aud, verb, target, p.Ts), sig) {
		return fail("bad signature")
	}
	return nil
}
