package client

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// TestGrantFrameByHand checks the client's hand-written GRANT request
// against the general path it replaces: the grant object is canonical, so
// the digest the client signs is the one the daemon computes (GrantDigest),
// and the frame decodes to what encodeFrame would have sent.
func TestGrantFrameByHand(t *testing.T) {
	holder := "ed25519:" + base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	odd := func(name, value string) grant.Caveat { return grant.Caveat{Name: name, Value: json.RawMessage(value)} }
	for name, cavs := range map[string][]grant.Caveat{
		"nil":      nil,
		"empty":    {},
		"typical":  {grant.Svc("cal.example"), grant.Can("calendar.*"), grant.Exp(1790003600)},
		"spend":    {grant.Spend(grant.Money{Amount: 5000, Currency: "USD"}), grant.Risk("low"), grant.Verbs("ASK", "COMMIT")},
		"unicode":  {grant.Svc("caf\u00e9.example", "\u2028<>&\"\\\n\t\x01")},
		"spaced":   {odd("per", `{ "currency" : "EUR", "amount" : 100 }`)},
		"bad-utf8": {odd("svc\xff", `["a"]`)},
	} {
		t.Run(name, func(t *testing.T) {
			body, err := canonicalGrantBody(holder, cavs)
			if err != nil {
				t.Fatal(err)
			}
			want, err := protocol.GrantDigest(body)
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(body)
			if got := base64.RawURLEncoding.EncodeToString(sum[:]); got != want {
				t.Fatalf("body is not canonical: %s", body)
			}
			if cavs == nil {
				cavs = []grant.Caveat{}
			}
			general, err := json.Marshal(protocol.GrantBody{Holder: holder, Caveats: cavs})
			if err != nil {
				t.Fatal(err)
			}
			if d, _ := protocol.GrantDigest(general); d != want {
				t.Fatalf("digest %s, the general path's %s", want, d)
			}
			proof := grant.Proof{Key: holder, Ts: 1790000000, Sig: base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{9}, 64))}
			fast, err := grantFrame("42", body, &proof)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Count(fast, []byte("\n")) != 1 || fast[len(fast)-1] != '\n' {
				t.Fatalf("frame is not one line: %q", fast)
			}
			slow, err := protocol.EncodeFrame(&protocol.Frame{ID: "42", Verb: protocol.VerbGrant, Grant: body, Proof: &proof})
			if err != nil {
				t.Fatal(err)
			}
			var a, b protocol.Frame
			if err := json.Unmarshal(fast, &a); err != nil {
				t.Fatalf("%v: %s", err, fast)
			}
			if err := json.Unmarshal(slow, &b); err != nil {
				t.Fatal(err)
			}
			// encoding/json writes <, >, & and U+2028 as escapes inside a
			// raw value; the daemon canonicalizes before hashing, so
			// compare the canonical forms.
			ca, err1 := grant.CanonicalizeJSON(a.Grant)
			cb, err2 := grant.CanonicalizeJSON(b.Grant)
			if err1 != nil || err2 != nil || !bytes.Equal(ca, cb) || !bytes.Equal(ca, body) {
				t.Fatalf("grant objects differ: %s and %s", a.Grant, b.Grant)
			}
			a.Grant, b.Grant = nil, nil
			if diff := cmp.Diff(b, a, cmpopts.IgnoreUnexported(protocol.Frame{})); diff != "" {
				t.Fatalf("hand-written frame differs (-encodeFrame +grantFrame):\n%s", diff)
			}
		})
	}
}

// TestGrantReplyByHand checks the client's reading of a GRANT reply: the
// daemon's reply to this request is read (in one pass, or through
// encoding/json when it is not in the daemon's exact shape) to the same
// result, and a reply to another request is left to the general path.
func TestGrantReplyByHand(t *testing.T) {
	res := &protocol.GrantResult{Token: "eyJ.abc", GrantID: "g_1", Expires: 1790003600, Decision: "auto", Rule: "calendar-auto", RequestID: "r_1",
		Caveats: []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find"), grant.Exp(1790003600)}}
	fr, err := protocol.GrantReplyFrame(res)
	if err != nil {
		t.Fatal(err)
	}
	fr.ID, fr.Re = "r7", "7"
	line, err := protocol.EncodeFrame(fr)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := protocol.DecodeGrantReply(line); !ok {
		t.Fatal("the daemon's reply is not read in one pass")
	}
	spaced := bytes.Replace(line, []byte(`"grant_id":`), []byte(`"grant_id": `), 1)
	for _, l := range [][]byte{line, spaced} {
		got, ok := decodeGrantReply("7", l)
		if !ok {
			t.Fatalf("decodeGrantReply declines\n%s", l)
		}
		if diff := cmp.Diff(res, got); diff != "" {
			t.Errorf("decodeGrantReply(%s): -want +got\n%s", l, diff)
		}
		if got, ok := decodeGrantReply("8", l); ok || got != nil {
			t.Errorf("the reply to request 7 was taken for request 8: %+v", got)
		}
	}
}
