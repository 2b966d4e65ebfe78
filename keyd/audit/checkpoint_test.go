package audit

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
)

func testCheckpoint(t testing.TB) *checkpoint.Checkpoint {
	t.Helper()
	cp := &checkpoint.Checkpoint{Log: "AAAAAAAAAAAAAAAAAAAAAA", Seq: 41, Hash: lineHash([]byte("x")), Time: "2030-01-02T03:04:05.123Z", Reason: checkpoint.ReasonCount}
	if err := signCheckpoint(cp, testKey("daemon")); err != nil {
		t.Fatal(err)
	}
	return cp
}

// TestCheckpointNotAGrantSignature: the principal key signs checkpoints and
// grants alike, so no checkpoint signature may verify as a Parley signature
// and no Parley signature as a checkpoint's. Parley signs canonical JSON
// (§6.2, §6.5, §10); a checkpoint's message is not JSON, and a checkpoint
// whose fields would put other bytes into the message does not verify.
func TestCheckpointNotAGrantSignature(t *testing.T) {
	cp := testCheckpoint(t)
	msg, err := cp.Message()
	if err != nil {
		t.Fatal(err)
	}
	if json.Valid(msg) || msg[0] == '{' || !bytes.HasPrefix(msg, []byte("parley-keyd audit checkpoint v1\n")) {
		t.Fatalf("checkpoint message %q could be read as JSON", msg)
	}
	sig, _ := base64.RawURLEncoding.DecodeString(cp.Sig)
	// A Parley block payload signed by the same key is not a checkpoint
	// signature, and the checkpoint's signature is not one over a payload.
	payload := []byte(`{"caveats":[{"exp":1900000000}],"iat":1800000000,"iss":"` + checkpoint.FormatKey(testPub("daemon")) + `","nonce":"n","sub":"` + checkpoint.FormatKey(testPub("daemon")) + `"}`)
	if ed25519.Verify(testPub("daemon"), payload, sig) {
		t.Fatal("a checkpoint signature verifies over a grant payload")
	}
	grantSig := ed25519.Sign(testKey("daemon"), payload)
	forged := *cp
	forged.Sig = base64.RawURLEncoding.EncodeToString(grantSig)
	if err := forged.Verify(testPub("daemon")); !errors.Is(err, checkpoint.ErrCheckpoint) {
		t.Fatalf("a grant signature passes as a checkpoint's: %v", err)
	}
	// Fields that would smuggle lines into the message are refused.
	for name, edit := range map[string]func(c *checkpoint.Checkpoint){
		"newline-in-reason": func(c *checkpoint.Checkpoint) { c.Reason = "count\nseq 1" },
		"newline-in-time":   func(c *checkpoint.Checkpoint) { c.Time = "2030-01-02T03:04:05Z\nx" },
		"json-log":          func(c *checkpoint.Checkpoint) { c.Log = `{"a":1}` },
		"hash-at-seq-0":     func(c *checkpoint.Checkpoint) { c.Seq = 0 },
		"local-time":        func(c *checkpoint.Checkpoint) { c.Time = "2030-01-02T04:04:05+01:00" },
	} {
		c := *cp
		edit(&c)
		if _, err := c.Message(); !errors.Is(err, checkpoint.ErrCheckpoint) {
			t.Errorf("%s: Message() = %v, want ErrCheckpoint", name, err)
		}
	}
}

func TestCheckpointVerify(t *testing.T) {
	cp := testCheckpoint(t)
	if err := cp.Verify(testPub("daemon")); err != nil {
		t.Fatal(err)
	}
	if err := cp.Verify(nil); err != nil {
		t.Fatal(err)
	}
	tests := map[string]func(c *checkpoint.Checkpoint){
		"seq":    func(c *checkpoint.Checkpoint) { c.Seq++ },
		"hash":   func(c *checkpoint.Checkpoint) { c.Hash = lineHash([]byte("y")) },
		"log":    func(c *checkpoint.Checkpoint) { c.Log = "BAAAAAAAAAAAAAAAAAAAAA" },
		"time":   func(c *checkpoint.Checkpoint) { c.Time = "2030-01-02T03:04:06.123Z" },
		"reason": func(c *checkpoint.Checkpoint) { c.Reason = checkpoint.ReasonStop },
		"key":    func(c *checkpoint.Checkpoint) { c.Key = checkpoint.FormatKey(testPub("other")) },
		"sig":    func(c *checkpoint.Checkpoint) { c.Sig = c.Sig[:10] },
	}
	for name, edit := range tests {
		c := *cp
		edit(&c)
		if err := c.Verify(nil); !errors.Is(err, checkpoint.ErrCheckpoint) {
			t.Errorf("edited %s: Verify = %v", name, err)
		}
	}
	if err := cp.Verify(testPub("other")); err == nil || !strings.Contains(err.Error(), "not by the expected key") {
		t.Errorf("pinned to another key: %v", err)
	}
}

