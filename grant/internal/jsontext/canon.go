package jsontext

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// Canon reads JSON that must already be canonical (§10), byte for
// byte: it is how Decode checks that a token is exactly canonical without
// re-encoding it, and how caveat values are read during verification.
type Canon struct {
	B []byte
	I int
}

// Done reports whether the whole input has been read.
func (r *Canon) Done() bool { return r.I >= len(r.B) }

// Peek returns the next byte, or 0 at the end.
func (r *Canon) Peek() byte {
	if r.I < len(r.B) {
		return r.B[r.I]
	}
	return 0
}

// Lit consumes s exactly.
func (r *Canon) Lit(s string) bool {
	if len(r.B)-r.I < len(s) || string(r.B[r.I:r.I+len(s)]) != s {
		return false
	}
	r.I += len(s)
	return true
}

// Expect consumes c, or fails with ErrNotCanonical.
func (r *Canon) Expect(c byte) error {
	if r.I < len(r.B) && r.B[r.I] == c {
		r.I++
		return nil
	}
	return fmt.Errorf("%w: want %q at offset %d", ErrNotCanonical, c, r.I)
}

// Str reads a canonical string of at most max bytes of input.
func (r *Canon) Str(max int) (string, error) {
	seg, escaped, err := r.StrSeg(max)
	if err != nil || !escaped {
		return string(seg), err
	}
	return UnescapeCanon(seg), nil
}

// StrSeg reads a canonical string of at most max bytes of input and returns
// its contents as they are in the input, escapes and all, and whether it
// has any.
func (r *Canon) StrSeg(max int) (seg []byte, escaped bool, err error) {
	if err := r.Expect('"'); err != nil {
		return nil, false, err
	}
	start := r.I
	for {
		if r.I >= len(r.B) {
			return nil, false, fmt.Errorf("%w: unterminated string", ErrNotCanonical)
		}
		if r.I-start > max {
			return nil, false, ErrTooLong
		}
		c := r.B[r.I]
		switch {
		case c == '"':
			seg := r.B[start:r.I]
			r.I++
			return seg, escaped, nil
		case c == '\\':
			escaped = true
			if r.I+1 >= len(r.B) {
				return nil, false, fmt.Errorf("%w: unterminated escape", ErrNotCanonical)
			}
			switch r.B[r.I+1] {
			case '"', '\\', 'b', 'f', 'n', 'r', 't':
				r.I += 2
			case 'u':
				// Only \u00xx, lowercase, for a control character that has
				// no short escape.
				if r.I+6 > len(r.B) || r.B[r.I+2] != '0' || r.B[r.I+3] != '0' {
					return nil, false, fmt.Errorf("%w: \\u escape of a non-control character", ErrNotCanonical)
				}
				h, l := r.B[r.I+4], r.B[r.I+5]
				if (h != '0' && h != '1') || !(IsDigit(l) || (l >= 'a' && l <= 'f')) {
					return nil, false, fmt.Errorf("%w: \\u escape of a non-control character", ErrNotCanonical)
				}
				v := (h-'0')<<4 | hexVal(l)
				switch v {
				case '\b', '\t', '\n', '\f', '\r':
					return nil, false, fmt.Errorf("%w: \\u escape where a short escape is required", ErrNotCanonical)
				}
				r.I += 6
			default:
				return nil, false, fmt.Errorf("%w: escape \\%c", ErrNotCanonical, r.B[r.I+1])
			}
		case c < 0x20:
			return nil, false, fmt.Errorf("%w: raw control character in string", ErrNotCanonical)
		case c < 0x80:
			r.I++
		default:
			ru, size := utf8.DecodeRune(r.B[r.I:])
			if ru == utf8.RuneError && size <= 1 {
				return nil, false, ErrUTF8
			}
			r.I += size
		}
	}
}

func hexVal(c byte) byte {
	if IsDigit(c) {
		return c - '0'
	}
	return c - 'a' + 10
}

// UnescapeCanon decodes the contents of a canonical string already checked
// by Canon.str.
func UnescapeCanon(seg []byte) string {
	out := make([]byte, 0, len(seg))
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if seg[i] == 'u' {
			out = append(out, (seg[i+3]-'0')<<4|hexVal(seg[i+4]))
			i += 4
			continue
		}
		b, _ := shortEscape(seg[i]) // Canon.str let only these through
		out = append(out, b)
	}
	return string(out)
}

