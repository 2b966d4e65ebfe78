package jsontext

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// errDup is a repeated member name, which the strict rules refuse.
var errDup = errors.New("duplicate name")

// tree reads one JSON value with the Scanner into nil, bool, string,
// json.Number, map[string]any and []any, refusing repeated names, as every
// reader in grant does; it is the reference walk for the fuzz targets.
func tree(b []byte) (any, error) {
	s := &Scanner{B: b}
	s.Space()
	v, err := s.tree(0)
	if err != nil {
		return nil, err
	}
	s.Space()
	if s.I != len(b) {
		return nil, errors.New("trailing data")
	}
	return v, nil
}

func (s *Scanner) tree(depth int) (any, error) {
	if depth > MaxDepth {
		return nil, ErrTooDeep
	}
	if s.I >= len(s.B) {
		return nil, errors.New("end of input")
	}
	switch c := s.B[s.I]; {
	case c == '{':
		s.I++
		m := map[string]any{}
		var seen Names
		s.Space()
		if s.I < len(s.B) && s.B[s.I] == '}' {
			s.I++
			return m, nil
		}
		for {
			s.Space()
			if s.I >= len(s.B) || s.B[s.I] != '"' {
				return nil, errors.New("want a name")
			}
			k, _, err := s.String(false)
			if err != nil {
				return nil, err
			}
			if !seen.Add(k) {
				return nil, errDup
			}
			s.Space()
			if s.I >= len(s.B) || s.B[s.I] != ':' {
				return nil, errors.New("want :")
			}
			s.I++
			s.Space()
			v, err := s.tree(depth + 1)
			if err != nil {
				return nil, err
			}
			m[string(k)] = v
			s.Space()
			if s.I < len(s.B) && s.B[s.I] == '}' {
				s.I++
				return m, nil
			}
			if s.I >= len(s.B) || s.B[s.I] != ',' {
				return nil, errors.New("want , or }")
			}
			s.I++
		}
	case c == '[':
		s.I++
		a := []any{}
		s.Space()
		if s.I < len(s.B) && s.B[s.I] == ']' {
			s.I++
			return a, nil
		}
		for {
			s.Space()
			v, err := s.tree(depth + 1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
			s.Space()
			if s.I < len(s.B) && s.B[s.I] == ']' {
				s.I++
				return a, nil
			}
			if s.I >= len(s.B) || s.B[s.I] != ',' {
				return nil, errors.New("want , or ]")
			}
			s.I++
		}
	case c == '"':
		b, _, err := s.String(false)
		return string(b), err
	case c == 't':
		return true, litErr(s.Literal("true"))
	case c == 'f':
		return false, litErr(s.Literal("false"))
	case c == 'n':
		return nil, litErr(s.Literal("null"))
	default:
		text, ok := s.Number()
		if !ok {
			return nil, errors.New("invalid number")
		}
		return json.Number(text), nil
	}
}

func litErr(ok bool) error {
	if !ok {
		return errors.New("invalid literal")
	}
	return nil
}

// canonical writes v as §10 does, with AppendString; integers only.
func canonical(dst []byte, v any) ([]byte, bool) {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...), true
	case bool:
		return strconv.AppendBool(dst, v), true
	case string:
		return AppendString(dst, v), true
	case json.Number:
		n, err := ParseInt(string(v))
		if err != nil {
			return nil, false
		}
		return strconv.AppendInt(dst, n, 10), true
	case []any:
		dst = append(dst, '[')
		for i, e := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			var ok bool
			if dst, ok = canonical(dst, e); !ok {
				return nil, false
			}
		}
		return append(dst, ']'), true
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(AppendString(dst, k), ':')
			var ok bool
			if dst, ok = canonical(dst, v[k]); !ok {
				return nil, false
			}
		}
		return append(dst, '}'), true
	}
	return nil, false
}

// hasLoneSurrogateEscape reports whether b may hold a \u escape of a
// surrogate, which encoding/json replaces by U+FFFD and the Scanner refuses
// when it stands alone.
func hasSurrogateEscape(b []byte) bool {
	lower := bytes.ToLower(b)
	return bytes.Contains(lower, []byte(`\ud`))
}

