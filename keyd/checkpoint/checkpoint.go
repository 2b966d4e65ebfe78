package checkpoint

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
)

// Checkpoint is a signed statement of a log's head: the record with sequence
// number Seq has the chain hash Hash, in the log whose id is Log, at Time.
// Because every record's prev is the hash of the one before, a checkpoint
// vouches for every record up to Seq: a record removed, edited, inserted or
// reordered before it, a chain recomputed after such an edit, and a rewrite
// all change the hash at Seq, and a log cut or rolled back to before Seq
// lacks the record. Nobody without the signing key can make a checkpoint
// for a forged log.
//
// The log writes a checkpoint as a record of kind "checkpoint" right after
// the record it covers (its seq is Seq+1 and its prev is Hash), and hands it
// to the witnesses, which keep it where the daemon's user cannot rewrite it.
//
// # Signature
//
// The signature is pure Ed25519 over Message(), a text that begins with
// the line "parley-keyd audit checkpoint v1". Parley signs only canonical
// JSON objects (§6.2 block payloads, §6.5 proofs), whose first byte is "{",
// so a checkpoint signature is never a valid grant block or proof
// signature, nor the other way round, even when the principal key signs
// both. The message is built here from checked fields; callers cannot
// choose its bytes.
type Checkpoint struct {
	// Log is the log's id, chosen at random when the log was created and
	// kept across segments (22 base64url characters).
	Log string `json:"log"`
	// Seq and Hash name the last record covered. The first checkpoint of a
	// log covers the empty log: seq 0, hash "".
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
	// Time is when it was made, RFC 3339 with nanoseconds, UTC.
	Time string `json:"time"`
	// Reason says why it was made: one of the Reason constants.
	Reason string `json:"reason"`
	// Key is the signer's public key, "ed25519:" and its base64url.
	Key string `json:"key"`
	// Sig is the base64url Ed25519 signature of Message().
	Sig string `json:"sig"`
}

// Why a checkpoint was made.
const (
	ReasonCreate   = "create"   // the log was created: covers seq 0
	ReasonOpen     = "open"     // the daemon opened the log
	ReasonCount    = "count"    // Options.CheckpointEvery records since the last one
	ReasonInterval = "interval" // Options.CheckpointInterval since the last one
	ReasonRotate   = "rotate"   // the first record of a new segment: covers the closed one
	ReasonReopen   = "reopen"   // the daemon reopened its log (Reopen)
	ReasonStop     = "stop"     // the daemon closed its log; nothing follows but an open checkpoint
	ReasonRequest  = "request"  // the daemon asked for one (Log.Checkpoint)
)

var reasons = map[string]bool{
	ReasonCreate: true, ReasonOpen: true, ReasonCount: true, ReasonInterval: true,
	ReasonRotate: true, ReasonReopen: true, ReasonStop: true, ReasonRequest: true,
}

// checkpointDomain begins every checkpoint's signed message. It is not
// JSON, so no Parley grant block or proof (canonical JSON objects, §6.2,
// §6.5, §10) can share a signed message with a checkpoint.
const checkpointDomain = "parley-keyd audit checkpoint v1\n"

// ErrCheckpoint is wrapped by every error about a checkpoint's form or
// signature.
var ErrCheckpoint = errors.New("bad checkpoint")

// Message returns the bytes the signature covers: checkpointDomain, then
// one "name value" line for each of log, seq, hash, time and reason. It
// fails for a checkpoint whose fields are malformed, so that no field can
// smuggle a line of its own into the message.
func (c *Checkpoint) Message() ([]byte, error) {
	if err := c.checkFields(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(checkpointDomain)
	b.WriteString("log " + c.Log + "\n")
	b.WriteString("seq " + strconv.FormatUint(c.Seq, 10) + "\n")
	b.WriteString("hash " + c.Hash + "\n")
	b.WriteString("time " + c.Time + "\n")
	b.WriteString("reason " + c.Reason + "\n")
	return b.Bytes(), nil
}

func (c *Checkpoint) checkFields() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrCheckpoint, fmt.Sprintf(format, args...))
	}
	if !isB64(c.Log) || len(c.Log) != 22 {
		return bad("log id %q is not 22 base64url characters", short(c.Log, 40))
	}
	if c.Seq == 0 && c.Hash != "" || c.Seq != 0 && (!isB64(c.Hash) || len(c.Hash) != 43) {
		return bad("hash %q is not the chain hash of a record", short(c.Hash, 60))
	}
	t, err := time.Parse(time.RFC3339Nano, c.Time)
	if err != nil || t.UTC().Format(time.RFC3339Nano) != c.Time {
		return bad("time %q is not RFC 3339 UTC", short(c.Time, 40))
	}
	if !reasons[c.Reason] {
		return bad("unknown reason %q", short(c.Reason, 20))
	}
	return nil
}