// Int reads a canonical integer in the safe range.
func (r *Canon) Int() (int64, error) {
	start := r.I
	if r.Peek() == '-' {
		r.I++
	}
	ds := r.I
	for r.I < len(r.B) && IsDigit(r.B[r.I]) {
		r.I++
	}
	digits := r.B[ds:r.I]
	switch {
	case len(digits) == 0:
		return 0, fmt.Errorf("%w: want an integer at offset %d", ErrNotCanonical, start)
	case len(digits) > 1 && digits[0] == '0':
		return 0, fmt.Errorf("%w: leading zero", ErrNotCanonical)
	case ds > start && len(digits) == 1 && digits[0] == '0':
		return 0, fmt.Errorf("%w: negative zero", ErrNotCanonical)
	case len(digits) > 16:
		return 0, ErrIntRange
	}
	if c := r.Peek(); c == '.' || c == 'e' || c == 'E' {
		return 0, ErrFloat
	}
	var n int64
	for _, d := range digits {
		n = n*10 + int64(d-'0')
	}
	if n > MaxSafeInt {
		return 0, ErrIntRange
	}
	if ds > start {
		n = -n
	}
	return n, nil
}

// Limits bounds what a Canon accepts inside a value it skips.
type Limits struct {
	Depth, List, Str int
}

// Skip reads one canonical value of any kind: keys in strictly increasing
// code point order (which also refuses duplicates), no whitespace, canonical
// strings and integers only.
func (r *Canon) Skip(lim Limits, depth int) error {
	if depth > lim.Depth {
		return ErrTooDeep
	}
	switch c := r.Peek(); {
	case c == '{':
		r.I++
		if r.Peek() == '}' {
			r.I++
			return nil
		}
		var prev []byte
		n := 0
		for {
			// Keys are compared by their text: the input's own bytes,
			// unless escapes make them differ from it.
			k, escaped, err := r.StrSeg(lim.Str)
			if err != nil {
				return err
			}
			if escaped {
				k = []byte(UnescapeCanon(k))
			}
			if n > 0 && bytes.Compare(k, prev) <= 0 {
				return fmt.Errorf("%w: object keys out of order or repeated", ErrNotCanonical)
			}
			if n++; n > lim.List {
				return ErrTooLong
			}
			prev = k
			if err := r.Expect(':'); err != nil {
				return err
			}
			if err := r.Skip(lim, depth+1); err != nil {
				return err
			}
			if r.Peek() == '}' {
				r.I++
				return nil
			}
			if err := r.Expect(','); err != nil {
				return err
			}
		}
	case c == '[':
		r.I++
		if r.Peek() == ']' {
			r.I++
			return nil
		}
		for n := 1; ; n++ {
			if n > lim.List {
				return ErrTooLong
			}
			if err := r.Skip(lim, depth+1); err != nil {
				return err
			}
			if r.Peek() == ']' {
				r.I++
				return nil
			}
			if err := r.Expect(','); err != nil {
				return err
			}
		}
	case c == '"':
		_, _, err := r.StrSeg(lim.Str)
		return err
	case c == 't':
		return r.litOr("true")
	case c == 'f':
		return r.litOr("false")
	case c == 'n':
		return r.litOr("null")
	default:
		_, err := r.Int()
		return err
	}
}

func (r *Canon) litOr(s string) error {
	if !r.Lit(s) {
		return fmt.Errorf("%w: invalid literal at offset %d", ErrNotCanonical, r.I)
	}
	return nil
}

// IsCanonical reports whether raw is exactly the canonical form of one
// JSON value within the general limits.
func IsCanonical(raw []byte) bool {
	r := &Canon{B: raw}
	err := r.Skip(Limits{Depth: MaxDepth, List: 1 << 30, Str: 1 << 30}, 0)
	return err == nil && r.Done()
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a canonical JSON string (§10): \" \\ \b \f \n
// \r \t, \u00xx with lowercase hex for the other control characters below
// U+0020, and every other character literally. Unlike encoding/json it does
// not escape <, >, &, U+2028 or U+2029. s must be valid UTF-8.
func AppendString(dst []byte, s string) []byte {
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
