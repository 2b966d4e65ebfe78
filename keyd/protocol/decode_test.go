package protocol

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testfill"
)

// decodeWithJSON is what a client does without DecodeGrantReply.
func decodeWithJSON(line []byte) (re, kind string, res *GrantResult, err error) {
	var f struct {
		Re   string       `json:"re"`
		Kind string       `json:"kind"`
		Data *GrantResult `json:"data"`
	}
	err = json.Unmarshal(line, &f)
	return f.Re, f.Kind, f.Data, err
}

func encodeReply(t testing.TB, id string, res *GrantResult) []byte {
	t.Helper()
	fr, err := GrantReplyFrame(res)
	if err != nil {
		t.Fatal(err)
	}
	fr.ID, fr.Re = "r"+id, id
	line, err := EncodeFrame(fr)
	if err != nil {
		t.Fatal(err)
	}
	return line
}

// TestDecodeGrantReplyKnowsEveryField fills every field of a GrantResult by
// reflection and reads back what the daemon writes: a field added to the
// result and not to the decoder makes it decline the line or lose the
// field, and fails here.
func TestDecodeGrantReplyKnowsEveryField(t *testing.T) {
	var res GrantResult
	testfill.Fill(t, &res, "Caveats")
	res.Caveats = []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.*"), grant.Exp(1700003600)}
	line := encodeReply(t, "7", &res)
	re, got, ok := DecodeGrantReply(line)
	if !ok {
		t.Fatalf("DecodeGrantReply declines what the daemon writes:\n%s", line)
	}
	if re != "7" || !reflect.DeepEqual(got, &res) {
		t.Fatalf("DecodeGrantReply read re %q\n%+v\nwant\n%+v", re, got, &res)
	}
}

func TestDecodeGrantReply(t *testing.T) {
	auto := &GrantResult{Token: "eyJ.abc", GrantID: "g_1", Expires: 1700003600, Decision: "auto", Rule: "calendar-auto", RequestID: "r_1",
		Caveats: []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find"), grant.Exp(1700003600),
			{Name: "per", Value: []byte(`{"amount":"5.00","currency":"USD"}`)}}}
	asked := &GrantResult{Token: "t", GrantID: "g", Expires: -1, Decision: "ask", Approver: "alice", Channel: "desktop", Strength: "strong",
		Narrowed: []string{"exp cut to 1h", "can cut"}, RequestID: "r", Caveats: []grant.Caveat{}}
	remembered := &GrantResult{Token: "t", GrantID: "g", Expires: 1700000600, Decision: "remembered", Approver: "alice", Channel: "terminal",
		RequestID: "r", Caveats: []grant.Caveat{grant.Svc("cal.example")}, Remembered: "m_1", Until: 1700007200}
	for _, res := range []*GrantResult{auto, asked, remembered, {Token: "t", Decision: "auto", RequestID: "r"}} {
		line := encodeReply(t, "a-1", res)
		re, got, ok := DecodeGrantReply(line)
		wre, _, want, err := decodeWithJSON(line)
		if err != nil || !ok || re != wre || !reflect.DeepEqual(got, want) {
			t.Errorf("%s\nDecodeGrantReply: %q %+v %v\nencoding/json: %q %+v %v", line, re, got, ok, wre, want, err)
		}
	}

	// Lines it must decline, for encoding/json to read as it reads them.
	good := string(encodeReply(t, "7", auto))
	for name, line := range map[string]string{
		"other kind":        strings.Replace(good, `"kind":"GRANT"`, `"kind":"ERROR"`, 1),
		"escaped token":     strings.Replace(good, `"token":"eyJ.abc"`, `"token":"eyJ\u002eabc"`, 1),
		"case-variant key":  strings.Replace(good, `"token":`, `"Token":`, 1),
		"space":             strings.Replace(good, `"grant_id":`, `"grant_id": `, 1),
		"float expiry":      strings.Replace(good, `1700003600,"caveats"`, `1700003600.0,"caveats"`, 1),
		"duplicate request": strings.Replace(good, `"r_1"}}`, `"r_1","request":"other"}}`, 1),
		"trailing bytes":    strings.TrimSuffix(good, "\n") + " {}",
		"no token":          strings.Replace(good, `"token":"eyJ.abc"`, `"token":""`, 1),
		"bad caveat":        strings.Replace(good, `{"svc":["cal.example"]}`, `{"svc":["cal.example"],"can":[]}`, 1),
		"cut short":         good[:len(good)/2],
		"non-ASCII":         strings.Replace(good, `"decision":"auto"`, `"decision":"autó"`, 1),
	} {
		if line == good {
			t.Fatalf("%s: the replacement did not apply", name)
		}
		if _, _, ok := DecodeGrantReply([]byte(line)); ok {
			t.Errorf("%s: DecodeGrantReply took %s", name, line)
		}
	}
}

