package grant

import (
	"crypto"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/parley-keyd/parley-keyd/grant/internal/jsontext"
)

// Caps on what a token may contain. Every one of them bounds work or memory
// that a sender of a token controls; Decode refuses a token beyond any cap.
const (
	// MaxTokenLen bounds an encoded token (64 KiB). It stops memory and
	// CPU exhaustion: a request frame may be 1 MiB (§2.1), and without a
	// cap every grant in it would be decoded and parsed in full.
	MaxTokenLen = 64 << 10
	// maxBlocks bounds the blocks of a chain. Each block costs one Ed25519
	// verification, the most expensive step; the cap stops an attacker from
	// making a service verify thousands of signatures for one request.
	maxBlocks = 16
	// maxCaveatsPerBlock bounds the caveats of one block. It stops an
	// attacker from making each evaluation (and each need list) arbitrarily
	// long.
	maxCaveatsPerBlock = 32
	// maxStringLen bounds every string in a payload, in bytes of encoded
	// JSON. It stops quadratic work in pattern matching and huge error
	// messages and displays built from attacker text.
	maxStringLen = 1024
	// maxListLen bounds the items of a list (svc, verbs, can) and the
	// members of any object inside a caveat value. It stops an attacker
	// from making one caveat's evaluation scan an unbounded list.
	maxListLen = 64
)

// tokenPrefix starts every encoded grant (§6.2).
const tokenPrefix = "pg1."

// Block is one signed link of a grant: {"p": payload, "s": signature}
// (§6.2), with the payload's members as fields. A root block has Iss and
// Nonce and no Prev; a delegation block has Prev and neither Iss nor Nonce.
//
// A Block from Decode, Issue or Delegate keeps the exact payload bytes that
// were signed; Encode and CheckChain use those bytes, so changing a field
// afterwards changes neither.
type Block struct {
	Iss     string   // root only: the principal's key
	Prev    string   // delegation only: the id of the block before
	Sub     string   // the key that holds the grant from this block on
	Caveats []Caveat // restrictions added by this block
	Iat     int64    // unix seconds of signing
	Nonce   string   // root only
	Sig     []byte
	signed  []byte
}

// ID returns the block id: b64url(sha256(utf8(s))), where s is the b64url
// text of the signature as it appears in the token (§6.2).
func (b *Block) ID() string {
	var buf [88]byte
	text := b64.AppendEncode(buf[:0], b.Sig)
	sum := sha256.Sum256(text)
	return b64.EncodeToString(sum[:])
}

// payloadBytes returns the canonical payload as signed.
func (b *Block) payloadBytes(root bool) ([]byte, error) {
	if b.signed != nil {
		return b.signed, nil
	}
	return marshalPayload(b, root)
}

// Token is a decoded grant: a non-empty chain of blocks, root first.
type Token struct {
	Blocks []Block
}

// marshalPayload returns canonical(payload of p) (§10) for a root or
// delegation block.
func marshalPayload(p *Block, root bool) ([]byte, error) {
	b := make([]byte, 0, 256)
	b = append(b, `{"caveats":[`...)
	for i, c := range p.Caveats {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = c.AppendJSON(b); err != nil {
			return nil, err
		}
	}
	b = append(b, `],"iat":`...)
	var err error
	if b, err = appendInt(b, p.Iat); err != nil {
		return nil, fmt.Errorf("iat: %w", err)
	}
	if root {
		b = append(b, `,"iss":`...)
		b = jsontext.AppendString(b, p.Iss)
		b = append(b, `,"nonce":`...)
		b = jsontext.AppendString(b, strings.ToValidUTF8(p.Nonce, "\uFFFD"))
	} else {
		b = append(b, `,"prev":`...)
		b = jsontext.AppendString(b, p.Prev)
	}
	b = append(b, `,"sub":`...)
	b = jsontext.AppendString(b, p.Sub)
	return append(b, '}'), nil
}