type prehashSigner struct{ k ed25519.PrivateKey }

func (s prehashSigner) Public() crypto.PublicKey { return s.k.Public() }
func (s prehashSigner) Sign(r io.Reader, msg []byte, _ crypto.SignerOpts) ([]byte, error) {
	return s.k.Sign(r, msg[:10], crypto.Hash(0))
}

// TestCheckpointSigners: a signer must be Ed25519 and sign the message
// itself; one that signs something else is caught when the checkpoint is
// made, not when someone checks it years later.
func TestCheckpointSigners(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if _, err := (Options{Signer: ec}).Open(t.TempDir() + "/audit.log"); err == nil || !strings.Contains(err.Error(), "not an Ed25519 key") {
		t.Errorf("ECDSA signer: %v", err)
	}
	if _, err := (Options{Signer: prehashSigner{testKey("daemon")}}).Open(t.TempDir() + "/audit.log"); err == nil || !strings.Contains(err.Error(), "does not verify") {
		t.Errorf("a signer that signs something else: %v", err)
	}
}

func TestParseCheckpoint(t *testing.T) {
	cp := testCheckpoint(t)
	line := cp.Marshal()
	got, err := checkpoint.Parse(line)
	if err != nil || *got != *cp {
		t.Fatalf("checkpoint.Parse(Marshal()) = %+v, %v", got, err)
	}
	rec := checkpointLine(cp.Seq+1, cp)
	if got, err := checkpoint.Parse(rec); err != nil || *got != *cp {
		t.Fatalf("checkpoint.Parse(record) = %+v, %v", got, err)
	}
	for name, in := range map[string]string{
		"duplicate-seq":  strings.Replace(string(line), `"seq":41`, `"seq":41,"seq":42`, 1),
		"case-variant":   strings.Replace(string(line), `"seq":41`, `"seq":41,"SEQ":42`, 1),
		"unknown-field":  strings.Replace(string(line), `"seq":41`, `"seq":41,"extra":1`, 1),
		"two-values":     string(line) + " {}",
		"not-an-object":  `[1]`,
		"bad-key":        strings.Replace(string(line), "ed25519:", "ed448:", 1),
		"too-long":       strings.Repeat(" ", 5000) + string(line),
		"unknown-reason": strings.Replace(string(line), `"reason":"count"`, `"reason":"because"`, 1),
	} {
		if _, err := checkpoint.Parse([]byte(in)); !errors.Is(err, checkpoint.ErrCheckpoint) {
			t.Errorf("%s: ParseCheckpoint = %v", name, err)
		}
	}
}

func TestConsistent(t *testing.T) {
	a := testCheckpoint(t)
	b := *a
	b.Seq += 10
	if err := checkpoint.Consistent(a, &b); err != nil {
		t.Errorf("later checkpoint: %v", err)
	}
	if err := checkpoint.Consistent(&b, a); err == nil || !strings.Contains(err.Error(), "rolled back") {
		t.Errorf("older checkpoint: %v", err)
	}
	c := *a
	c.Hash = lineHash([]byte("other"))
	if err := checkpoint.Consistent(a, &c); err == nil || !strings.Contains(err.Error(), "rewritten") {
		t.Errorf("same seq, other hash: %v", err)
	}
	d := *a
	d.Log = "BAAAAAAAAAAAAAAAAAAAAA"
	if err := checkpoint.Consistent(a, &d); err == nil || !strings.Contains(err.Error(), "new log") {
		t.Errorf("other log: %v", err)
	}
}

// FuzzParseCheckpoint: whatever parses re-encodes to the same checkpoint,
// and its message can be built; nothing panics.
func FuzzParseCheckpoint(f *testing.F) {
	cp := testCheckpoint(f)
	f.Add(cp.Marshal())
	f.Add(checkpointLine(cp.Seq+1, cp))
	f.Add([]byte(`{"log":"","seq":0}`))
	f.Add([]byte(`{"kind":"checkpoint","checkpoint":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := checkpoint.Parse(data)
		if err != nil {
			return
		}
		again, err := checkpoint.Parse(c.Marshal())
		if err != nil || *again != *c {
			t.Fatalf("re-parse of %s: %+v, %v", c.Marshal(), again, err)
		}
		msg, err := c.Message()
		if err != nil {
			t.Fatalf("parsed checkpoint has no message: %v", err)
		}
		if json.Valid(msg) {
			t.Fatalf("message %q is JSON", msg)
		}
		c.Verify(nil)
	})
}