// FuzzScannerAgainstEncodingJSON: what the Scanner's reading accepts,
// encoding/json accepts with the same value; what encoding/json accepts
// within the strict rules (valid UTF-8, no repeated name, no lone
// surrogate, depth), the Scanner accepts.
func FuzzScannerAgainstEncodingJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,-0,2.5e3,"x\u00e9\n"],"b":{"c":null,"d":true}}`, ` [ "\ud83d\ude00" , false ] `, `"\ud800"`, `{"a":1,"a":2}`, "\"\xff\"", `01`, `1.`, `-`, `"\/\b\f\r\t\"\\"`, `{"A":1,"a":2}`, strings.Repeat("[", 70) + strings.Repeat("]", 70)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := tree(in)
		dec := json.NewDecoder(bytes.NewReader(in))
		dec.UseNumber()
		var want any
		jerr := dec.Decode(&want)
		if jerr == nil && dec.More() {
			jerr = errors.New("trailing data")
		}
		if jerr == nil {
			// encoding/json stops at the end of the value; the rest must be space.
			rest := in[dec.InputOffset():]
			if len(bytes.Trim(rest, " \t\r\n")) != 0 {
				jerr = errors.New("trailing data")
			}
		}
		if err == nil {
			if jerr != nil {
				t.Fatalf("%q: the Scanner accepts, encoding/json refuses: %v", in, jerr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%q: values differ:\nscanner       %#v\nencoding/json %#v", in, got, want)
			}
			return
		}
		if jerr != nil || !utf8.Valid(in) || hasSurrogateEscape(in) || errors.Is(err, errDup) || errors.Is(err, ErrTooDeep) {
			return
		}
		t.Fatalf("%q: encoding/json accepts, the Scanner refuses: %v", in, err)
	})
}

// FuzzCanonicalRoundTrip: parse, write canonically, parse again gives the
// same value and the same bytes, and the canonical checker (Canon) accepts
// exactly that text.
func FuzzCanonicalRoundTrip(f *testing.F) {
	for _, s := range []string{`{"b":[1,-2,"\u0001\u001f\t"],"a":{"é":null,"e":true}}`, `"<&>\u2028"`, `[-9007199254740991,9007199254740991]`, `{"":{"":[]}}`, `"\u007f\u0080"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		v, err := tree(in)
		if err != nil {
			return
		}
		c, ok := canonical(nil, v)
		if !ok {
			return // a float, or an integer out of range
		}
		if !IsCanonical(c) {
			t.Fatalf("%q: canonical text %q is refused by Canon", in, c)
		}
		v2, err := tree(c)
		if err != nil || !reflect.DeepEqual(normalize(v), normalize(v2)) {
			t.Fatalf("%q: canonical %q reads back as %#v (%v)", in, c, v2, err)
		}
		c2, _ := canonical(nil, v2)
		if !bytes.Equal(c, c2) {
			t.Fatalf("%q: canonical text is not stable: %q then %q", in, c, c2)
		}
		if IsCanonical(in) != bytes.Equal(in, c) {
			t.Fatalf("%q: IsCanonical = %v, but its canonical form is %q", in, IsCanonical(in), c)
		}
	})
}

// normalize writes every number in its minimal form ("-0" is 0), as the
// canonical form does.
func normalize(v any) any {
	switch v := v.(type) {
	case json.Number:
		n, _ := ParseInt(string(v))
		return n
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = normalize(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = normalize(e)
		}
		return out
	}
	return v
}

// FuzzKeepSurrogates: String with keepSurrogates differs from String only
// in keeping lone surrogates: where the strict reading succeeds, both
// agree; and a kept reading holds only valid UTF-8 and kept surrogates.
func FuzzKeepSurrogates(f *testing.F) {
	for _, s := range []string{`"a\ud800b"`, `"\udc00\ud800\udc00"`, `"\ud800\u0041"`, "\"\xed\xa0\x80\"", `"plain"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 || in[0] != '"' {
			return
		}
		s1 := &Scanner{B: in}
		a, _, err1 := s1.String(false)
		s2 := &Scanner{B: in}
		b, _, err2 := s2.String(true)
		if err1 == nil {
			if err2 != nil || !bytes.Equal(a, b) || s1.I != s2.I {
				t.Fatalf("%q: strict %q, kept %q %v", in, a, b, err2)
			}
			return
		}
		if err2 != nil {
			return
		}
		for i := 0; i < len(b); {
			if IsSurrogateAt(b, i) {
				i += 3
				continue
			}
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size <= 1 {
				t.Fatalf("%q: kept reading %q holds invalid UTF-8", in, b)
			}
			i += size
		}
		if bytes.Contains(in, []byte{0xed, 0xa0}) && !bytes.Contains(in, []byte(`\u`)) {
			t.Fatalf("%q: raw surrogate bytes accepted", in)
		}
	})
}