// FuzzDecodeGrantReply holds DecodeGrantReply to encoding/json: whatever it
// takes, encoding/json reads the same way, and a reply the daemon writes is
// taken whole.
func FuzzDecodeGrantReply(f *testing.F) {
	f.Add([]byte(`{"parley":1,"id":"r7","kind":"GRANT","re":"7","data":{"token":"t","grant_id":"g","expires":1,"caveats":[{"svc":["a"]},{"can":["b.*"]}],"decision":"auto","rule":"r","narrowed":["x"],"request":"q"}}`+"\n"), "7", "t", int64(5), "a")
	f.Add([]byte(`{"parley":1,"id":"r7","kind":"GRANT","re":"7","data":{"token":"t","grant_id":"g","expires":-0,"caveats":null,"decision":"ask","approver":"b","channel":"c","strength":"s","request":"q"}}`), "", "", int64(-1), "\u2028")
	f.Add([]byte(`{"parley":1,"id":"r7","kind":"GRANT","re":"7","data":{"token":"t","grant_id":"g","expires":1,"caveats":[{"x":{"a":"}\"]"}}],"decision":"auto","request":"q"}}`), "a\"b", "tok", int64(0), "x<y")
	f.Fuzz(func(t *testing.T, line []byte, id, token string, expires int64, svc string) {
		if re, got, ok := DecodeGrantReply(line); ok {
			wre, kind, want, err := decodeWithJSON(line)
			if err != nil {
				t.Fatalf("DecodeGrantReply took what encoding/json refuses (%v):\n%s", err, line)
			}
			if re != wre || kind != KindGrant || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s\nDecodeGrantReply: %q %+v\nencoding/json: %q %q %+v", line, re, got, wre, kind, want)
			}
		}
		res := &GrantResult{Token: token, GrantID: "g", Expires: expires, Decision: "auto", RequestID: "r",
			Caveats: []grant.Caveat{grant.Svc(svc), grant.Exp(expires)}}
		fr, err := GrantReplyFrame(res)
		if err != nil {
			return
		}
		fr.ID, fr.Re = "r"+id, id
		enc, err := EncodeFrame(fr)
		if err != nil {
			return
		}
		re, got, ok := DecodeGrantReply(enc)
		wre, _, want, werr := decodeWithJSON(enc)
		if werr != nil {
			t.Fatalf("encoding/json cannot read what the daemon writes: %v\n%s", werr, enc)
		}
		if ok && (re != wre || !reflect.DeepEqual(got, want)) {
			t.Fatalf("%s\nDecodeGrantReply: %q %+v\nencoding/json: %q %+v", enc, re, got, wre, want)
		}
		// What the hand-written encoders write with plain strings is read
		// in one pass: the fast path is not silently left. (The daemon
		// never answers with an empty re: ids are not empty.)
		if !ok && token != "" && id != "" && plain(token) && plain(id) && plain(svc) && strings.IndexByte(svc, '\\') < 0 {
			t.Fatalf("DecodeGrantReply declines a plain reply:\n%s", enc)
		}
	})
}

// BenchmarkDecodeGrantReply compares reading a typical GRANT reply by hand
// with reading it through encoding/json, as a client did before.
func BenchmarkDecodeGrantReply(b *testing.B) {
	res := &GrantResult{Token: strings.Repeat("t", 420), GrantID: "g_0123456789abcdef", Expires: 1700003600, Decision: "auto", Rule: "calendar-auto", RequestID: "r_0123456789abcdef",
		Caveats: []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find"), grant.Exp(1700003600)}}
	line := encodeReply(b, "17", res)
	b.Run("hand", func(b *testing.B) {
		for b.Loop() {
			if _, _, ok := DecodeGrantReply(line); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			if _, _, _, err := decodeWithJSON(line); err != nil {
				b.Fatal(err)
			}
		}
	})
}
