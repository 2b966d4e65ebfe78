// Package jsontext is the one reader of JSON text in grant and grant/lens.
// Every byte of JSON that an agent or a service wrote is read by its
// Scanner: white space, literals, numbers and strings, with one set of
// rules and one set of caps. The readers above it only walk the structure
// the Scanner reads and never look at the bytes of a string or a number
// themselves: the strict reader (strict.go: DecodeStrict's reflect walk and
// StrictObject, the parse of a proposal), which holds the rules on member
// names (none twice, none that differs from a known one only in case), the
// lenient tree of Parse, the canonical checker Canon of tokens and caveats,
// and the Lens tree of grant/lens.
//
// A string is read in one of three ways:
//
//   - String: RFC 8259 with every escape, valid UTF-8 (also through \u
//     escapes: a lone surrogate is refused), no raw control character;
//   - String with KeepSurrogates: the same, but a \u escape of a lone
//     surrogate is kept, as ECMAScript keeps it (Lens, §9.1);
//   - Canon.Str: exactly canonical text (§10): only the escapes of §10,
//     lowercase \u00xx for the other controls, literal UTF-8 otherwise,
//     within a length cap.
//
// Numbers follow the JSON grammar (Number), and where §10 allows only
// integers (Canon.Int, ParseInt) they must be integers in
// [−(2^53−1), 2^53−1], in minimal form in canonical text. Names set
// refuses a repeated member name in linear time. The depth caps are
// MaxDepth (canonical JSON and proposals) and MaxStrictDepth (DecodeStrict
// and Lens frames).
package jsontext

import (
	"bytes"
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxSafeInt is the largest integer allowed in signed or hashed payloads
// (§10): 2^53−1.
const MaxSafeInt = 1<<53 - 1

// MaxDepth bounds the nesting of canonical JSON and of a proposal: it stops
// a stack-exhaustion attack by deeply nested input ([[[[…]]]]), which costs
// the sender two bytes per level.
const MaxDepth = 64

// MaxStrictDepth bounds the nesting DecodeStrict and Lens read: room for a
// proposal (itself read to MaxDepth) inside a frame inside a frame.
const MaxStrictDepth = 128

// The errors that do not depend on where they were found.
var (
	ErrFloat        = errors.New("number is not an integer: floats have no canonical form (§10)")
	ErrIntRange     = errors.New("integer outside [-(2^53-1), 2^53-1] (§10)")
	ErrTooDeep      = errors.New("value nested too deeply")
	ErrUTF8         = errors.New("string is not valid UTF-8")
	ErrTooLong      = errors.New("over a size limit")
	ErrNotCanonical = errors.New("json is not canonical (§10)")
)

// SyntaxError is a fault in JSON text at an offset. Msg is one of the
// messages below; readers word it for their callers.
type SyntaxError struct {
	Off int
	Msg string
}

func (e *SyntaxError) Error() string { return e.Msg }

// The messages of a SyntaxError from String.
const (
	MsgUnterminated     = "unterminated string"
	MsgControl          = "control character in string"
	MsgUnterminatedEsc  = "unterminated escape"
	MsgBadUnicodeEscape = "invalid \\u escape"
	MsgLoneSurrogate    = "lone surrogate in string"
	MsgBadEscape        = "invalid escape \\" // followed by the character
)

// Scanner reads JSON text from B at I. Its methods read one token each and
// leave I after it; on error I is where the fault was found.
type Scanner struct {
	B []byte
	I int
}

// Space skips JSON white space.
func (s *Scanner) Space() {
	for s.I < len(s.B) {
		switch s.B[s.I] {
		case ' ', '\t', '\n', '\r':
			s.I++
		default:
			return
		}
	}
}

// Literal reads word (true, false, null) and reports whether it was there.
func (s *Scanner) Literal(word string) bool {
	if !bytes.HasPrefix(s.B[s.I:], []byte(word)) {
		return false
	}
	s.I += len(word)
	return true
}

// Number reads a number by the JSON grammar and returns its text, which
// aliases B. On error I is left at the number's start.
func (s *Scanner) Number() ([]byte, bool) {
	start := s.I
	for s.I < len(s.B) {
		c := s.B[s.I]
		if IsDigit(c) || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' {
			s.I++
			continue
		}
		break
	}
	text := s.B[start:s.I:s.I]
	if !ValidNumber(text) {
		s.I = start
		return text, false
	}
	return text, true
}

