package grant

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

type strictInner struct {
	Op  string  `json:"op"`
	N   int64   `json:"n,omitempty"`
	F   float64 `json:"f"`
	Any any     `json:"any"`
}

type strictEmbedded struct {
	E      string `json:"e"`
	Shadow string `json:"shadow"` // hidden by strictTarget.Shadow
}

// strictTarget has a field of every kind the daemon decodes, and some more.
type strictTarget struct {
	strictEmbedded
	ID     string           `json:"id"`
	Cost   *Money           `json:"cost"`
	Items  []strictInner    `json:"items"`
	Map    map[string]int   `json:"map"`
	Raw    json.RawMessage  `json:"raw"`
	Num    json.Number      `json:"num"`
	Flag   bool             `json:"flag"`
	U8     uint8            `json:"u8"`
	Arr    [2]string        `json:"arr"`
	Any    any              `json:"any"`
	Cav    []Caveat         `json:"cav"`
	Ptr    *strictInner     `json:"ptr"`
	Shadow int              `json:"shadow"`
	Skip   string           `json:"-"`
	NoTag  string           // no tag: the Go name is the JSON name
	Nested map[string]Money `json:"nested"`
	unexp  string           // never set from JSON
}

func TestDecodeStrict(t *testing.T) {
	ok := `{"id":"p_1","cost":{"amount":100000,"currency":"USD"},"items":[{"op":"charge","n":3,"f":1.5,"any":{"x":[1,"y",null,true]}}],` +
		`"map":{"a":1,"A":2},"raw":{"keep":  [1, 2]},"num":12345678901234567890,"flag":true,"u8":255,"arr":["a","b","c"],` +
		`"any":9007199254740993,"cav":[{"can":["x.*"]}],"ptr":{"op":"p"},"e":"emb","shadow":7,"NoTag":"nt","nested":{"k":{"amount":1,"currency":"EUR"}},` +
		`"unknown":{"deep":[{"a":1}]},"-":"dash","Skip":"s","unexp":"u"}`
	var got strictTarget
	if err := DecodeStrict([]byte(ok), &got); err != nil {
		t.Fatal(err)
	}
	var want strictTarget
	dec := json.NewDecoder(strings.NewReader(ok))
	dec.UseNumber()
	if err := dec.Decode(&want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DecodeStrict = %+v\nencoding/json = %+v", got, want)
	}
	if got.Any != json.Number("9007199254740993") || string(got.Raw) != `{"keep":  [1, 2]}` || got.Arr != [2]string{"a", "b"} ||
		got.unexp != "" || got.Skip != "" {
		t.Errorf("got %+v", got)
	}

	tests := []struct {
		name, in string
		err      error  // a sentinel that errors.Is must find, or nil for any error
		path     string // jsonError.Path
		nameAt   string // jsonError.Name
		msg      string // in Error()
	}{
		// The attack: a second spelling of a field after the real
		// one. encoding/json takes the last, case-insensitively.
		{"fail/case-variant-after", `{"cost":{"amount":100000,"currency":"USD"},"Cost":null}`, errNameCase, "", "Cost", `name "Cost" differs only in case from "cost"`},
		{"fail/case-variant-alone", `{"ID":"p_1"}`, errNameCase, "", "ID", `"ID"`},
		{"fail/case-variant-nested", `{"items":[{"op":"a"},{"OP":"b"}]}`, errNameCase, "items[1]", "OP", `json: items[1]: name "OP"`},
		{"fail/case-variant-in-pointer", `{"cost":{"Amount":1,"currency":"USD"}}`, errNameCase, "cost", "Amount", `"Amount"`},
		{"fail/case-variant-no-tag", `{"notag":"x"}`, errNameCase, "", "notag", `"NoTag"`},
		{"fail/case-variant-embedded", `{"E":"x"}`, errNameCase, "", "E", `"e"`},
		// encoding/json folds these too: "ſ" (long s) folds with "s",
		// the Kelvin sign with "k".
		{"fail/long-s", `{"cav":[],"Shadow":1,"ſhadow":2}`, errNameCase, "", "Shadow", `"shadow"`},
		{"fail/duplicate", `{"id":"a","id":"b"}`, errDuplicateName, "", "id", `duplicate name "id"`},
		{"fail/duplicate-escaped", `{"id":"a","\u0069d":"b"}`, errDuplicateName, "", "id", `duplicate name "id"`},
		{"fail/duplicate-in-map", `{"map":{"a":1,"a":2}}`, errDuplicateName, "map", "a", `json: map: duplicate name "a"`},
		{"fail/duplicate-in-raw", `{"raw":{"cost":1,"x":{"cost":2,"cost":3}}}`, errDuplicateName, "raw.x", "cost", `json: raw.x: duplicate name "cost"`},
		{"fail/duplicate-in-unknown", `{"other":[{"a":1,"a":1}]}`, errDuplicateName, "other[0]", "a", ""},
		{"fail/duplicate-in-any", `{"any":{"a":{},"a":[]}}`, errDuplicateName, "any", "a", ""},
		{"fail/duplicate-in-caveat", `{"cav":[{"can":["a"],"can":["b"]}]}`, errDuplicateName, "cav[0]", "can", ""},
		{"fail/bad-utf8-value", "{\"id\":\"\xff\"}", errUTF8, "id", "", "json: id: string is not valid UTF-8"},
		{"fail/bad-utf8-name", "{\"\xc3\":1}", errUTF8, "", "", "not valid UTF-8"},
		{"fail/lone-surrogate", `{"id":"\ud800"}`, nil, "id", "", "lone surrogate"},
		{"fail/trailing", `{"id":"a"} {"id":"b"}`, nil, "", "", "data after the JSON value"},
		{"fail/trailing-garbage", `{"id":"a"}x`, nil, "", "", "data after the JSON value"},
		{"fail/empty", ``, nil, "", "", "unexpected end"},
		{"fail/type", `{"u8":256}`, nil, "u8", "", "json: u8: want an integer in range, not a JSON number 256"},
		{"fail/type-string", `{"flag":"true"}`, nil, "flag", "", "want true or false, not a JSON string"},
		{"fail/type-object", `{"id":{}}`, nil, "id", "", "want a string, not a JSON object"},
		{"fail/type-top", `[1]`, nil, "", "", "want an object, not a JSON array"},
		{"fail/too-deep", `{"any":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`, errTooDeep, "any[0][0][0][0][0][0][0]…", "", "nested too deeply"},
		{"fail/caveat-malformed", `{"cav":[{"a":1,"b":2}]}`, nil, "cav[0]", "", "exactly one key"},
		{"fail/not-json", `{id:1}`, nil, "", "", "want an object member name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v strictTarget
			err := DecodeStrict([]byte(tt.in), &v)
			var je *jsonError
			if !errors.As(err, &je) {
				t.Fatalf("DecodeStrict = %v, want a *jsonError", err)
			}
			if tt.err != nil && !errors.Is(err, tt.err) {
				t.Errorf("error %v is not %v", err, tt.err)
			}
			if je.Path != tt.path || je.Name != tt.nameAt {
				t.Errorf("path %q name %q, want %q %q", je.Path, je.Name, tt.path, tt.nameAt)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("message %q does not contain %q", err, tt.msg)
			}
		})
	}

	// The long s and the Kelvin sign do fold in encoding/json: refusing
	// them stops a real second reading.
	var lenient struct {
		Shadow int    `json:"shadow"`
		Kind   string `json:"kind"`
	}
	json.Unmarshal([]byte(`{"ſhadow":2,"\u212aind":"x"}`), &lenient)
	if lenient.Shadow != 2 || lenient.Kind != "x" {
		t.Errorf("encoding/json no longer folds ſ and K: %+v", lenient)
	}
	var strict struct {
		Kind string `json:"kind"`
	}
	if err := DecodeStrict([]byte(`{"\u212aind":"x"}`), &strict); !errors.Is(err, errNameCase) {
		t.Errorf("Kelvin sign: %v", err)
	}
}

