package grant

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"testing"

	"github.com/parley-keyd/parley-keyd/grant/internal/jsontext"
)

// The keys of grants.json.
var (
	keyPrincipal = seedKey("AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE")
	keyAgent     = seedKey("AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI")
	keySub       = seedKey("AwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwM")
	keyMallory   = seedKey("BAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQ")
)

// testNow is the "now" of most tests; grants are issued 100 s before it.
const testNow = 1790000000

func seedKey(s string) ed25519.PrivateKey {
	k, err := keyFromSeed(s)
	if err != nil {
		panic(err)
	}
	return k
}

func pub(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

func pubText(k ed25519.PrivateKey) string { return FormatPublicKey(pub(k)) }

// issue signs a root grant from the principal to the agent.
func issue(t testing.TB, caveats ...Caveat) *Token {
	t.Helper()
	tok, err := Issue(keyPrincipal, pub(keyAgent), caveats, testNow-100, "nonce-1")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// delegate appends a block signed by from, handing the grant to to.
func delegate(t testing.TB, tok *Token, from, to ed25519.PrivateKey, caveats ...Caveat) *Token {
	t.Helper()
	d, err := tok.Delegate(from, pub(to), caveats, testNow-50)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// forgeBlock signs the payload of p with signer as block position root or
// not, without any of the checks Issue and Delegate make: for building
// broken chains.
func forgeBlock(t testing.TB, signer ed25519.PrivateKey, p Block, root bool) Block {
	t.Helper()
	msg, err := marshalPayload(&p, root)
	if err != nil {
		t.Fatal(err)
	}
	p.Sig, p.signed = ed25519.Sign(signer, msg), msg
	return p
}

// withSig returns b with the signature sig.
func withSig(b Block, sig []byte) Block {
	b.Sig = sig
	return b
}

// payloadOf returns b without its signature and signed bytes: a payload to
// edit and sign again.
func payloadOf(b Block) Block {
	b.Sig, b.signed = nil, nil
	return b
}

// encodeBody returns a token whose body is the given JSON text as is.
func encodeBody(body string) string {
	return tokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(body))
}

// body returns the JSON text inside an encoded token.
func body(t testing.TB, tok string) string {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(tok[len(tokenPrefix):])
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// codeOf returns the code of err when it is or wraps an *Error, and ""
// otherwise.
func codeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// The strict reader's names, as the tests of DecodeStrict and ParseProposal
// use them.
type jsonError = jsontext.StrictError

var (
	errDuplicateName = jsontext.ErrDuplicateName
	errNameCase      = jsontext.ErrNameCase
	errUnknownName   = jsontext.ErrUnknownName
	parseJSON        = jsontext.Parse
)
