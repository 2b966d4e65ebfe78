package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzEscapeJSONText: escapeJSONText leaves the value of any JSON text as
// it is, and leaves no character on the terminal that SafeText escapes.
func FuzzEscapeJSONText(f *testing.F) {
	f.Add([]byte(`{"a":"\u202e\u0085\u2028 é ✓ 😀","b":[1,2.5e3,null,true],"\u200b":"\u007f"}`))
	f.Add([]byte("\"raw \u202e \xc2\x9b \U000E0041\""))
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		out := escapeJSONText(data)
		if !json.Valid(out) {
			t.Fatalf("%q escaped to invalid JSON %q", data, out)
		}
		if r, i, bad := forbidden(string(out)); bad {
			t.Errorf("U+%04X left at %d in %q", r, i, out)
		}
		var a, b any
		da, db := json.NewDecoder(bytes.NewReader(data)), json.NewDecoder(bytes.NewReader(out))
		da.UseNumber()
		db.UseNumber()
		if da.Decode(&a) != nil || db.Decode(&b) != nil {
			t.Fatalf("cannot decode %q or %q", data, out)
		}
		// Bytes that are not UTF-8 decode to U+FFFD either way.
		if !reflect.DeepEqual(a, b) {
			t.Errorf("value changed: %q → %q", data, out)
		}
	})
}