// Encode returns the token's text: "pg1." + b64url(canonical(blocks)) (§6.2).
func (t *Token) Encode() string {
	b := make([]byte, 0, 512)
	b = append(b, '[')
	for i := range t.Blocks {
		blk := &t.Blocks[i]
		if i > 0 {
			b = append(b, ',')
		}
		p, err := blk.payloadBytes(i == 0)
		if err != nil {
			// Only a hand-built Block can fail; encode it as null so the
			// token is visibly broken rather than silently different.
			p = []byte("null")
		}
		b = append(b, `{"p":`...)
		b = append(b, p...)
		b = append(b, `,"s":"`...)
		b = b64.AppendEncode(b, blk.Sig)
		b = append(b, `"}`...)
	}
	b = append(b, ']')
	// The text is written once, into a string of its final size: the
	// base64 goes through a buffer on the stack in pieces of a multiple of
	// 3 bytes, whose encodings join to the whole's. (EncodeToString and a
	// concatenation with the prefix cost the daemon two more copies of
	// every grant it issued.)
	var text strings.Builder
	text.Grow(len(tokenPrefix) + b64.EncodedLen(len(b)))
	text.WriteString(tokenPrefix)
	var piece [1024]byte
	for len(b) > 0 {
		n := min(len(b), len(piece)/4*3)
		b64.Encode(piece[:], b[:n])
		text.Write(piece[:b64.EncodedLen(n)])
		b = b[n:]
	}
	return text.String()
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errMalformedToken, fmt.Sprintf(format, args...))
}

// Decode parses an encoded grant (§6.2). It checks the form only, not any
// signature: use CheckChain or Verify for that.
//
// Decode fails closed. It refuses a token over any cap (MaxTokenLen bytes,
// 16 blocks, 32 caveats a block, 1024 bytes a string, 64 items a list or
// object inside a caveat); a body that is
// not exactly canonical JSON (§10), byte for byte, so that every token has
// one spelling and the signed bytes are the bytes received; unknown payload
// fields, which an older verifier could otherwise not account for; a root
// block without iss or nonce or with prev; a later block with iss or nonce
// or without prev; keys, prev ids and signatures of the wrong form; and
// caveats that are not single-key objects. A caveat of an unknown kind or
// with a malformed value does decode; Verify refuses it as forbidden.
//
// Every error wraps errMalformedToken.
func Decode(s string) (*Token, error) {
	if len(s) > MaxTokenLen {
		return nil, malformed("longer than %d bytes", MaxTokenLen)
	}
	body, ok := strings.CutPrefix(s, tokenPrefix)
	if !ok {
		return nil, malformed("no %q prefix", tokenPrefix)
	}
	raw, err := b64Decode(body)
	if err != nil {
		return nil, malformed("not b64url")
	}
	r := &jsontext.Canon{B: raw}
	if r.Expect('[') != nil {
		return nil, malformed("not a list of blocks")
	}
	if r.Peek() == ']' {
		return nil, malformed("no blocks")
	}
	t := &Token{Blocks: make([]Block, 0, 4)}
	for {
		if len(t.Blocks) == maxBlocks {
			return nil, malformed("more than %d blocks", maxBlocks)
		}
		if !r.Lit(`{"p":`) {
			return nil, malformed("block %d: want exactly the fields p and s", len(t.Blocks))
		}
		start := r.I
		var blk Block
		if err := decodePayload(r, &blk, len(t.Blocks) == 0); err != nil {
			return nil, malformed("block %d: %v", len(t.Blocks), err)
		}
		blk.signed = raw[start:r.I:r.I]
		if !r.Lit(`,"s":`) || r.Peek() != '"' {
			return nil, malformed("block %d: want exactly the fields p and s", len(t.Blocks))
		}
		text, err := r.Str(2 * ed25519.SignatureSize)
		if err != nil {
			return nil, malformed("block %d: signature: %v", len(t.Blocks), err)
		}
		if blk.Sig, err = b64DecodeLen(text, ed25519.SignatureSize); err != nil {
			return nil, malformed("block %d: signature: %v", len(t.Blocks), err)
		}
		if !r.Lit("}") {
			return nil, malformed("block %d: want exactly the fields p and s", len(t.Blocks))
		}
		t.Blocks = append(t.Blocks, blk)
		if r.Lit("]") {
			break
		}
		if r.Expect(',') != nil {
			return nil, malformed("not a canonical list of blocks")
		}
	}
	if !r.Done() {
		return nil, malformed("trailing data after the blocks")
	}
	return t, nil
}

// Payload member bits, for checking which ones a payload holds.
const (
	fCaveats = 1 << iota
	fIat
	fIss
	fNonce
	fPrev
	fSub
)

