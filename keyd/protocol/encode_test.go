package protocol

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/parley-keyd/parley-keyd/grant"
)

// FuzzGrantReplyFrame checks that a GRANT reply written by hand has exactly
// the bytes encoding/json writes for it, frame and all.
func FuzzGrantReplyFrame(f *testing.F) {
	f.Add("7", "eyJhbGciOi.abc", "g_1", int64(1700000000), "cal.example", "calendar.find", []byte(`{"amount":5,"currency":"USD"}`),
		"auto", "calendar-auto", "", "", "", "exp cut to 1h", "", "r_1", true)
	f.Add("a\"<b>", "t", "g", int64(-1), "x&y", "\u2028", []byte(`[1, 2]`), "ask", "r", "alice", "desktop", "strong", "", "two", "r", false)
	f.Add("", "", "", int64(0), "", "", []byte(nil), "", "", "", "", "", "", "", "", true)
	f.Fuzz(func(t *testing.T, id, token, grantID string, expires int64, svc, can string, spend []byte,
		decision, rule, approver, channel, strength, narrowed1, narrowed2, request string, withCaveats bool) {
		res := &GrantResult{Token: token, GrantID: grantID, Expires: expires, Decision: decision, Rule: rule,
			Approver: approver, Channel: channel, Strength: strength, RequestID: request}
		if withCaveats {
			res.Caveats = []grant.Caveat{grant.Svc(svc), grant.Can(can), {Name: "spend", Value: spend}}
		}
		for _, n := range []string{narrowed1, narrowed2} {
			if n != "" {
				res.Narrowed = append(res.Narrowed, n)
			}
		}
		fr, err := GrantReplyFrame(res)
		data, werr := json.Marshal(res)
		if (err == nil) != (werr == nil) {
			t.Fatalf("GrantReplyFrame: %v; json.Marshal: %v", err, werr)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(fr.Data, data) {
			t.Fatalf("data\n%s\njson.Marshal writes\n%s", fr.Data, data)
		}
		fr.ID, fr.Re = "r"+id, id
		got, gerr := EncodeFrame(fr)
		plainFrame := &Frame{Kind: KindGrant, ID: "r" + id, Re: id, Data: data}
		want, werr := EncodeFrame(plainFrame)
		if (gerr == nil) != (werr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("frame\n%s %v\nencoding/json writes\n%s %v", got, gerr, want, werr)
		}
	})
}

// FuzzEncodeFrame checks that EncodeFrame's hand-written frames are the
// bytes encoding/json writes.
func FuzzEncodeFrame(f *testing.F) {
	f.Add("1", "HELLO", "", "", "", "", "", "", "", "", "", "", 0, "", []byte(nil), false)
	f.Add("e", "", "ERROR", "9", "svc", "h", "r_1", "10", "desktop", "limit", "too many <requests>", "wait", 3, "rule", []byte(`{"a": 1}`), true)
	f.Fuzz(func(t *testing.T, id, verb, kind, re, service, holder, request, match, channel, code, message, fix string,
		retry int, rule string, data []byte, withProof bool) {
		fr := &Frame{ID: id, Verb: verb, Kind: kind, Re: re, Service: service, Holder: holder, Request: request, Match: match,
			Channel: channel, Code: Code(code), Message: message, Fix: fix, Retry: retry, Rule: rule, Data: data}
		if withProof {
			fr.Proof = &grant.Proof{Key: holder, Ts: int64(retry), Sig: match}
		}
		got, gerr := EncodeFrame(fr)
		fr.Parley = Version
		want, werr := json.Marshal(fr)
		if werr == nil {
			want = append(want, '\n')
			if len(want) > MaxFrame+1 {
				want, werr = nil, ErrFrameTooLarge
			}
		}
		if (gerr == nil) != (werr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("EncodeFrame\n%s %v\njson.Marshal\n%s %v", got, gerr, want, werr)
		}
	})
}