func TestDecodeStrictKnown(t *testing.T) {
	var v struct {
		Holder  string   `json:"holder"`
		Caveats []Caveat `json:"caveats"`
	}
	if err := DecodeStrictKnown([]byte(`{"holder":"h","caveats":[]}`), &v); err != nil {
		t.Fatal(err)
	}
	err := DecodeStrictKnown([]byte(`{"holder":"h","caveats":[],"admin":true}`), &v)
	var je *jsonError
	if !errors.As(err, &je) || !errors.Is(err, errUnknownName) || je.Name != "admin" || !strings.Contains(err.Error(), `unknown name "admin"`) {
		t.Errorf("unknown name: %v", err)
	}
	// A map takes any name; only duplicates are refused.
	var m map[string]json.RawMessage
	if err := DecodeStrictKnown([]byte(`{"a":1,"A":2}`), &m); err != nil || len(m) != 2 {
		t.Errorf("map: %v %v", m, err)
	}
}

func TestDecodeStrictArguments(t *testing.T) {
	var s strictTarget
	for _, v := range []any{nil, s, (*strictTarget)(nil)} {
		if err := DecodeStrict([]byte(`{}`), v); err == nil {
			t.Errorf("DecodeStrict into %T: no error", v)
		}
	}
	var withString struct {
		N int `json:"n,string"`
	}
	if err := DecodeStrict([]byte(`{"n":"1"}`), &withString); err == nil || !strings.Contains(err.Error(), ",string") {
		t.Errorf(",string option: %v", err)
	}
	var stringer struct{ S error }
	if err := DecodeStrict([]byte(`{"S":1}`), &stringer); err == nil {
		t.Error("a non-empty interface: no error")
	}
}