func decodePayload(r *jsontext.Canon, p *Block, root bool) error {
	if err := r.Expect('{'); err != nil {
		return err
	}
	seen, prevKey := 0, ""
	for {
		key, err := r.Str(maxStringLen)
		if err != nil {
			return err
		}
		if seen != 0 && key <= prevKey {
			return errNotCanonical
		}
		prevKey = key
		if err := r.Expect(':'); err != nil {
			return err
		}
		switch key {
		case "caveats":
			seen |= fCaveats
			if p.Caveats, err = decodeCaveats(r); err != nil {
				return err
			}
		case "iat":
			seen |= fIat
			if c := r.Peek(); c != '-' && !jsontext.IsDigit(c) {
				return errors.New("iat: want an integer")
			}
			if p.Iat, err = r.Int(); err != nil {
				return fmt.Errorf("iat: %w", err)
			}
		case "iss", "sub":
			if r.Peek() != '"' {
				return fmt.Errorf("%s: want a key", key)
			}
			s, err := r.Str(maxStringLen)
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			if _, err := ParsePublicKey(s); err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			if key == "iss" {
				seen |= fIss
				p.Iss = s
			} else {
				seen |= fSub
				p.Sub = s
			}
		case "nonce":
			seen |= fNonce
			if r.Peek() != '"' {
				return errors.New("nonce: want a string")
			}
			if p.Nonce, err = r.Str(maxStringLen); err != nil {
				return fmt.Errorf("nonce: %w", err)
			}
		case "prev":
			seen |= fPrev
			if r.Peek() != '"' {
				return errors.New("prev: want a block id")
			}
			if p.Prev, err = r.Str(maxStringLen); err != nil {
				return fmt.Errorf("prev: %w", err)
			}
			if _, err := b64DecodeLen(p.Prev, sha256.Size); err != nil {
				return fmt.Errorf("prev: %w", err)
			}
		default:
			// Fail closed: a field this verifier does not know might carry
			// a restriction it would silently ignore.
			return fmt.Errorf("unknown payload field %q", key)
		}
		if r.Lit("}") {
			break
		}
		if err := r.Expect(','); err != nil {
			return err
		}
	}
	want := fCaveats | fIat | fSub
	if root {
		want |= fIss | fNonce
	} else {
		want |= fPrev
	}
	if seen != want {
		if root {
			return errors.New("a root payload has exactly caveats, iat, iss, nonce and sub")
		}
		return errors.New("a delegation payload has exactly caveats, iat, prev and sub")
	}
	return nil
}

func decodeCaveats(r *jsontext.Canon) ([]Caveat, error) {
	if err := r.Expect('['); err != nil {
		return nil, err
	}
	out := []Caveat{}
	if r.Lit("]") {
		return out, nil
	}
	for {
		if len(out) == maxCaveatsPerBlock {
			return nil, fmt.Errorf("more than %d caveats", maxCaveatsPerBlock)
		}
		if !r.Lit("{") || r.Peek() != '"' {
			return nil, errors.New("a caveat is an object with one key")
		}
		name, err := r.Str(maxStringLen)
		if err != nil {
			return nil, err
		}
		if err := r.Expect(':'); err != nil {
			return nil, err
		}
		start := r.I
		if err := r.Skip(caveatLimits, 0); err != nil {
			return nil, fmt.Errorf("caveat %q: %w", name, err)
		}
		out = append(out, Caveat{Name: name, Value: r.B[start:r.I:r.I]})
		if !r.Lit("}") {
			return nil, errors.New("a caveat is an object with one key")
		}
		if r.Lit("]") {
			return out, nil
		}
		if err := r.Expect(','); err != nil {
			return nil, err
		}
	}
}

// ID returns the grant id: the id of the root block (§6.2).
func (t *Token) ID() string { return t.Blocks[0].ID() }

// Holder returns the key that holds the grant: the sub of the last block.
func (t *Token) Holder() string { return t.Blocks[len(t.Blocks)-1].Sub }

// Issuer returns the principal: the iss of the root block.
func (t *Token) Issuer() string { return t.Blocks[0].Iss }

// Expiry returns the earliest exp over all blocks, and false when no block
// has a well-formed exp caveat.
func (t *Token) Expiry() (int64, bool) {
	var min int64
	found := false
	for i := range t.Blocks {
		if e, ok := blockExpiry(&t.Blocks[i]); ok && (!found || e < min) {
			min, found = e, true
		}
	}
	return min, found
}

