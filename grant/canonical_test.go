package grant

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/grant/internal/jsontext"
)

func TestCanonicalizeJSON(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"ok/whitespace-dropped", " { \"b\" : [ 1 , 2 ] ,\n\"a\":null } ", `{"a":null,"b":[1,2]}`},
		{"ok/html-chars-literal", `"<a href='x'>&amp;</a>"`, `"<a href='x'>&amp;</a>"`},
		{"ok/line-separators-literal", `"\u2028\u2029"`, "\"\u2028\u2029\""},
		{"ok/escaped-slash-unescaped", `"a\/b"`, `"a/b"`},
		{"ok/unicode-escape-decoded", `"\u00e9\u6771"`, `"é東"`},
		{"ok/surrogate-pair", `"\ud83c\udf89"`, `"🎉"`},
		{"ok/controls", `"\u0001\u001F\u007f"`, "\"\\u0001\\u001f\u007f\""},
		{"ok/short-escapes-from-u", `"\u0008\u0009\u000a\u000c\u000d"`, `"\b\t\n\f\r"`},
		{"ok/max-int", `[9007199254740991,-9007199254740991]`, `[9007199254740991,-9007199254740991]`},
		{"ok/minus-zero", `-0`, `0`},
		{"ok/key-order-code-point", `{"é":1,"z":2,"Z":3,"🎉":4,"￿":5}`, `{"Z":3,"z":2,"é":1,"￿":5,"🎉":4}`},
		{"ok/empty", `{"a":{},"b":[]}`, `{"a":{},"b":[]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CanonicalizeJSON([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
			if !jsontext.IsCanonical(got) {
				t.Errorf("jsontext.IsCanonical(%q) = false", got)
			}
		})
	}
}

func TestCanonicalizeJSONRefuses(t *testing.T) {
	tests := []struct {
		name, in string
		want     error // nil: any error
	}{
		{"fail/float", `1.5`, errFloat},
		{"fail/whole-float", `1.0`, errFloat},
		{"fail/exponent", `1e3`, errFloat},
		{"fail/float-in-object", `{"a":[0.1]}`, errFloat},
		{"fail/too-big", `9007199254740992`, errIntRange},
		{"fail/too-small", `-9007199254740992`, errIntRange},
		{"fail/huge", `123456789012345678901234567890`, errIntRange},
		{"fail/duplicate-key", `{"a":1,"a":2}`, nil},
		{"fail/duplicate-key-by-escape", `{"a":1,"\u0061":2}`, nil},
		{"fail/invalid-utf8", "\"\xff\"", errUTF8},
		{"fail/invalid-utf8-key", "{\"\xc3\":1}", errUTF8},
		{"fail/lone-high-surrogate", `"\ud83c"`, nil},
		{"fail/lone-low-surrogate", `"\udf89"`, nil},
		{"fail/trailing-data", `{} {}`, nil},
		{"fail/raw-control", "\"a\tb\"", nil},
		{"fail/leading-zero", `01`, nil},
		{"fail/plus", `+1`, nil},
		{"fail/bad-escape", `"\x"`, nil},
		{"fail/unterminated", `{"a":`, nil},
		{"fail/empty", ``, nil},
		{"fail/nan", `NaN`, nil},
		{"fail/too-deep", strings.Repeat("[", 66) + strings.Repeat("]", 66), errTooDeep},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CanonicalizeJSON([]byte(tt.in))
			if err == nil {
				t.Fatalf("got %q, want an error", got)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("error %v, want %v", err, tt.want)
			}
		})
	}
}

func TestCanonicalGoValues(t *testing.T) {
	type inner struct {
		N int64  `json:"n"`
		S string `json:"s"`
	}
	type outer struct {
		Z inner          `json:"z"`
		A []string       `json:"a"`
		M map[string]int `json:"m"`
	}
	tests := []struct {
		name string
		in   any
		want string
	}{
		{"ok/nil", nil, `null`},
		{"ok/ints", []any{int8(-1), uint16(2), int64(maxSafeInt), uint(0)}, `[-1,2,9007199254740991,0]`},
		{"ok/json-number", json.Number("-42"), `-42`},
		{"ok/struct-sorted-and-unescaped", outer{Z: inner{1, "<&>"}, A: []string{"x"}, M: map[string]int{"b": 2, "a": 1}},
			`{"a":["x"],"m":{"a":1,"b":2},"z":{"n":1,"s":"<&>"}}`},
		{"ok/raw-message", json.RawMessage(`{ "b":1, "a" : "\u003c" }`), `{"a":"<","b":1}`},
		{"ok/caveat", Exp(5), `{"exp":5}`},
		{"ok/string-slice", []string{"a\"", "\u2028"}, "[\"a\\\"\",\"\u2028\"]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := canonical(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}

	refuse := []struct {
		name string
		in   any
	}{
		{"fail/float64", 2.0},
		{"fail/float32", float32(1)},
		{"fail/float-in-struct", struct{ F float64 }{2}},
		{"fail/float-in-map", map[string]float64{"a": 1}},
		{"fail/float-behind-pointer", &struct{ F *float64 }{new(float64)}},
		{"fail/big-uint", uint64(1 << 60)},
		{"fail/big-int", int64(-1 << 60)},
		{"fail/invalid-utf8", "\xff"},
		{"fail/invalid-utf8-key", map[string]any{"\xff": 1}},
		{"fail/json-number-float", json.Number("1.5")},
		{"fail/unmarshalable", make(chan int)},
	}
	for _, tt := range refuse {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := canonical(tt.in); err == nil {
				t.Errorf("got %s, want an error", got)
			}
		})
	}
}

// TestIsCanonicalStrict checks that the reader Decode relies on accepts only
// the exact canonical spelling.
func TestIsCanonicalStrict(t *testing.T) {
	for _, s := range []string{
		`{"a":1,"b":2}`, `[]`, `{}`, `"\u001f"`, `"\"\\\b\f\n\r\t"`, "\"\u2028<>&/\u007f\"", `-1`, `0`, `true`,
	} {
		if !jsontext.IsCanonical([]byte(s)) {
			t.Errorf("jsontext.IsCanonical(%q) = false, want true", s)
		}
	}
	for _, s := range []string{
		`{"b":1,"a":2}`,    // out of order
		`{"a":1,"a":1}`,    // repeated
		`{"a": 1}`,         // whitespace
		` 1`,               // whitespace
		`"\u0041"`,         // needless escape
		`"\/"`,             // escaped slash
		`"\u001F"`,         // upper-case hex
		`"\u000a"`,         // \u where \n is required
		`"\u007f"`,         // DEL is literal
		"\"\x01\"",         // raw control character
		"\"\xff\"",         // invalid UTF-8
		"\"\xed\xa0\x80\"", // UTF-8 surrogate
		`-0`, `01`, `1.0`, `1e2`, `9007199254740992`,
		`[1,]`, `{"a":1,}`, `tru`, `nul`,
	} {
		if jsontext.IsCanonical([]byte(s)) {
			t.Errorf("jsontext.IsCanonical(%q) = true, want false", s)
		}
	}
}