// FuzzDecodeStrict checks that DecodeStrict never panics, that whatever
// it accepts encoding/json (with UseNumber) accepts too and reads the same
// way, and that whatever encoding/json accepts it accepts too, unless the
// input has a duplicate name, a name in another case, invalid UTF-8, a lone
// surrogate or deeper nesting: the leniencies it exists to refuse.
func FuzzDecodeStrict(f *testing.F) {
	for _, s := range []string{
		`{"id":"p_1","cost":{"amount":1,"currency":"USD"},"items":[{"op":"a","f":-1.5e3,"any":[{},[],"s",0]}]}`,
		`{"map":{"a":1},"raw":[1,{"b":null}],"num":"12.5","flag":false,"u8":7,"arr":["x"],"any":{"k":1}}`,
		`{"cav":[{"exp":1790000000},{"svc":["a"]}],"ptr":null,"e":"x","shadow":1,"NoTag":"y","nested":{}}`,
		`{"cost":{"amount":100000,"currency":"USD"},"Cost":null}`,
		`{"id":"a","id":"b"}`, `{"ſhadow":1}`, "{\"id\":\"\xff\"}", `{"id":"\ud83c\udf89 \u00e9"}`, `null`, `[1]`, ` {} `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var a, b strictTarget
		errS := DecodeStrict(in, &a)
		dec := json.NewDecoder(bytes.NewReader(in))
		dec.UseNumber()
		errJ := dec.Decode(&b)
		if errJ == nil && len(bytes.TrimLeft(in[dec.InputOffset():], " \t\r\n")) != 0 {
			errJ = errors.New("trailing data")
		}
		if errS == nil {
			if errJ != nil {
				t.Fatalf("DecodeStrict accepts what encoding/json refuses (%v): %q", errJ, in)
			}
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("readings differ for %q:\nstrict %+v\n  json %+v", in, a, b)
			}
			return
		}
		var je *jsonError
		if !errors.As(errS, &je) {
			t.Fatalf("error %v is not a *jsonError", errS)
		}
		if errJ == nil && !errors.Is(errS, errDuplicateName) && !errors.Is(errS, errNameCase) && !errors.Is(errS, errUTF8) &&
			!errors.Is(errS, errTooDeep) && !strings.Contains(errS.Error(), "lone surrogate") && utf8.Valid(in) {
			t.Fatalf("DecodeStrict refuses what encoding/json accepts (%v): %q", errS, in)
		}
	})
}

// BenchmarkDecodeStrict compares DecodeStrict with encoding/json (the
// floor, in the same run) on a small frame-like object and on one that
// carries a 1 MiB member kept raw, the worst a frame can hold.
func BenchmarkDecodeStrict(b *testing.B) {
	inputs := []struct{ name, in string }{
		{"small", `{"id":"p_1","cost":{"amount":1,"currency":"USD"},"flag":true,"raw":{"a":[1,2,3]},"items":[{"op":"x","n":2}]}`},
		{"raw-1MiB", `{"id":"p_1","raw":[` + strings.Repeat(`{"a":1},`, 1<<17) + `0]}`},
	}
	for _, in := range inputs {
		data := []byte(in.in)
		b.Run("strict/"+in.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				var v strictTarget
				if err := DecodeStrict(data, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("encoding-json/"+in.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				var v strictTarget
				if err := json.Unmarshal(data, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
