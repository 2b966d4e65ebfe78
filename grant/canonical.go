package grant

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxSafeInt is the largest integer allowed in signed or hashed payloads
// (§10): 2^53−1, the largest integer every JSON implementation keeps exact.
const MaxSafeInt = 1<<53 - 1

// maxDepth bounds the nesting of any JSON value this package parses or
// encodes. It stops a stack-exhaustion attack by deeply nested input
// ([[[[…]]]]), which costs the sender two bytes per level.
const maxDepth = 64

var (
	errFloat    = errors.New("number is not an integer: floats have no canonical form (§10)")
	errIntRange = errors.New("integer outside [-(2^53-1), 2^53-1] (§10)")
	errTooDeep  = errors.New("value nested too deeply")
	errUTF8     = errors.New("string is not valid UTF-8")
)

// Canonical returns canonical(v) as defined in §10: object keys sorted by
// code point, no whitespace, the exact string escapes of §10 and literal
// UTF-8 for every other character, integers in [−(2^53−1), 2^53−1] in
// minimal decimal form.
//
// v may be nil, a bool, a string, a json.Number, any Go integer type, a
// map[string]any, a []any, a json.RawMessage (canonicalized), or any other
// value that encoding/json can marshal (it is marshalled, re-parsed and
// canonicalized). Floats are refused, as are non-integer json.Numbers and
// json text with a fraction or exponent, even when its value is whole: the
// spec gives such numbers no canonical form. Strings that are not valid
// UTF-8 are refused.
func Canonical(v any) ([]byte, error) {
	return appendCanonical(nil, v, 0)
}

// CanonicalizeJSON parses raw as one JSON value and returns its canonical
// form (§10). It refuses duplicate object keys, invalid UTF-8 (also through
// \u escapes of lone surrogates), trailing data, nesting deeper than 64 and
// every number that Canonical refuses.
func CanonicalizeJSON(raw []byte) ([]byte, error) {
	// Most input is canonical already (clients write it so, to hash
	// it): then it is its own canonical form, checked in one pass that
	// allocates nothing. FuzzCanonicalizeJSON holds the two paths equal.
	if isCanonical(raw) {
		return bytes.Clone(raw), nil
	}
	return canonicalizeParsed(raw)
}

// canonicalizeParsed is CanonicalizeJSON by parsing raw and encoding what
// it holds.
func canonicalizeParsed(raw []byte) ([]byte, error) {
	v, err := parseJSON(raw)
	if err != nil {
		return nil, err
	}
	return Canonical(v)
}

func appendCanonical(dst []byte, v any, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		if v {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case string:
		if !utf8.ValidString(v) {
			return nil, errUTF8
		}
		return appendString(dst, v), nil
	case json.Number:
		n, err := parseIntText(string(v))
		if err != nil {
			return nil, err
		}
		return strconv.AppendInt(dst, n, 10), nil
	case int:
		return appendInt(dst, int64(v))
	case int8:
		return appendInt(dst, int64(v))
	case int16:
		return appendInt(dst, int64(v))
	case int32:
		return appendInt(dst, int64(v))
	case int64:
		return appendInt(dst, v)
	case uint:
		return appendUint(dst, uint64(v))
	case uint8:
		return appendUint(dst, uint64(v))
	case uint16:
		return appendUint(dst, uint64(v))
	case uint32:
		return appendUint(dst, uint64(v))
	case uint64:
		return appendUint(dst, v)
	case float32, float64:
		return nil, errFloat
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			if !utf8.ValidString(k) {
				return nil, errUTF8
			}
			keys = append(keys, k)
		}
		// For valid UTF-8, byte order is code point order (§10).
		slices.Sort(keys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, k)
			dst = append(dst, ':')
			var err error
			if dst, err = appendCanonical(dst, v[k], depth+1); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	case []any:
		dst = append(dst, '[')
		for i, e := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendCanonical(dst, e, depth+1); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	case []string:
		dst = append(dst, '[')
		for i, e := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			if !utf8.ValidString(e) {
				return nil, errUTF8
			}
			dst = appendString(dst, e)
		}
		return append(dst, ']'), nil
	case json.RawMessage:
		pv, err := parseJSON(v)
		if err != nil {
			return nil, err
		}
		return appendCanonical(dst, pv, depth)
	}
	// Anything else goes through encoding/json. Refuse floats first:
	// encoding/json writes 2.0 as 2, which would hide a float.
	if err := refuseFloats(reflect.ValueOf(v), 0); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	pv, err := parseJSON(raw)
	if err != nil {
		return nil, err
	}
	return appendCanonical(dst, pv, depth)
}