// String reads a string starting at its opening quote and returns its
// text. For a string without escapes the text aliases B, so that a value
// that is only checked costs no allocation; escaped reports whether it has
// any. Invalid UTF-8 is ErrUTF8 with I after the closing quote; other
// faults are a *SyntaxError. With keepSurrogates set, a \u escape of a
// lone surrogate is kept, encoded as UTF-8 would encode it (three bytes
// starting 0xED 0xA0–0xBF, which valid UTF-8 never holds), instead of
// refused.
func (s *Scanner) String(keepSurrogates bool) (text []byte, escaped bool, err error) {
	s.I++ // opening quote
	var out []byte
	bad := false
	start := s.I
	for {
		if s.I >= len(s.B) {
			return nil, false, s.fault(MsgUnterminated)
		}
		c := s.B[s.I]
		switch {
		case c == '"':
			seg := s.B[start:s.I:s.I]
			s.I++
			// UTF-8 is checked on the raw bytes, segment by segment: an
			// escape is ASCII, so no sequence is valid across one, and a
			// kept surrogate (from an escape) is never mistaken for input.
			if bad || !utf8.Valid(seg) {
				return nil, false, ErrUTF8
			}
			if out == nil {
				return seg, false, nil
			}
			return append(out, seg...), true, nil
		case c < 0x20:
			return nil, false, s.fault(MsgControl)
		case c == '\\':
			bad = bad || !utf8.Valid(s.B[start:s.I])
			out = append(out, s.B[start:s.I]...)
			s.I++
			if s.I >= len(s.B) {
				return nil, false, s.fault(MsgUnterminatedEsc)
			}
			e := s.B[s.I]
			s.I++
			if e == 'u' {
				if out, err = s.unicodeEscape(out, keepSurrogates); err != nil {
					return nil, false, err
				}
			} else if b, ok := shortEscape(e); ok {
				out = append(out, b)
			} else {
				return nil, false, &SyntaxError{Off: s.I, Msg: MsgBadEscape + string(rune(e))}
			}
			start = s.I
			if out == nil {
				out = []byte{}
			}
		default:
			s.I++
		}
	}
}

// shortEscape is the character a two-character escape \e stands for
// (RFC 8259 §7), and false for any e that is not one.
func shortEscape(e byte) (byte, bool) {
	switch e {
	case '"', '\\', '/':
		return e, true
	case 'b':
		return '\b', true
	case 'f':
		return '\f', true
	case 'n':
		return '\n', true
	case 'r':
		return '\r', true
	case 't':
		return '\t', true
	}
	return 0, false
}

// unicodeEscape reads the four hex digits after \u (and a second escape
// for a surrogate pair) and appends the code point to out.
func (s *Scanner) unicodeEscape(out []byte, keepSurrogates bool) ([]byte, error) {
	r, ok := s.hex4()
	if !ok {
		return nil, s.fault(MsgBadUnicodeEscape)
	}
	if !utf16.IsSurrogate(r) {
		return utf8.AppendRune(out, r), nil
	}
	// A high surrogate followed by an escaped low one is one code point.
	followed := r < 0xdc00 && s.I+1 < len(s.B) && s.B[s.I] == '\\' && s.B[s.I+1] == 'u'
	if followed {
		save := s.I
		s.I += 2
		r2, ok := s.hex4()
		if !ok {
			return nil, s.fault(MsgBadUnicodeEscape)
		}
		if pair := utf16.DecodeRune(r, r2); pair != utf8.RuneError {
			return utf8.AppendRune(out, pair), nil
		}
		if !keepSurrogates {
			return nil, s.fault(MsgLoneSurrogate)
		}
		s.I = save
	}
	if !keepSurrogates {
		return nil, s.fault(MsgLoneSurrogate)
	}
	return append(out, 0xe0|byte(r>>12), 0x80|byte(r>>6)&0x3f, 0x80|byte(r)&0x3f), nil
}