func isB64(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// FormatKey writes an Ed25519 public key as Parley does (§6.1).
func FormatKey(pub ed25519.PublicKey) string {
	return "ed25519:" + base64.RawURLEncoding.EncodeToString(pub)
}

// ParseKey reads a key written by FormatKey, with white space around it
// allowed (a key file's newline). It refuses what grant.ParsePublicKey
// refuses: a second spelling of a key, a non-canonical encoding and a point
// of small order (DESIGN.md property 10). Attack: under the identity point
// the keyless signature (R = the identity, S = 0) verifies every message,
// so `audit verify --key` given it would accept any forged checkpoint.
func ParseKey(s string) (ed25519.PublicKey, error) {
	pub, err := grant.ParsePublicKey(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("key %q: %w", short(s, 60), err)
	}
	return pub, nil
}

// Sign fills in c.Key and c.Sig with signer, which must hold an
// Ed25519 key and sign pure Ed25519 (crypto.Hash(0)), as the principal key's
// signers do.
func Sign(c *Checkpoint, signer crypto.Signer) error {
	pub, ok := signer.Public().(ed25519.PublicKey)
	if !ok {
		return errors.New("checkpoint signer is not an Ed25519 key")
	}
	c.Key = FormatKey(pub)
	c.Sig = ""
	msg, err := c.Message()
	if err != nil {
		return err
	}
	sig, err := signer.Sign(nil, msg, crypto.Hash(0))
	if err != nil {
		return fmt.Errorf("sign checkpoint: %w", err)
	}
	if !ed25519.Verify(pub, msg, sig) {
		// A signer that signs something else (a prehash, a context)
		// would make checkpoints nobody can check; fail loudly now.
		return errors.New("checkpoint signer returned a signature that does not verify as pure Ed25519")
	}
	c.Sig = base64.RawURLEncoding.EncodeToString(sig)
	return nil
}

// Verify checks c's fields and its signature under key. A nil key checks
// the signature under the key c names, which proves only that whoever made
// c held that key: pin the key the log's checkpoints must carry whenever
// you can.
func (c *Checkpoint) Verify(key ed25519.PublicKey) error {
	named, err := ParseKey(c.Key)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	if key != nil && !key.Equal(named) {
		return fmt.Errorf("%w: signed by %s, not by the expected key %s", ErrCheckpoint, c.Key, FormatKey(key))
	}
	msg, err := c.Message()
	if err != nil {
		return err
	}
	sig, err := base64.RawURLEncoding.DecodeString(c.Sig)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("%w: signature is not a base64url Ed25519 signature", ErrCheckpoint)
	}
	if !ed25519.Verify(named, msg, sig) {
		return fmt.Errorf("%w: signature does not verify", ErrCheckpoint)
	}
	return nil
}

// Marshal returns c as one line of JSON without a newline, the form
// witnesses keep and Parse reads.
func (c *Checkpoint) Marshal() []byte {
	b, _ := json.Marshal(c)
	return b
}

// Parse reads one checkpoint from JSON: a checkpoint object as
// Marshal writes it, or a whole log record of kind "checkpoint" (so that a
// line cut from a log or from a journal entry works too). Unknown fields
// and duplicate names are refused. It checks the form of every field, not
// the signature: call Verify.
func Parse(data []byte) (*Checkpoint, error) {
	if len(data) > 4096 {
		return nil, fmt.Errorf("%w: %d bytes is too long for a checkpoint", ErrCheckpoint, len(data))
	}
	data = bytes.TrimSpace(data)
	// One strict reading (DESIGN.md property 9): exact names, none twice,
	// no unknown one, nothing after the object.
	var probe struct {
		Kind       string          `json:"kind"`
		Checkpoint json.RawMessage `json:"checkpoint"`
	}
	if err := grant.DecodeStrict(data, &probe); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	if probe.Kind == recordKind && probe.Checkpoint != nil {
		data = probe.Checkpoint
	}
	var c Checkpoint
	if err := grant.DecodeStrictKnown(data, &c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	if err := c.checkFields(); err != nil {
		return nil, err
	}
	if _, err := ParseKey(c.Key); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	return &c, nil
}

// Consistent reports whether two checkpoints can belong to one honest log:
// the same log id, and the same hash when they name the same seq. It cannot
// see more without the log (Verify with VerifyOptions.Checkpoints does).
// An approver keeping the latest checkpoint uses it to notice a daemon
// that shows it a rolled-back or rewritten log: a new checkpoint with a lower
// seq than the one kept, or another hash at the same seq.
func Consistent(kept, next *Checkpoint) error {
	switch {
	case kept.Log != next.Log:
		return fmt.Errorf("%w: checkpoint of log %s, but the one kept is of log %s (a new log was started)", ErrCheckpoint, next.Log, kept.Log)
	case next.Seq < kept.Seq:
		return fmt.Errorf("%w: checkpoint at seq %d is older than the one kept at seq %d (the log was rolled back or cut)", ErrCheckpoint, next.Seq, kept.Seq)
	case next.Seq == kept.Seq && next.Hash != kept.Hash:
		return fmt.Errorf("%w: two checkpoints of seq %d with different hashes (the log was rewritten)", ErrCheckpoint, next.Seq)
	}
	return nil
}

// recordKind is the kind of the audit log's records that hold a checkpoint.
const recordKind = "checkpoint"

// short quotes at most max bytes of an untrusted value for a message.
func short(s string, max int) string {
	if len(s) > max {
		s = s[:max] + "…"
	}
	return strconv.QuoteToGraphic(s)[1 : len(strconv.QuoteToGraphic(s))-1]
}
