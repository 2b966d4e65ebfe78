package jsontext

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Parse parses one JSON value leniently (any white space, any valid
// escape) into nil, bool, string, json.Number, map[string]any and []any. It
// refuses duplicate keys, invalid UTF-8, lone surrogates, nesting deeper than
// MaxDepth and trailing data. Its errors say "json: offset N: …".
func Parse(raw []byte) (any, error) {
	p := &reader{Scanner: Scanner{B: raw}}
	p.Space()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.Space()
	if p.I != len(p.B) {
		return nil, fmt.Errorf("json: trailing data at offset %d", p.I)
	}
	return v, nil
}

// reader walks the structure of JSON text that its Scanner reads, and
// words the scanner's faults as "json: offset N: …".
type reader struct {
	Scanner
}

func (p *reader) errorf(format string, args ...any) error {
	return fmt.Errorf("json: offset %d: %s", p.I, fmt.Sprintf(format, args...))
}

// scanErr words an error of the scanner.
func scanErr(err error) error {
	if err == nil {
		return nil // and no allocation for errors.As's target
	}
	var se *SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("json: offset %d: %s", se.Off, se.Msg)
	}
	return err
}

func (p *reader) value(depth int) (any, error) {
	if depth > MaxDepth {
		return nil, ErrTooDeep
	}
	if p.I >= len(p.B) {
		return nil, p.errorf("unexpected end of input")
	}
	switch c := p.B[p.I]; {
	case c == '{':
		p.I++
		m := map[string]any{}
		p.Space()
		if p.I < len(p.B) && p.B[p.I] == '}' {
			p.I++
			return m, nil
		}
		for {
			p.Space()
			if p.I >= len(p.B) || p.B[p.I] != '"' {
				return nil, p.errorf("want an object key")
			}
			k, err := p.str()
			if err != nil {
				return nil, err
			}
			if _, dup := m[k]; dup {
				return nil, p.errorf("duplicate key %q", k)
			}
			p.Space()
			if p.I >= len(p.B) || p.B[p.I] != ':' {
				return nil, p.errorf("want ':'")
			}
			p.I++
			p.Space()
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			m[k] = v
			p.Space()
			if p.I >= len(p.B) {
				return nil, p.errorf("unexpected end of object")
			}
			if p.B[p.I] == '}' {
				p.I++
				return m, nil
			}
			if p.B[p.I] != ',' {
				return nil, p.errorf("want ',' or '}'")
			}
			p.I++
		}
	case c == '[':
		p.I++
		a := []any{}
		p.Space()
		if p.I < len(p.B) && p.B[p.I] == ']' {
			p.I++
			return a, nil
		}
		for {
			p.Space()
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
			p.Space()
			if p.I >= len(p.B) {
				return nil, p.errorf("unexpected end of array")
			}
			if p.B[p.I] == ']' {
				p.I++
				return a, nil
			}
			if p.B[p.I] != ',' {
				return nil, p.errorf("want ',' or ']'")
			}
			p.I++
		}
	case c == '"':
		return p.str()
	case c == 't':
		return true, p.lit("true")
	case c == 'f':
		return false, p.lit("false")
	case c == 'n':
		return nil, p.lit("null")
	case c == '-' || IsDigit(c):
		text, err := p.number()
		return json.Number(text), err
	default:
		return nil, p.errorf("unexpected character %q", c)
	}
}

// number reads a number and returns its text; its error names the text at
// the offset after it.
func (p *reader) number() (string, error) {
	text, ok := p.Number()
	if !ok {
		p.I += len(text)
		err := p.errorf("invalid number %q", text)
		p.I -= len(text)
		return "", err
	}
	return string(text), nil
}

func (p *reader) lit(word string) error {
	if !p.Literal(word) {
		return p.errorf("invalid literal")
	}
	return nil
}

// str reads a string starting at the opening quote.
func (p *reader) str() (string, error) {
	b, err := p.strBytes()
	return string(b), err
}

// strBytes is str without the conversion to a string: for a string
// without escapes it returns the input's own bytes, so that a value that is
// only checked costs no allocation.
func (p *reader) strBytes() ([]byte, error) {
	b, _, err := p.String(false)
	return b, scanErr(err)
}