func blockExpiry(b *Block) (int64, bool) {
	var min int64
	found := false
	for _, c := range b.Caveats {
		if c.Name != kindExp {
			continue
		}
		if e, err := c.readInt(); err == nil && (!found || e < min) {
			min, found = e, true
		}
	}
	return min, found
}

// CheckChain checks the chain's signatures and links (§6.4 steps 2 and 3):
// the root is signed by its iss, each later block by the sub of the block
// before it, and each prev names the block before it. It checks no caveat
// and no trust in the issuer. Its errors are *Error with codeUnauthorized.
func (t *Token) CheckChain() error {
	_, err := t.checkChain(nil)
	if err != nil {
		return err
	}
	return nil
}

// checkChain is CheckChain that also returns the block ids it computed. It
// takes the answer to a signature check from cache when cache (which may be
// nil) holds it.
func (t *Token) checkChain(cache *BlockCache) ([]string, *Error) {
	if len(t.Blocks) == 0 {
		return nil, newError(codeUnauthorized, "grant has no blocks")
	}
	if len(t.Blocks) > maxBlocks {
		return nil, newError(codeUnauthorized, "grant has too many blocks")
	}
	ids := make([]string, len(t.Blocks))
	var signer ed25519.PublicKey
	for i := range t.Blocks {
		b := &t.Blocks[i]
		var keyText string
		if i == 0 {
			if b.Prev != "" {
				return nil, newError(codeUnauthorized, "root block has a prev")
			}
			keyText = b.Iss
		} else {
			if b.Iss != "" || b.Nonce != "" {
				return nil, newError(codeUnauthorized, fmt.Sprintf("block %d has an iss or nonce", i))
			}
			// Without this link a block could be moved under another
			// chain whose holder happens to have the same key.
			if b.Prev != ids[i-1] {
				return nil, newError(codeUnauthorized, fmt.Sprintf("block %d: prev does not name block %d", i, i-1))
			}
			keyText = t.Blocks[i-1].Sub
		}
		var err error
		if signer, err = ParsePublicKey(keyText); err != nil {
			return nil, newError(codeUnauthorized, fmt.Sprintf("block %d: signer: %v", i, err))
		}
		msg, err := b.payloadBytes(i == 0)
		if err != nil {
			return nil, newError(codeUnauthorized, fmt.Sprintf("block %d: %v", i, err))
		}
		if len(b.Sig) != ed25519.SignatureSize || !cache.verifySignature(signer, msg, b.Sig) {
			return nil, newError(codeUnauthorized, fmt.Sprintf("block %d: bad signature", i))
		}
		ids[i] = b.ID()
	}
	if _, err := ParsePublicKey(t.Holder()); err != nil {
		return nil, newError(codeUnauthorized, fmt.Sprintf("holder: %v", err))
	}
	return ids, nil
}

// NewNonce returns 16 bytes from rand in b64url, for a root block's nonce.
func NewNonce(rand io.Reader) (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(rand, b[:]); err != nil {
		return "", fmt.Errorf("nonce: %w", err)
	}
	return b64.EncodeToString(b[:]), nil
}

func checkNewCaveats(caveats []Caveat) error {
	if len(caveats) > maxCaveatsPerBlock {
		return fmt.Errorf("more than %d caveats", maxCaveatsPerBlock)
	}
	for _, c := range caveats {
		// Never sign a caveat that every verifier would refuse anyway.
		if err := c.Check(); err != nil {
			return err
		}
	}
	return nil
}

// checkHolder refuses to hand a grant to a key that CheckPublicKey refuses:
// a grant held by a small-order key is usable by anyone (issue 10 item 1).
func checkHolder(holder ed25519.PublicKey) error {
	if err := CheckPublicKey(holder); err != nil {
		return fmt.Errorf("holder: %w", err)
	}
	return nil
}

