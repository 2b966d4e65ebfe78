package client

import (
	"bytes"
	"encoding/json"
	"reflect"

	"github.com/parley-keyd/parley-keyd/grant/lens"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// The socket's replies are untrusted text (DESIGN.md property 13). The
// client checks who serves the socket, but a user may be told to trust a
// server that is not the daemon (PARLEY_KEYD_USER naming another user), and
// a daemon's strings hold what agents and services wrote. Shown as they
// came, they could set the clipboard (OSC 52), forge the screen (CSI 2J),
// reorder text (U+202E) or forge lines. So every string the client decodes
// from a reply passes through lens.SafeText before any caller sees it, in
// this one place: no command, MCP tool or approver can forget it.
//
// The exceptions keep bytes exactly, because something checks them: a
// field tagged `display:"exact"` (a proposal an approver re-hashes, audit
// records as stored) keeps its JSON as sent, and a field tagged
// `display:"lines"` (a request's whole rendering) keeps its line breaks
// (lens.SafeLines). Whoever prints an exact field must neutralize it
// itself; parley-grant's JSON output escapes every rune SafeText would
// escape, which leaves the values as they are.

// neutralizeFrame makes the strings of a reply frame that callers show
// safe: the message, fix, rule and code of an ERROR or EVENT. Data is
// neutralized where it is decoded (decodeData).
func neutralizeFrame(f *protocol.Frame) {
	for _, s := range []*string{&f.Kind, &f.Message, &f.Fix, &f.Rule} {
		*s = safeString(*s, false)
	}
	f.Code = protocol.Code(safeString(string(f.Code), false))
}

// decodeData decodes a reply's data into v, a pointer, and neutralizes
// every string in it.
func decodeData(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return err
	}
	neutralize(reflect.ValueOf(v), "")
	return nil
}

// safeString returns s as SafeText (or SafeLines) makes it, without a
// limit: nothing is cut, what the daemon sent is shown whole.
func safeString(s string, lines bool) string {
	if plain(s) {
		return s
	}
	if lines {
		return lens.SafeLines(s, 0)
	}
	return lens.SafeText(s, 0)
}

// plain reports whether s is printable ASCII only, which SafeText leaves
// as it is: most strings are, and this saves the work.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// neutralize replaces every string reachable from v in place: struct
// fields (exported), slices, arrays, map keys and values, and what
// pointers and interfaces hold. tag is the display tag of the field v is.
// It reports whether anything changed.
func neutralize(v reflect.Value, tag string) bool {
	if tag == "exact" {
		return false
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return false
		}
		return neutralize(v.Elem(), tag)
	case reflect.Interface:
		if v.IsNil() {
			return false
		}
		// What an interface holds cannot be changed in place: work on
		// a copy and put it back.
		c := reflect.New(v.Elem().Type()).Elem()
		c.Set(v.Elem())
		if !neutralize(c, tag) {
			return false
		}
		if v.CanSet() {
			v.Set(c)
		}
		return true
	case reflect.Struct:
		changed := false
		t := v.Type()
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() {
				changed = neutralize(v.Field(i), f.Tag.Get("display")) || changed
			}
		}
		return changed
	case reflect.Slice:
		if v.Type() == rawMessageType {
			return neutralizeRaw(v)
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return false // bytes are not text
		}
		fallthrough
	case reflect.Array:
		changed := false
		for i := range v.Len() {
			changed = neutralize(v.Index(i), tag) || changed
		}
		return changed
	case reflect.Map:
		changed := false
		for _, k := range v.MapKeys() {
			val := reflect.New(v.Type().Elem()).Elem()
			val.Set(v.MapIndex(k))
			nk := reflect.New(k.Type()).Elem()
			nk.Set(k)
			kc := neutralize(nk, "")
			vc := neutralize(val, tag)
			if kc || vc {
				v.SetMapIndex(k, reflect.Value{})
				v.SetMapIndex(nk, val)
				changed = true
			}
		}
		return changed
	case reflect.String:
		s := safeString(v.String(), tag == "lines")
		if s == v.String() || !v.CanSet() {
			return false
		}
		v.SetString(s)
		return true
	}
	return false
}

// neutralizeRaw neutralizes the strings inside raw JSON (a caveat's value,
// say), v being a settable json.RawMessage. It is re-encoded only when a
// string changed, so the JSON of honest replies is kept byte for byte.
func neutralizeRaw(v reflect.Value) bool {
	raw := v.Bytes()
	if len(raw) == 0 || plain(string(raw)) && bytes.IndexByte(raw, '\\') < 0 {
		// Printable ASCII without escapes decodes to plain strings.
		return false
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var x any
	if d.Decode(&x) != nil {
		// Not JSON: keep nothing of it that could reach a terminal.
		if v.CanSet() {
			v.SetBytes([]byte("null"))
		}
		return true
	}
	xv := reflect.ValueOf(&x).Elem()
	if !neutralize(xv, "") || !v.CanSet() {
		return false
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(x) != nil {
		v.SetBytes([]byte("null"))
		return true
	}
	v.SetBytes(bytes.TrimRight(b.Bytes(), "\n"))
	return true
}
