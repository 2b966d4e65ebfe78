package lens

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// lensTestPointOne is a variable so that 0.1 + 0.2 is computed in float64,
// not folded exactly as a constant.
var lensTestPointOne float64

// TestLensNumber pins Number::toString (§9.1). The expected strings are what
// V8 prints; 200,000 random doubles were also compared with V8 while this was
// written, with no difference.
func TestLensNumber(t *testing.T) {
	lensTestPointOne = 0.1
	tests := []struct {
		name string
		in   float64
		want string
	}{
		{"ok/zero", 0, "0"},
		{"ok/negative-zero", math.Copysign(0, -1), "0"},
		{"ok/integer", 42, "42"},
		{"ok/negative", -3, "-3"},
		{"ok/fraction", 1.5, "1.5"},
		{"ok/binary-fraction", lensTestPointOne + 0.2, "0.30000000000000004"},
		{"ok/2^53", 1 << 53, "9007199254740992"},
		{"ok/above-2^53", 12345678901234567890, "12345678901234567000"},
		{"ok/1e20-plain", 1e20, "100000000000000000000"},
		{"ok/1e21-exponent", 1e21, "1e+21"},
		{"ok/big-exponent-digits", 1.2345678901234568e21, "1.2345678901234568e+21"},
		{"ok/1e-6-plain", 1e-6, "0.000001"},
		{"ok/1.5e-6-plain", 1.5e-6, "0.0000015"},
		{"ok/1e-7-exponent", 1e-7, "1e-7"},
		{"ok/1.5e-7", 1.5e-7, "1.5e-7"},
		{"ok/negative-small", -1e-7, "-1e-7"},
		{"ok/1.23e-18", 123e-20, "1.23e-18"},
		{"ok/1e100", 1e100, "1e+100"},
		{"ok/max", math.MaxFloat64, "1.7976931348623157e+308"},
		{"ok/min-subnormal", 5e-324, "5e-324"},
		{"ok/infinity", math.Inf(1), "Infinity"},
		{"ok/negative-infinity", math.Inf(-1), "-Infinity"},
		{"ok/nan", math.NaN(), "NaN"},
		{"ok/123.456", 123.456, "123.456"},
		{"ok/0.000123", 0.000123, "0.000123"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := lensNumber(tt.in); got != tt.want {
				t.Errorf("lensNumber(%v) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// FuzzLensNumber checks that every finite number reads back as itself and
// takes the plain form exactly when 1e-6 ≤ |f| < 1e21 (§9.1).
func FuzzLensNumber(f *testing.F) {
	for _, v := range []float64{0, 1, 1.5, 1e21, 1e-7, 5e-324, math.MaxFloat64, 123456789.125} {
		f.Add(math.Float64bits(v))
	}
	f.Fuzz(func(t *testing.T, bits uint64) {
		v := math.Float64frombits(bits)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return
		}
		s := lensNumber(v)
		back, err := strconv.ParseFloat(s, 64)
		if err != nil || back != v {
			t.Fatalf("lensNumber(%v) = %q reads back as %v, %v", v, s, back, err)
		}
		plain := !strings.ContainsRune(s, 'e')
		a := math.Abs(v)
		if want := a == 0 || a >= 1e-6 && a < 1e21; plain != want {
			t.Fatalf("lensNumber(%v) = %q: plain form %v, want %v", v, s, plain, want)
		}
		if strings.Contains(s, "e") && !strings.Contains(s, "e+") && !strings.Contains(s, "e-") {
			t.Fatalf("lensNumber(%v) = %q: exponent without sign", v, s)
		}
	})
}

func TestLensBare(t *testing.T) {
	tests := []struct {
		in   string
		bare bool
	}{
		{"hello world", true},
		{"2026-09-24T15:00:00Z", true},
		{"ana@example.com", true},
		{"a/b.c+d-e:(f) 'g'!?&%$#*=<>~^_", true},
		{"01", true}, // not the JSON number grammar: leading zero
		{"1.", true}, // not the JSON number grammar: no fraction digits
		{"+1", true}, // not the JSON number grammar: plus sign
		{"Infinity", true},
		{"", false},
		{" lead", false},
		{"trail ", false},
		{"-", false},
		{"true", false},
		{"false", false},
		{"null", false},
		{"123", false},
		{"-1.5e+3", false},
		{"0", false},
		{"1E5", false},
		{"a, b", false},
		{"café", false},
		{"a\"b", false},
		{"a\\b", false},
		{"semi;colon", false},
		{"[x]", false},
		{"{x}", false},
		{"a|b", false},
		{"back`tick", false},
		{"two\nlines", false},
	}
	for _, tt := range tests {
		if got := lensBare(tt.in); got != tt.bare {
			t.Errorf("lensBare(%q) = %v, want %v", tt.in, got, tt.bare)
		}
	}
}

// TestLensValue covers lean notation (§9.1) beyond the conformance vectors.
func TestLensValue(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"ok/top-empty-array", `[]`, `items: []`},
		{"ok/top-null", `null`, `-`},
		{"ok/top-number", `1e400`, `Infinity`},
		{"ok/top-quoted", `"123"`, `"123"`},
		{"ok/big-integer", `{"n":12345678901234567890}`, `n: 12345678901234567000`},
		{"ok/negative-zero", `{"n":-0}`, `n: 0`},
		{"ok/exponent-input", `{"n":1E2,"m":2.50e-1}`, "n: 100\nm: 0.25"},
		{"ok/underflow", `{"n":1e-400}`, `n: 0`},
		{"ok/overflow-compact-null", `{"l":[[1e400,{"a":1}]]}`, "l[1]:\n  - [null,{\"a\":1}]"},
		{"ok/escapes", `{"s":"tab\there\u0001\u001f\u007f"}`, "s: \"tab\\there\\u0001\\u001f\u007f\""},
		{"ok/slash-escape", `{"s":"a\/b"}`, `s: a/b`},
		{"ok/u2028-literal", `{"s":"a\u2028b"}`, "s: \"a\u2028b\""},
		{"ok/surrogate-pair", `{"s":"\ud83c\udf89"}`, "s: \"🎉\""},
		{"ok/lone-surrogate-kept", `{"s":"a\ud800b","l":[["\udc00"]]}`, "s: \"a\\ud800b\"\nl[1]:\n  - [\"\\udc00\"]"},
		{"ok/lone-surrogate-key", `{"\ud800":1}`, `"\ud800": 1`},
		{"ok/high-then-non-low", `{"s":"\ud800\u0041"}`, `s: "\ud800A"`},
		{"ok/key-rules", `{"123":1,"true":2,"a b":3,"é":4}`, "\"123\": 1\n\"true\": 2\na b: 3\n\"é\": 4"},
		{"ok/scalar-list-quoting", `{"l":["a, b",null,true,1.5,""]}`, `l: ["a, b", -, true, 1.5, ""]`},
		{"ok/table-quoted-keys", `{"t":[{"a b":1,"c,d":"x y"},{"a b":2,"c,d":null}]}`, "t[2]{a b,\"c,d\"}:\n  1,x y\n  2,-"},
		{"ok/table-needs-same-order", `{"t":[{"a":1,"b":2},{"b":3,"a":4}]}`, "t[2]:\n  - a: 1\n    b: 2\n  - b: 3\n    a: 4"},
		{"ok/table-needs-scalars", `{"t":[{"a":[1]},{"a":[2]}]}`, "t[2]:\n  - a: [1]\n  - a: [2]"},
		{"ok/empty-objects-not-table", `{"t":[{},{}]}`, "t[2]:\n  - {}\n  - {}"},
		{"ok/list-empty-array", `{"l":[[],{"a":1}]}`, "l[2]:\n  - []\n  - a: 1"},
		{"ok/list-nested-first-entry", `{"x":[{"a":{"b":1},"c":2},3]}`, "x[2]:\n  - a:\n      b: 1\n    c: 2\n  - 3"},
		{"ok/list-in-list-entry", `{"x":[{"a":[{"b":1},{"b":2}]},0]}`, "x[2]:\n  - a[2]{b}:\n      1\n      2\n  - 0"},
		{"ok/deep-object", `{"a":{"b":{"c":{}}}}`, "a:\n  b:\n    c: {}"},
		{"ok/top-array-mixed", `[1,{"a":1}]`, "items[2]:\n  - 1\n  - a: 1"},
		{"ok/index-like-keys-keep-order", `{"b":1,"2":2,"1":3}`, "b: 1\n\"2\": 2\n\"1\": 3"},
		{"ok/whitespace", " \t\r\n{ \"a\" : [ 1 , 2 ] }\n", `a: [1, 2]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Value([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Value(%s)\n got %q\nwant %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestLensValueRefuses(t *testing.T) {
	deep := strings.Repeat("[", maxLensDepth+1) + strings.Repeat("]", maxLensDepth+1)
	tests := []struct{ name, in string }{
		{"fail/empty", ``},
		{"fail/space-only", `  `},
		{"fail/unterminated-object", `{"a":1`},
		{"fail/trailing-comma-array", `[1,]`},
		{"fail/trailing-comma-object", `{"a":1,}`},
		{"fail/duplicate-key", `{"a":1,"b":2,"a":3}`},
		{"fail/duplicate-key-many", `{` + manyKeys(40) + `,"k7":0}`},
		{"fail/duplicate-escaped-key", `{"a":1,"\u0061":2}`},
		{"fail/leading-zero", `01`},
		{"fail/bare-dot", `1.`},
		{"fail/lone-minus", `-`},
		{"fail/plus", `+1`},
		{"fail/hex", `0x10`},
		{"fail/nan", `NaN`},
		{"fail/bad-literal", `tru`},
		{"fail/trailing-data", `1 2`},
		{"fail/raw-control", "\"a\tb\""},
		{"fail/bad-escape", `"\x41"`},
		{"fail/short-unicode-escape", `"\u12"`},
		{"fail/bad-second-escape", `"\ud800\uzzzz"`},
		{"fail/unterminated-string", `"abc`},
		{"fail/invalid-utf8", "\"a\xffb\""},
		{"fail/invalid-utf8-slow-path", "\"\\n\xc3\""},
		{"fail/invalid-utf8-before-escape", "\"\xff\\n\""},
		{"fail/encoded-surrogate", "\"\xed\xa0\x80\""},
		{"fail/encoded-surrogate-before-escape", "\"\xed\xa0\x80\\n\""},
		{"fail/bom", "\xef\xbb\xbf{}"},
		{"fail/single-quotes", `{'a':1}`},
		{"fail/too-deep", deep},
		{"fail/too-deep-objects", strings.Repeat(`{"a":`, maxLensDepth+1) + `1` + strings.Repeat(`}`, maxLensDepth+1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := Value([]byte(tt.in)); err == nil {
				t.Errorf("Value(%q) = %q, want an error", tt.in, got)
			}
		})
	}
	t.Run("ok/depth-at-limit", func(t *testing.T) {
		in := strings.Repeat("[", maxLensDepth) + strings.Repeat("]", maxLensDepth)
		if _, err := Value([]byte(in)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("ok/many-distinct-keys", func(t *testing.T) {
		if _, err := Value([]byte(`{` + manyKeys(1000) + `}`)); err != nil {
			t.Fatal(err)
		}
	})
}

func manyKeys(n int) string {
	var parts []string
	for i := range n {
		parts = append(parts, `"k`+strconv.Itoa(i)+`":0`)
	}
	return strings.Join(parts, ",")
}

// FuzzLensValue checks that LensValue never panics, refuses what is not JSON
// or not valid UTF-8, accepts JSON without duplicate keys that is valid UTF-8
// and not too deep, and always produces valid UTF-8.
func FuzzLensValue(f *testing.F) {
	for _, s := range []string{`{"a":[1,{"b":2}],"c":"x, y"}`, `[{"a":1},{"a":2}]`, `"\ud800"`, `1e999`, `{"a":1,"a":2}`, "\"\xff\"", `[[[]]]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := Value(data)
		if !json.Valid(data) {
			if err == nil {
				t.Fatalf("LensValue accepted invalid JSON %q", data)
			}
			return
		}
		if err == nil && !utf8.Valid(data) {
			t.Fatalf("LensValue accepted invalid UTF-8 %q", data)
		}
		if err != nil {
			if utf8.Valid(data) && !lensTestDuplicateOrDeep(data) {
				t.Fatalf("LensValue refused valid JSON %q: %v", data, err)
			}
			return
		}
		if !utf8.ValidString(out) {
			t.Fatalf("Value(%q) = %q: not valid UTF-8", data, out)
		}
	})
}

// lensTestDuplicateOrDeep reports whether valid JSON has a duplicate key in
// some object or nests deeper than maxLensDepth, by a decoder other than
// the one under test.
func lensTestDuplicateOrDeep(data []byte) bool {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	type frame struct {
		obj    bool
		keys   map[string]bool
		expect bool // next string token in an object is a key
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				if top != nil && top.obj {
					top.expect = true
				}
				stack = append(stack, &frame{obj: v == '{', keys: map[string]bool{}, expect: true})
				if len(stack) > maxLensDepth {
					return true
				}
			default:
				stack = stack[:len(stack)-1]
			}
			continue
		case string:
			if top != nil && top.obj && top.expect {
				if top.keys[v] {
					return true
				}
				top.keys[v] = true
				top.expect = false
				continue
			}
		}
		if top != nil && top.obj {
			top.expect = true
		}
	}
}