// Issue signs a root grant (§6.2) from principal to holder. Every caveat
// must pass Check; nonce must be non-empty (use NewNonce).
func Issue(principal crypto.Signer, holder ed25519.PublicKey, caveats []Caveat, iat int64, nonce string) (*Token, error) {
	iss, err := signerKey(principal)
	if err != nil {
		return nil, fmt.Errorf("issue: %w", err)
	}
	if err := checkHolder(holder); err != nil {
		return nil, fmt.Errorf("issue: %w", err)
	}
	if nonce == "" || len(nonce) > maxStringLen/2 {
		return nil, errors.New("issue: nonce must be 1 to 512 bytes")
	}
	if err := checkNewCaveats(caveats); err != nil {
		return nil, fmt.Errorf("issue: %w", err)
	}
	blk := Block{
		Iss:     FormatPublicKey(iss),
		Sub:     FormatPublicKey(holder),
		Caveats: append([]Caveat{}, caveats...),
		Iat:     iat,
		Nonce:   nonce,
	}
	if blk.signed, err = marshalPayload(&blk, true); err != nil {
		return nil, fmt.Errorf("issue: %w", err)
	}
	if blk.Sig, err = signAs(principal, iss, blk.signed); err != nil {
		return nil, fmt.Errorf("issue: %w", err)
	}
	return &Token{Blocks: []Block{blk}}, nil
}

// Delegate returns a new token: t with one more block, signed by holder,
// that hands the grant to the key to with the added caveats (§6.2). Caveats
// accumulate, so the new token can do at most what t can. holder must be
// t's holder. t itself is not changed.
func (t *Token) Delegate(holder crypto.Signer, to ed25519.PublicKey, caveats []Caveat, iat int64) (*Token, error) {
	pub, err := signerKey(holder)
	if err != nil {
		return nil, fmt.Errorf("delegate: %w", err)
	}
	if len(t.Blocks) == 0 {
		return nil, errors.New("delegate: grant has no blocks")
	}
	if FormatPublicKey(pub) != t.Holder() {
		return nil, errors.New("delegate: the signing key does not hold this grant")
	}
	if len(t.Blocks) >= maxBlocks {
		return nil, fmt.Errorf("delegate: a grant has at most %d blocks", maxBlocks)
	}
	if err := checkHolder(to); err != nil {
		return nil, fmt.Errorf("delegate: %w", err)
	}
	if err := checkNewCaveats(caveats); err != nil {
		return nil, fmt.Errorf("delegate: %w", err)
	}
	blk := Block{
		Prev:    t.Blocks[len(t.Blocks)-1].ID(),
		Sub:     FormatPublicKey(to),
		Caveats: append([]Caveat{}, caveats...),
		Iat:     iat,
	}
	if blk.signed, err = marshalPayload(&blk, false); err != nil {
		return nil, fmt.Errorf("delegate: %w", err)
	}
	if blk.Sig, err = signHolder(holder, blk.signed); err != nil {
		return nil, fmt.Errorf("delegate: %w", err)
	}
	blocks := make([]Block, len(t.Blocks), len(t.Blocks)+1)
	copy(blocks, t.Blocks)
	return &Token{Blocks: append(blocks, blk)}, nil
}

// ConsentRequest is the "consent" object a service sends with
// consent_required (§6.6).
type ConsentRequest struct {
	Proposal   string `json:"proposal"`
	Hash       string `json:"hash"`
	Service    string `json:"service"`
	Capability string `json:"capability"`
	Principal  string `json:"principal"`
	Summary    string `json:"summary"`
	Expires    int64  `json:"expires"`
}

// ConsentCaveats returns exactly the caveats of a consent grant, in the
// spec's order (§6.6, errata 3): svc, verbs COMMIT, can, only, exp. Without
// the first three, only (which constrains COMMIT alone) would leave a
// blanket grant for every other verb at every service.
func ConsentCaveats(service, capability, hash string, expires int64) []Caveat {
	return []Caveat{Svc(service), Verbs(verbCommit), Can(capability), Only(hash), Exp(expires)}
}

// IssueConsent signs a consent grant (§6.6) for c: a root grant from
// principal to holder with exactly ConsentCaveats. It refuses a request
// that names another principal, an empty field, or an expiry not after iat.
// It does not check the proposal: call CheckConsent first.
func IssueConsent(principal crypto.Signer, holder ed25519.PublicKey, c ConsentRequest, iat int64, nonce string) (*Token, error) {
	pub, err := signerKey(principal)
	if err != nil {
		return nil, fmt.Errorf("consent: %w", err)
	}
	if c.Principal != FormatPublicKey(pub) {
		return nil, errors.New("consent: the request names another principal")
	}
	if c.Service == "" || c.Capability == "" || c.Hash == "" {
		return nil, errors.New("consent: service, capability and hash are required")
	}
	if c.Expires <= iat {
		return nil, errors.New("consent: expires is not after iat")
	}
	return Issue(principal, holder, ConsentCaveats(c.Service, c.Capability, c.Hash, c.Expires), iat, nonce)
}