// IsSurrogateAt reports whether b holds, at i, a lone surrogate that
// String kept.
func IsSurrogateAt[T string | []byte](b T, i int) bool {
	return i+2 < len(b) && b[i] == 0xed && b[i+1] >= 0xa0 && b[i+1] <= 0xbf
}

func (s *Scanner) fault(msg string) error { return &SyntaxError{Off: s.I, Msg: msg} }

func (s *Scanner) hex4() (rune, bool) {
	if s.I+4 > len(s.B) {
		return 0, false
	}
	var r rune
	for _, c := range s.B[s.I : s.I+4] {
		r <<= 4
		switch {
		case IsDigit(c):
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	s.I += 4
	return r, true
}

// IsDigit reports whether c is an ASCII digit.
func IsDigit(c byte) bool { return c >= '0' && c <= '9' }

// ValidNumber reports whether s matches the JSON number grammar
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func ValidNumber[T string | []byte](s T) bool {
	n, ok := numberPrefix(s)
	return ok && n == len(s)
}

// numberPrefix reads the longest prefix of s that the number grammar
// allows. It returns its length, or, when the grammar fails inside a
// number ("-", "1.", "1e+"), the offset of the failure and false.
func numberPrefix[T string | []byte](s T) (int, bool) {
	i := 0
	digits := func() int {
		n := 0
		for i < len(s) && IsDigit(s[i]) {
			i++
			n++
		}
		return n
	}
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case digits() == 0:
		return i, false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return i, false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return i, false
		}
	}
	return i, true
}

// NumberPrefix reads the longest number the grammar allows at I and
// returns its text, as ECMAScript's JSON.parse reads one ("01" is 0, then
// an error at "1"). When the grammar fails inside the number, I is left
// at the failure.
func (s *Scanner) NumberPrefix() ([]byte, bool) {
	start := s.I
	n, ok := numberPrefix(s.B[start:])
	s.I = start + n
	return s.B[start:s.I:s.I], ok
}

// ParseInt parses JSON number text that must denote an integer in the
// safe range of §10: no fraction, no exponent. "-0" is read as 0.
func ParseInt(s string) (int64, error) {
	if !ValidNumber(s) {
		return 0, errors.New("invalid number " + strconv.Quote(s))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '.' || c == 'e' || c == 'E' {
			return 0, ErrFloat
		}
	}
	digits := s
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) > 16 {
		return 0, ErrIntRange
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > MaxSafeInt || n < -MaxSafeInt {
		return 0, ErrIntRange
	}
	return n, nil
}

// Names holds the member names of one object, to refuse a second one.
// Names alias the input where they have no escapes, and the first few are
// kept in place, so that checking a value that is only skipped allocates
// little; many members go into a set, so the check stays linear.
type Names struct {
	first [8][]byte
	n     int
	set   map[string]struct{}
}

// Add reports false when name was already there.
func (n *Names) Add(name []byte) bool {
	if n.set != nil {
		if _, dup := n.set[string(name)]; dup {
			return false
		}
		n.set[string(name)] = struct{}{}
		return true
	}
	for _, s := range n.first[:n.n] {
		if bytes.Equal(s, name) {
			return false
		}
	}
	if n.n < len(n.first) {
		n.first[n.n] = name
		n.n++
		return true
	}
	n.set = make(map[string]struct{}, 32)
	for _, s := range n.first {
		n.set[string(s)] = struct{}{}
	}
	n.set[string(name)] = struct{}{}
	return true
}
