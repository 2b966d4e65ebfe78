package grant

import "github.com/parley-keyd/parley-keyd/grant/internal/jsontext"

// The strict reader itself, and why there is one (DESIGN.md property 9), is
// grant/internal/jsontext's strict.go.

// DecodeStrict decodes the JSON value in data into v, which must be a
// non-nil pointer, and reads it exactly one way:
//
//   - data is one JSON value (RFC 8259) and nothing after it but white
//     space; it is valid UTF-8, with no \u escape of a lone surrogate; it
//     nests at most 128 deep;
//   - no object anywhere in data has two members of the same name, whatever
//     its depth, and also inside a member kept as json.RawMessage or
//     skipped as unknown;
//   - a member matches a struct field only when its name equals the
//     field's JSON name exactly. A name that differs from a field's name
//     only in case ("Cost" for "cost") is an error, never merged; any
//     other name that no field takes is ignored (§2.1 lets readers ignore
//     unknown fields; DecodeStrictKnown refuses them).
//
// Otherwise it decodes as encoding/json does, with one difference: a
// number decoded into an interface value becomes a json.Number, so that
// no integer is rounded through float64. For input that meets the rules
// above, the result equals encoding/json's (with UseNumber). A value that
// implements json.Unmarshaler receives its exact bytes; json.RawMessage
// keeps them. Struct tags with the ",string" option, maps whose keys are
// not strings, non-empty interfaces and []byte from base64 text are not
// supported.
//
// An error names the member at fault (its path, and the name as sent, cut
// to 40 characters). On error, v may have been partly set: do not use it.
func DecodeStrict(data []byte, v any) error { return jsontext.DecodeStrict(data, v, false) }

// DecodeStrictKnown is DecodeStrict that also refuses a member no field of
// its struct takes, for objects whose every field must be
// accounted for, such as a request's body.
func DecodeStrictKnown(data []byte, v any) error { return jsontext.DecodeStrict(data, v, true) }
