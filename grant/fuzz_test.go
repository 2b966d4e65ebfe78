package grant

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/parley-keyd/parley-keyd/grant/internal/jsontext"
)

// vectorTokens returns the tokens of grants.json, as fuzz seeds.
func vectorTokens(f *testing.F) []string {
	data, err := os.ReadFile(filepath.Join("testdata", "conformance", "grants.json"))
	if err != nil {
		f.Fatal(err)
	}
	var v grantVectors
	if err := json.Unmarshal(data, &v); err != nil {
		f.Fatal(err)
	}
	var out []string
	for _, c := range v.Cases {
		out = append(out, c.Token)
	}
	return out
}

// FuzzDecode checks that Decode never panics, that a token that decodes
// re-encodes to the same bytes, and that the payload bytes kept for the
// signature are exactly what this package would sign for that payload. The
// input is the JSON body (the fuzzer gets further inside the b64url layer
// that way) and is also tried as a whole token text.
func FuzzDecode(f *testing.F) {
	for _, tok := range vectorTokens(f) {
		if b, err := b64.DecodeString(tok[len(tokenPrefix):]); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(body(f, tokenOf(rootPayload("")))))
	f.Fuzz(func(t *testing.T, in []byte) {
		checkDecode(t, tokenPrefix+b64.EncodeToString(in))
		checkDecode(t, string(in))
	})
}

func checkDecode(t *testing.T, s string) {
	tok, err := Decode(s)
	if err != nil {
		return
	}
	if got := tok.Encode(); got != s {
		t.Fatalf("re-encoded token differs:\n in %q\nout %q", s, got)
	}
	for i := range tok.Blocks {
		b := &tok.Blocks[i]
		m, err := marshalPayload(b, i == 0)
		if err != nil {
			t.Fatalf("block %d: decoded payload does not marshal: %v", i, err)
		}
		if !bytes.Equal(m, b.signed) {
			t.Fatalf("block %d: marshalled payload differs from the signed bytes:\n%s\n%s", i, m, b.signed)
		}
		for _, c := range b.Caveats {
			_ = c.Check()
		}
	}
	_ = tok.CheckChain()
	_, _ = tok.Expiry()
}

// FuzzCanonicalizeJSON checks that canonical output is accepted by the
// strict reader and is a fixed point, that canonical input comes back
// unchanged, and that nothing is accepted that encoding/json rejects or
// reads differently.
func FuzzCanonicalizeJSON(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":[true,false,null,"x\u0000\u2028<>&"]}`, `"\ud83c\udf89"`, `-0`, `1.5`, `{"a":1,"a":2}`,
		`9007199254740991`, "\"\x7f\"", `"\/"`, `[[[[]]]]`, `{"é":1,"z":{}}`,
	} {
		f.Add([]byte(s))
	}
	data, err := os.ReadFile(filepath.Join("testdata", "conformance", "canonical.json"))
	if err != nil {
		f.Fatal(err)
	}
	var cases []struct {
		Input json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		f.Fatal(err)
	}
	for _, c := range cases {
		f.Add([]byte(c.Input))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := CanonicalizeJSON(in)
		// The shortcut for canonical input gives what parsing gives.
		parsed, perr := canonicalizeParsed(in)
		if (err == nil) != (perr == nil) || !bytes.Equal(out, parsed) {
			t.Fatalf("%q: CanonicalizeJSON gives %q, %v; parsing gives %q, %v", in, out, err, parsed, perr)
		}
		if jsontext.IsCanonical(in) {
			if err != nil || !bytes.Equal(out, in) {
				t.Fatalf("canonical input %q came back as %q, %v", in, out, err)
			}
		}
		if err != nil {
			return
		}
		if !jsontext.IsCanonical(out) {
			t.Fatalf("output %q is not canonical", out)
		}
		again, err := CanonicalizeJSON(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not a fixed point: %q -> %q, %v", out, again, err)
		}
		if !json.Valid(in) {
			t.Fatalf("accepted %q, which encoding/json rejects", in)
		}
		var a, b any
		if err := json.Unmarshal(in, &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(out, &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("meaning changed: %q -> %q", in, out)
		}
	})
}

// FuzzCaveatUnmarshal checks that a caveat read by the shortcut for
// canonical input is the caveat the general path reads.
func FuzzCaveatUnmarshal(f *testing.F) {
	for _, s := range []string{
		`{"svc":["cal.example"]}`, `{"exp":1700000000}`, `{"a":1,"b":2}`, `{"spend":{"amount":5,"currency":"USD"}}`,
		`{"can":["x\u0000"]}`, `{"\n":1}`, `{"x":1.5}`, `{}`, `{"a":{"b":{"c":[]}}}`, `{ "svc":[]}`, `["svc"]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var fast Caveat
		ferr := fast.UnmarshalJSON(in)
		name, val, ok := canonicalCaveat(in)
		var slow Caveat
		serr := func() error {
			v, err := parseJSON(in)
			if err != nil {
				return err
			}
			m, ok := v.(map[string]any)
			if !ok || len(m) != 1 {
				return errors.New("not one member")
			}
			for k, x := range m {
				b, err := canonical(x)
				if err != nil {
					return err
				}
				slow.Name, slow.Value = k, b
			}
			return nil
		}()
		if ok && (serr != nil || name != slow.Name || !bytes.Equal(val, slow.Value)) {
			t.Fatalf("%q: the shortcut reads %q %q, the general path %q %q, %v", in, name, val, slow.Name, slow.Value, serr)
		}
		if (ferr == nil) != (serr == nil) || ferr == nil && (fast.Name != slow.Name || !bytes.Equal(fast.Value, slow.Value)) {
			t.Fatalf("%q: UnmarshalJSON gives %q %q, %v; the general path %q %q, %v", in, fast.Name, fast.Value, ferr, slow.Name, slow.Value, serr)
		}
	})
}

// FuzzVerify checks that Verify never panics, and that whatever it accepts
// passes CheckChain and is held by the proof key.
func FuzzVerify(f *testing.F) {
	for _, tok := range vectorTokens(f) {
		f.Add(tok, "shop.example", "COMMIT", "shop.order", int64(testNow), int64(2000), "low")
		f.Add(tok, "shop.example", "ASK", "shop.search", int64(testNow), int64(0), "high")
	}
	trusted := []string{principalPub}
	f.Fuzz(func(t *testing.T, tok, service, verb, capability string, now, cost int64, risk string) {
		for _, proofKey := range []string{pubText(keyAgent), pubText(keySub)} {
			ctx := Context{
				Service: service, Verb: verb, Capability: capability, Now: now, ProofKey: proofKey,
				Proposal: &Proposal{Hash: "HASH_OK", Cost: &Money{cost, "USD"}, Risk: risk},
				Spent:    map[string]int64{"wJ_VZU1Z3VYBFmYOLYgx6IU0-93Cu73vFjWYxBP1Bd8": 100},
			}
			res, err := Verify([]string{tok, tok}, trusted, ctx)
			if err != nil {
				if _, ok := err.(*Error); !ok {
					t.Fatalf("error %T, want *Error", err)
				}
				continue
			}
			d, derr := Decode(tok)
			if derr != nil || d.CheckChain() != nil || d.Holder() != proofKey || res.Issuer != principalPub {
				t.Fatalf("accepted a grant that does not check out: %v", derr)
			}
		}
	})
}
