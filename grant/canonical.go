package grant

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/parley-keyd/parley-keyd/grant/internal/jsontext"
)

// maxSafeInt is the largest integer allowed in signed or hashed payloads
// (§10): 2^53−1, the largest integer every JSON implementation keeps exact.
const maxSafeInt = jsontext.MaxSafeInt

// maxDepth bounds the nesting of any JSON value this package parses or
// encodes (jsontext.MaxDepth).
const maxDepth = jsontext.MaxDepth

var (
	errFloat        = jsontext.ErrFloat
	errIntRange     = jsontext.ErrIntRange
	errTooDeep      = jsontext.ErrTooDeep
	errUTF8         = jsontext.ErrUTF8
	errTooLong      = jsontext.ErrTooLong
	errNotCanonical = jsontext.ErrNotCanonical
)

// canonical returns canonical(v) as defined in §10: object keys sorted by
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
func canonical(v any) ([]byte, error) {
	return appendCanonical(nil, v, 0)
}

// CanonicalizeJSON parses raw as one JSON value and returns its canonical
// form (§10). It refuses duplicate object keys, invalid UTF-8 (also through
// \u escapes of lone surrogates), trailing data, nesting deeper than 64 and
// every number that canonical refuses.
func CanonicalizeJSON(raw []byte) ([]byte, error) {
	// Most input is canonical already (clients write it so, to hash
	// it): then it is its own canonical form, checked in one pass that
	// allocates nothing. FuzzCanonicalizeJSON holds the two paths equal.
	if jsontext.IsCanonical(raw) {
		return bytes.Clone(raw), nil
	}
	return canonicalizeParsed(raw)
}

// canonicalizeParsed is CanonicalizeJSON by parsing raw and encoding what
// it holds.
func canonicalizeParsed(raw []byte) ([]byte, error) {
	v, err := jsontext.Parse(raw)
	if err != nil {
		return nil, err
	}
	return canonical(v)
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
		return jsontext.AppendString(dst, v), nil
	case json.Number:
		n, err := jsontext.ParseInt(string(v))
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
			dst = jsontext.AppendString(dst, k)
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
			dst = jsontext.AppendString(dst, e)
		}
		return append(dst, ']'), nil
	case json.RawMessage:
		pv, err := jsontext.Parse(v)
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
	pv, err := jsontext.Parse(raw)
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
	if n > maxSafeInt || n < -maxSafeInt {
		return nil, errIntRange
	}
	return strconv.AppendInt(dst, n, 10), nil
}

func appendUint(dst []byte, n uint64) ([]byte, error) {
	if n > maxSafeInt {
		return nil, errIntRange
	}
	return strconv.AppendUint(dst, n, 10), nil
}
