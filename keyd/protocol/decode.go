package protocol

import (
	"bytes"
	"strconv"

	"github.com/parley-keyd/parley-keyd/grant"
)

// DecodeGrantReply reads line as the daemon writes the reply to a GRANT or
// CONSENT that issued a grant (GrantReplyFrame, then EncodeFrame): the
// frame's re and its data, in one pass, with no reflection. It takes only
// that exact shape, field order and all, with plain strings; for anything
// else it reports false, and the caller decodes line with encoding/json,
// which gives the same answer wherever this one gives any
// (FuzzDecodeGrantReply).
func DecodeGrantReply(line []byte) (re string, res *GrantResult, ok bool) {
	d := replyDecoder{b: bytes.TrimSuffix(line, []byte("\n"))}
	if !d.lit(`{"parley":1,"id":`) {
		return "", nil, false
	}
	if _, ok = d.str(); !ok || !d.lit(`,"kind":"GRANT","re":`) {
		return "", nil, false
	}
	re, ok = d.str()
	if !ok || !d.lit(`,"data":{"token":`) {
		return "", nil, false
	}
	res = new(GrantResult)
	if res.Token, ok = d.str(); !ok || res.Token == "" || !d.lit(`,"grant_id":`) {
		return "", nil, false
	}
	if res.GrantID, ok = d.str(); !ok || !d.lit(`,"expires":`) {
		return "", nil, false
	}
	if res.Expires, ok = d.int(); !ok || !d.lit(`,"caveats":`) {
		return "", nil, false
	}
	if !d.lit("null") {
		if res.Caveats, ok = d.caveats(); !ok {
			return "", nil, false
		}
	}
	if !d.lit(`,"decision":`) {
		return "", nil, false
	}
	if res.Decision, ok = d.str(); !ok {
		return "", nil, false
	}
	for _, f := range []struct {
		key string
		v   *string
	}{{`,"rule":`, &res.Rule}, {`,"approver":`, &res.Approver}, {`,"channel":`, &res.Channel}, {`,"strength":`, &res.Strength}} {
		if d.lit(f.key) {
			// Written only when not empty (omitempty).
			if *f.v, ok = d.str(); !ok || *f.v == "" {
				return "", nil, false
			}
		}
	}
	if d.lit(`,"narrowed":[`) {
		for {
			s, ok := d.str()
			if !ok {
				return "", nil, false
			}
			res.Narrowed = append(res.Narrowed, s)
			if d.lit("]") {
				break
			}
			if !d.lit(",") {
				return "", nil, false
			}
		}
	}
	if !d.lit(`,"request":`) {
		return "", nil, false
	}
	if res.RequestID, ok = d.str(); !ok {
		return "", nil, false
	}
	if d.lit(`,"remembered":`) {
		if res.Remembered, ok = d.str(); !ok || res.Remembered == "" {
			return "", nil, false
		}
	}
	if d.lit(`,"until":`) {
		if res.Until, ok = d.int(); !ok || res.Until == 0 {
			return "", nil, false
		}
	}
	if !d.lit("}}") || d.i != len(d.b) {
		return "", nil, false
	}
	return re, res, true
}

// replyDecoder reads the bytes of one reply from the front.
type replyDecoder struct {
	b []byte
	i int
}

// lit consumes s if the input continues with it.
func (d *replyDecoder) lit(s string) bool {
	if len(d.b)-d.i < len(s) || string(d.b[d.i:d.i+len(s)]) != s {
		return false
	}
	d.i += len(s)
	return true
}

// str reads a string of printable ASCII without escapes, which encoding/json
// reads as the very bytes; any other string is declined.
func (d *replyDecoder) str() (string, bool) {
	if d.i >= len(d.b) || d.b[d.i] != '"' {
		return "", false
	}
	for j := d.i + 1; j < len(d.b); j++ {
		switch c := d.b[j]; {
		case c == '"':
			s := string(d.b[d.i+1 : j])
			d.i = j + 1
			return s, true
		case c < 0x20 || c >= 0x7f || c == '\\':
			return "", false
		}
	}
	return "", false
}

// int reads an integer as JSON writes one and int64 holds it.
func (d *replyDecoder) int() (int64, bool) {
	j := d.i
	if j < len(d.b) && d.b[j] == '-' {
		j++
	}
	start := j
	for j < len(d.b) && d.b[j] >= '0' && d.b[j] <= '9' {
		j++
	}
	if j == start || (d.b[start] == '0' && j > start+1) {
		return 0, false
	}
	if j < len(d.b) && (d.b[j] == '.' || d.b[j] == 'e' || d.b[j] == 'E') {
		return 0, false
	}
	n, err := strconv.ParseInt(string(d.b[d.i:j]), 10, 64)
	if err != nil {
		return 0, false
	}
	d.i = j
	return n, true
}

// caveats reads a non-empty array of caveat objects, each through the
// caveat's own strict reader.
func (d *replyDecoder) caveats() ([]grant.Caveat, bool) {
	if !d.lit("[") {
		return nil, false
	}
	out := make([]grant.Caveat, 0, 4)
	if d.lit("]") {
		return out, true
	}
	for {
		end, ok := objectEnd(d.b, d.i)
		if !ok {
			return nil, false
		}
		var c grant.Caveat
		if c.UnmarshalJSON(d.b[d.i:end]) != nil {
			return nil, false
		}
		out = append(out, c)
		d.i = end
		if d.lit("]") {
			return out, true
		}
		if !d.lit(",") {
			return nil, false
		}
	}
}

// objectEnd returns the index just past the JSON object that starts at i:
// it follows strings (and their escapes) and nesting, and leaves checking
// what is inside to the caveat's reader.
func objectEnd(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '{' {
		return 0, false
	}
	depth := 0
	for j := i; j < len(b); j++ {
		switch b[j] {
		case '"':
			for j++; j < len(b) && b[j] != '"'; j++ {
				if b[j] == '\\' {
					j++
				}
			}
			if j >= len(b) {
				return 0, false
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return j + 1, b[j] == '}'
			}
		}
	}
	return 0, false
}
