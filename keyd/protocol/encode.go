package protocol

import (
	"encoding/json"
	"strconv"
)

// The daemon writes every reply as encoding/json writes a Frame (EncodeFrame).
// A GRANT reply went through reflection twice for that: its data, then the
// frame around it, which also scanned the data again. GrantReplyFrame and
// EncodeFrame write the same bytes by hand when every string in them is
// plain (printable ASCII that encoding/json does not escape), and leave the
// rest to encoding/json. FuzzGrantReplyFrame and FuzzEncodeFrame hold the
// two to the same bytes.

// GrantReplyFrame returns the final reply to a GRANT or CONSENT that issued
// a grant: a frame of kind GRANT whose data is res, written as json.Marshal
// writes it.
func GrantReplyFrame(res *GrantResult) (*Frame, error) {
	if b, ok := appendGrantResult(make([]byte, 0, 192+len(res.Token)+48*len(res.Caveats)), res); ok {
		return &Frame{Kind: KindGrant, Data: b, compact: b}, nil
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return nil, err
	}
	return &Frame{Kind: KindGrant, Data: raw}, nil
}

// appendGrantResult appends res as json.Marshal writes it, and reports
// whether it could.
func appendGrantResult(b []byte, res *GrantResult) ([]byte, bool) {
	var ok bool
	b = append(b, '{')
	if b, ok = appendStr(b, `"token":`, res.Token, false); !ok {
		return nil, false
	}
	if b, ok = appendStr(b, `,"grant_id":`, res.GrantID, false); !ok {
		return nil, false
	}
	b = append(b, `,"expires":`...)
	b = strconv.AppendInt(b, res.Expires, 10)
	b = append(b, `,"caveats":`...)
	if res.Caveats == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, c := range res.Caveats {
			if i > 0 {
				b = append(b, ',')
			}
			start := len(b)
			var err error
			b, err = c.AppendJSON(b)
			// encoding/json checks what MarshalJSON returns and escapes
			// <, >, & and U+2028, U+2029 in it; grant writes caveats
			// canonical, so only those are left to decline.
			if err != nil || !htmlSafe(b[start:]) {
				return nil, false
			}
		}
		b = append(b, ']')
	}
	if b, ok = appendStr(b, `,"decision":`, res.Decision, false); !ok {
		return nil, false
	}
	for _, f := range []struct{ key, v string }{
		{`,"rule":`, res.Rule}, {`,"approver":`, res.Approver}, {`,"channel":`, res.Channel}, {`,"strength":`, res.Strength},
	} {
		if b, ok = appendStr(b, f.key, f.v, true); !ok {
			return nil, false
		}
	}
	if len(res.Narrowed) > 0 {
		b = append(b, `,"narrowed":[`...)
		for i, s := range res.Narrowed {
			key := ","
			if i == 0 {
				key = ""
			}
			if b, ok = appendStr(b, key, s, false); !ok {
				return nil, false
			}
		}
		b = append(b, ']')
	}
	if b, ok = appendStr(b, `,"request":`, res.RequestID, false); !ok {
		return nil, false
	}
	if b, ok = appendStr(b, `,"remembered":`, res.Remembered, true); !ok {
		return nil, false
	}
	if res.Until != 0 {
		b = append(b, `,"until":`...)
		b = strconv.AppendInt(b, res.Until, 10)
	}
	return append(b, '}'), true
}

// htmlSafe reports whether b has none of the bytes encoding/json escapes
// when it copies a Marshaler's output: <, >, & and the lead byte of U+2028
// and U+2029.
func htmlSafe(b []byte) bool {
	for _, c := range b {
		switch c {
		case '<', '>', '&', 0xE2:
			return false
		}
	}
	return true
}

// plain reports whether encoding/json writes s as it is between quotes:
// printable ASCII but for ", \, <, > and & (which it escapes).
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// appendStr appends key and s as a JSON string, or nothing when s is empty
// and omitEmpty; it declines a string that is not plain.
func appendStr(b []byte, key, s string, omitEmpty bool) ([]byte, bool) {
	if s == "" && omitEmpty {
		return b, true
	}
	if !plain(s) {
		return b, false
	}
	b = append(b, key...)
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), true
}

// appendFrame appends f as json.Marshal writes it, when it can: f carries
// no request fields, its Data is nil or was written by GrantReplyFrame, and
// every string is plain.
func appendFrame(b []byte, f *Frame) ([]byte, bool) {
	if len(f.Grant) > 0 || len(f.Consent) > 0 || len(f.Proposal) > 0 || f.Proof != nil || f.Audit != nil {
		return nil, false
	}
	if len(f.Data) > 0 && (len(f.compact) != len(f.Data) || &f.compact[0] != &f.Data[0]) {
		return nil, false // data from elsewhere: encoding/json checks and compacts it
	}
	b = append(b, `{"parley":`...)
	b = strconv.AppendInt(b, int64(f.Parley), 10)
	var ok bool
	if b, ok = appendStr(b, `,"id":`, f.ID, false); !ok {
		return nil, false
	}
	for _, s := range []struct{ key, v string }{
		{`,"verb":`, f.Verb}, {`,"kind":`, f.Kind}, {`,"re":`, f.Re}, {`,"service":`, f.Service}, {`,"holder":`, f.Holder},
		{`,"request":`, f.Request}, {`,"match":`, f.Match}, {`,"channel":`, f.Channel}, {`,"reason":`, f.Reason}, {`,"remember":`, f.Remember},
		{`,"code":`, string(f.Code)},
		{`,"message":`, f.Message}, {`,"fix":`, f.Fix},
	} {
		if b, ok = appendStr(b, s.key, s.v, true); !ok {
			return nil, false
		}
	}
	if f.Retry != 0 {
		b = append(b, `,"retry":`...)
		b = strconv.AppendInt(b, int64(f.Retry), 10)
	}
	if b, ok = appendStr(b, `,"rule":`, f.Rule, true); !ok {
		return nil, false
	}
	if len(f.Data) > 0 {
		b = append(b, `,"data":`...)
		b = append(b, f.Data...)
	}
	return append(b, '}'), true
}