// refuseFloats walks v and reports a float anywhere inside it.
func refuseFloats(v reflect.Value, depth int) error {
	if depth > maxDepth {
		return errTooDeep
	}
	switch v.Kind() {
	case reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return errFloat
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return refuseFloats(v.Elem(), depth+1)
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
			return nil // []byte and json.RawMessage-like types
		}
		for i := range v.Len() {
			if err := refuseFloats(v.Index(i), depth+1); err != nil {
				return err
			}
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			if err := refuseFloats(it.Value(), depth+1); err != nil {
				return err
			}
		}
	case reflect.Struct:
		t := v.Type()
		for i := range v.NumField() {
			if t.Field(i).IsExported() {
				if err := refuseFloats(v.Field(i), depth+1); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func appendInt(dst []byte, n int64) ([]byte, error) {
	if n > MaxSafeInt || n < -MaxSafeInt {
		return nil, errIntRange
	}
	return strconv.AppendInt(dst, n, 10), nil
}

func appendUint(dst []byte, n uint64) ([]byte, error) {
	if n > MaxSafeInt {
		return nil, errIntRange
	}
	return strconv.AppendUint(dst, n, 10), nil
}

// parseIntText parses JSON number text that must denote an integer in the
// safe range: no fraction, no exponent. "-0" is read as 0.
func parseIntText(s string) (int64, error) {
	if !validNumber(s) {
		return 0, fmt.Errorf("invalid number %q", s)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '.' || c == 'e' || c == 'E' {
			return 0, errFloat
		}
	}
	digits := s
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) > 16 {
		return 0, errIntRange
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > MaxSafeInt || n < -MaxSafeInt {
		return 0, errIntRange
	}
	return n, nil
}

// validNumber reports whether s matches the JSON number grammar.
func validNumber[T string | []byte](s T) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	if i >= len(s) {
		return false
	}
	switch {
	case s[i] == '0':
		i++
	case s[i] >= '1' && s[i] <= '9':
		for i < len(s) && isDigit(s[i]) {
			i++
		}
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		start := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if i == start {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		start := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if i == start {
			return false
		}
	}
	return i == len(s)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

const hexDigits = "0123456789abcdef"

// appendString appends s as a canonical JSON string (§10): \" \\ \b \f \n
// \r \t, \u00xx with lowercase hex for the other control characters below
// U+0020, and every other character literally. Unlike encoding/json it does
// not escape <, >, &, U+2028 or U+2029. s must be valid UTF-8.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"':
			dst = append(dst, '\\', '"')
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// parseJSON parses one JSON value leniently (any whitespace, any valid
// escape) into nil, bool, string, json.Number, map[string]any and []any. It
// refuses duplicate keys, invalid UTF-8, lone surrogates, nesting deeper than
// maxDepth and trailing data.
func parseJSON(raw []byte) (any, error) {
	p := &jsonParser{b: raw}
	p.ws()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.ws()
	if p.i != len(p.b) {
		return nil, fmt.Errorf("json: trailing data at offset %d", p.i)
	}
	return v, nil
}

type jsonParser struct {
	b []byte
	i int
}

func (p *jsonParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) errorf(format string, args ...any) error {
	return fmt.Errorf("json: offset %d: %s", p.i, fmt.Sprintf(format, args...))
}

func (p *jsonParser) value(depth int) (any, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	if p.i >= len(p.b) {
		return nil, p.errorf("unexpected end of input")
	}
	switch c := p.b[p.i]; {
	case c == '{':
		p.i++
		m := map[string]any{}
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == '}' {
			p.i++
			return m, nil
		}
		for {
			p.ws()
			if p.i >= len(p.b) || p.b[p.i] != '"' {
				return nil, p.errorf("want an object key")
			}
			k, err := p.str()
			if err != nil {
				return nil, err
			}
			if _, dup := m[k]; dup {
				return nil, p.errorf("duplicate key %q", k)
			}
			p.ws()
			if p.i >= len(p.b) || p.b[p.i] != ':' {
				return nil, p.errorf("want ':'")
			}
			p.i++
			p.ws()
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			m[k] = v
			p.ws()
			if p.i >= len(p.b) {
				return nil, p.errorf("unexpected end of object")
			}
			if p.b[p.i] == '}' {
				p.i++
				return m, nil
			}
			if p.b[p.i] != ',' {
				return nil, p.errorf("want ',' or '}'")
			}
			p.i++
		}
	case c == '[':
		p.i++
		a := []any{}
		p.ws()
		if p.i < len(p.b) && p.b[p.i] == ']' {
			p.i++
			return a, nil
		}
		for {
			p.ws()
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
			p.ws()
			if p.i >= len(p.b) {
				return nil, p.errorf("unexpected end of array")
			}
			if p.b[p.i] == ']' {
				p.i++
				return a, nil
			}
			if p.b[p.i] != ',' {
				return nil, p.errorf("want ',' or ']'")
			}
			p.i++
		}
	case c == '"':
		return p.str()
	case c == 't':
		return true, p.lit("true")
	case c == 'f':
		return false, p.lit("false")
	case c == 'n':
		return nil, p.lit("null")
	case c == '-' || isDigit(c):
		start := p.i
		for p.i < len(p.b) {
			c := p.b[p.i]
			if isDigit(c) || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
				p.i++
				continue
			}
			break
		}
		s := string(p.b[start:p.i])
		if !validNumber(s) {
			return nil, p.errorf("invalid number %q", s)
		}
		return json.Number(s), nil
	default:
		return nil, p.errorf("unexpected character %q", c)
	}
}

func (p *jsonParser) lit(word string) error {
	if !bytes.HasPrefix(p.b[p.i:], []byte(word)) {
		return p.errorf("invalid literal")
	}
	p.i += len(word)
	return nil
}

// str parses a JSON string starting at the opening quote.
func (p *jsonParser) str() (string, error) {
	b, err := p.strBytes()
	return string(b), err
}

// strBytes is str without the conversion to a string: for a string
// without escapes it returns the input's own bytes, so that a value that is
// only checked costs no allocation.
func (p *jsonParser) strBytes() ([]byte, error) {
	p.i++ // opening quote
	var out []byte
	start := p.i
	for {
		if p.i >= len(p.b) {
			return nil, p.errorf("unterminated string")
		}
		c := p.b[p.i]
		switch {
		case c == '"':
			seg := p.b[start:p.i]
			p.i++
			if out == nil {
				if !utf8.Valid(seg) {
					return nil, errUTF8
				}
				return seg, nil
			}
			out = append(out, seg...)
			if !utf8.Valid(out) {
				return nil, errUTF8
			}
			return out, nil
		case c < 0x20:
			return nil, p.errorf("control character in string")
		case c == '\\':
			out = append(out, p.b[start:p.i]...)
			p.i++
			if p.i >= len(p.b) {
				return nil, p.errorf("unterminated escape")
			}
			e := p.b[p.i]
			p.i++
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return nil, p.errorf("invalid \\u escape")
				}
				if utf16.IsSurrogate(r) {
					// A high surrogate must be followed by an escaped low one.
					if r >= 0xdc00 || p.i+1 >= len(p.b) || p.b[p.i] != '\\' || p.b[p.i+1] != 'u' {
						return nil, p.errorf("lone surrogate in string")
					}
					p.i += 2
					r2, ok := p.hex4()
					if !ok {
						return nil, p.errorf("invalid \\u escape")
					}
					r = utf16.DecodeRune(r, r2)
					if r == utf8.RuneError {
						return nil, p.errorf("lone surrogate in string")
					}
				}
				out = utf8.AppendRune(out, r)
			default:
				return nil, p.errorf("invalid escape \\%c", e)
			}
			start = p.i
			if out == nil {
				out = []byte{}
			}
		default:
			p.i++
		}
	}
}

func (p *jsonParser) hex4() (rune, bool) {
	if p.i+4 > len(p.b) {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		r <<= 4
		switch {
		case isDigit(c):
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}

// canonReader reads JSON that must already be canonical (§10), byte for
// byte: it is how Decode checks that a token is exactly canonical without
// re-encoding it, and how caveat values are read during verification.
type canonReader struct {
	b []byte
	i int
}

var errNotCanonical = errors.New("json is not canonical (§10)")

func (r *canonReader) done() bool { return r.i >= len(r.b) }

func (r *canonReader) peek() byte {
	if r.i < len(r.b) {
		return r.b[r.i]
	}
	return 0
}

// lit consumes s exactly.
func (r *canonReader) lit(s string) bool {
	if len(r.b)-r.i < len(s) || string(r.b[r.i:r.i+len(s)]) != s {
		return false
	}
	r.i += len(s)
	return true
}

func (r *canonReader) expect(c byte) error {
	if r.i < len(r.b) && r.b[r.i] == c {
		r.i++
		return nil
	}
	return fmt.Errorf("%w: want %q at offset %d", errNotCanonical, c, r.i)
}

// str reads a canonical string of at most max bytes of input.
func (r *canonReader) str(max int) (string, error) {
	seg, escaped, err := r.strSeg(max)
	if err != nil || !escaped {
		return string(seg), err
	}
	return unescapeCanon(seg), nil
}

// strSeg reads a canonical string of at most max bytes of input and returns
// its contents as they are in the input, escapes and all, and whether it
// has any.
func (r *canonReader) strSeg(max int) (seg []byte, escaped bool, err error) {
	if err := r.expect('"'); err != nil {
		return nil, false, err
	}
	start := r.i
	for {
		if r.i >= len(r.b) {
			return nil, false, fmt.Errorf("%w: unterminated string", errNotCanonical)
		}
		if r.i-start > max {
			return nil, false, errTooLong
		}
		c := r.b[r.i]
		switch {
		case c == '"':
			seg := r.b[start:r.i]
			r.i++
			return seg, escaped, nil
		case c == '\\':
			escaped = true
			if r.i+1 >= len(r.b) {
				return nil, false, fmt.Errorf("%w: unterminated escape", errNotCanonical)
			}
			switch r.b[r.i+1] {
			case '"', '\\', 'b', 'f', 'n', 'r', 't':
				r.i += 2
			case 'u':
				// Only \u00xx, lowercase, for a control character that has
				// no short escape.
				if r.i+6 > len(r.b) || r.b[r.i+2] != '0' || r.b[r.i+3] != '0' {
					return nil, false, fmt.Errorf("%w: \\u escape of a non-control character", errNotCanonical)
				}
				h, l := r.b[r.i+4], r.b[r.i+5]
				if (h != '0' && h != '1') || !(isDigit(l) || (l >= 'a' && l <= 'f')) {
					return nil, false, fmt.Errorf("%w: \\u escape of a non-control character", errNotCanonical)
				}
				v := (h-'0')<<4 | hexVal(l)
				switch v {
				case '\b', '\t', '\n', '\f', '\r':
					return nil, false, fmt.Errorf("%w: \\u escape where a short escape is required", errNotCanonical)
				}
				r.i += 6
			default:
				return nil, false, fmt.Errorf("%w: escape \\%c", errNotCanonical, r.b[r.i+1])
			}
		case c < 0x20:
			return nil, false, fmt.Errorf("%w: raw control character in string", errNotCanonical)
		case c < 0x80:
			r.i++
		default:
			ru, size := utf8.DecodeRune(r.b[r.i:])
			if ru == utf8.RuneError && size <= 1 {
				return nil, false, errUTF8
			}
			r.i += size
		}
	}
}

func hexVal(c byte) byte {
	if isDigit(c) {
		return c - '0'
	}
	return c - 'a' + 10
}

// unescapeCanon decodes the contents of a canonical string already checked
// by canonReader.str.
func unescapeCanon(seg []byte) string {
	out := make([]byte, 0, len(seg))
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		switch seg[i] {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			out = append(out, (seg[i+3]-'0')<<4|hexVal(seg[i+4]))
			i += 4
		default: // '"' or '\\'
			out = append(out, seg[i])
		}
	}
	return string(out)
}

// int reads a canonical integer in the safe range.
func (r *canonReader) int() (int64, error) {
	start := r.i
	if r.peek() == '-' {
		r.i++
	}
	ds := r.i
	for r.i < len(r.b) && isDigit(r.b[r.i]) {
		r.i++
	}
	digits := r.b[ds:r.i]
	switch {
	case len(digits) == 0:
		return 0, fmt.Errorf("%w: want an integer at offset %d", errNotCanonical, start)
	case len(digits) > 1 && digits[0] == '0':
		return 0, fmt.Errorf("%w: leading zero", errNotCanonical)
	case ds > start && len(digits) == 1 && digits[0] == '0':
		return 0, fmt.Errorf("%w: negative zero", errNotCanonical)
	case len(digits) > 16:
		return 0, errIntRange
	}
	if c := r.peek(); c == '.' || c == 'e' || c == 'E' {
		return 0, errFloat
	}
	var n int64
	for _, d := range digits {
		n = n*10 + int64(d-'0')
	}
	if n > MaxSafeInt {
		return 0, errIntRange
	}
	if ds > start {
		n = -n
	}
	return n, nil
}

// readLimits bounds what a canonReader accepts inside a value it skips.
type readLimits struct {
	depth, list, str int
}

// skip reads one canonical value of any kind: keys in strictly increasing
// code point order (which also refuses duplicates), no whitespace, canonical
// strings and integers only.
func (r *canonReader) skip(lim readLimits, depth int) error {
	if depth > lim.depth {
		return errTooDeep
	}
	switch c := r.peek(); {
	case c == '{':
		r.i++
		if r.peek() == '}' {
			r.i++
			return nil
		}
		var prev []byte
		n := 0
		for {
			// Keys are compared by their text: the input's own bytes,
			// unless escapes make them differ from it.
			k, escaped, err := r.strSeg(lim.str)
			if err != nil {
				return err
			}
			if escaped {
				k = []byte(unescapeCanon(k))
			}
			if n > 0 && bytes.Compare(k, prev) <= 0 {
				return fmt.Errorf("%w: object keys out of order or repeated", errNotCanonical)
			}
			if n++; n > lim.list {
				return errTooLong
			}
			prev = k
			if err := r.expect(':'); err != nil {
				return err
			}
			if err := r.skip(lim, depth+1); err != nil {
				return err
			}
			if r.peek() == '}' {
				r.i++
				return nil
			}
			if err := r.expect(','); err != nil {
				return err
			}
		}
	case c == '[':
		r.i++
		if r.peek() == ']' {
			r.i++
			return nil
		}
		for n := 1; ; n++ {
			if n > lim.list {
				return errTooLong
			}
			if err := r.skip(lim, depth+1); err != nil {
				return err
			}
			if r.peek() == ']' {
				r.i++
				return nil
			}
			if err := r.expect(','); err != nil {
				return err
			}
		}
	case c == '"':
		_, _, err := r.strSeg(lim.str)
		return err
	case c == 't':
		return r.litOr("true")
	case c == 'f':
		return r.litOr("false")
	case c == 'n':
		return r.litOr("null")
	default:
		_, err := r.int()
		return err
	}
}

func (r *canonReader) litOr(s string) error {
	if !r.lit(s) {
		return fmt.Errorf("%w: invalid literal at offset %d", errNotCanonical, r.i)
	}
	return nil
}

// isCanonical reports whether raw is exactly the canonical form of one
// JSON value within the general limits.
func isCanonical(raw []byte) bool {
	r := &canonReader{b: raw}
	err := r.skip(readLimits{depth: maxDepth, list: 1 << 30, str: 1 << 30}, 0)
	return err == nil && r.done()
}
