package grant

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMatchPattern(t *testing.T) {
	tests := []struct {
		pattern, capability string
		want                bool
	}{
		{"*", "anything.at.all", true},
		{"*", "", true},
		{"calendar.*", "calendar.find", true},
		{"calendar.*", "calendar.", true},
		{"calendar.*", "calendar.events.delete", true},
		{"calendar.*", "calendar", false},
		{"calendar.*", "calendarx.find", false},
		{"calendar", "calendar", true},
		{"calendar", "calendar.find", false},
		{"calendar.find", "calendar.findall", false},
		{"cal*", "calendar.find", true},
		{"a*b", "axb", false}, // only a trailing * is a wildcard
		{"a*b", "a*b", true},
		{"", "", true},
		{"", "x", false},
	}
	for _, tt := range tests {
		if got := matchPattern(tt.pattern, tt.capability); got != tt.want {
			t.Errorf("matchPattern(%q, %q) = %v, want %v", tt.pattern, tt.capability, got, tt.want)
		}
	}
}

func TestCaveatCheck(t *testing.T) {
	raw := func(name, v string) Caveat { return Caveat{Name: name, Value: json.RawMessage(v)} }
	ok := []Caveat{
		Svc("a"), Svc(), Verbs("ASK"), Can("*"), Exp(0), Nbf(-5), Per(Money{0, "USD"}),
		Spend(Money{1, "usd"}), Risk(riskLow), Risk(riskHigh), Only(""),
	}
	for _, c := range ok {
		if err := c.Check(); err != nil {
			t.Errorf("%s.Check() = %v", c, err)
		}
	}
	bad := []struct {
		name string
		c    Caveat
	}{
		{"fail/unknown", raw("region", `"eu"`)},
		{"fail/svc-string", raw("svc", `"a.example"`)},
		{"fail/svc-numbers", raw("svc", `[1]`)},
		{"fail/svc-null", raw("svc", `null`)},
		{"fail/verbs-object", raw("verbs", `{}`)},
		{"fail/can-nested", raw("can", `[["a"]]`)},
		{"fail/exp-string", raw("exp", `"tomorrow"`)},
		{"fail/exp-float", raw("exp", `1.5`)},
		{"fail/exp-unsafe", Exp(1 << 54)},
		{"fail/nbf-bool", raw("nbf", `true`)},
		{"fail/per-extra-key", raw("per", `{"currency":"USD","max":1,"x":1}`)},
		{"fail/per-missing-max", raw("per", `{"currency":"USD"}`)},
		{"fail/per-max-string", raw("per", `{"currency":"USD","max":"1"}`)},
		{"fail/per-not-canonical", raw("per", `{"max":1,"currency":"USD"}`)},
		{"fail/spend-number", raw("spend", `5000`)},
		{"fail/risk-extreme", Risk("extreme")},
		{"fail/risk-upper", Risk("LOW")},
		{"fail/risk-list", raw("risk", `["low"]`)},
		{"fail/only-number", raw("only", `1`)},
		{"fail/trailing", raw("only", `"a""b"`)},
		{"fail/list-too-long", Svc(make([]string, maxListLen+1)...)},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.c.Check(); err == nil {
				t.Errorf("%s.Check() = nil, want an error", tt.c)
			}
		})
	}
}

func TestCaveatJSON(t *testing.T) {
	cs := allCaveats()
	data, err := json.Marshal(cs)
	if err != nil {
		t.Fatal(err)
	}
	var back []Caveat
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(cs, back); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}

	var c Caveat
	if err := json.Unmarshal([]byte(`{ "per" : { "max" : 5, "currency" : "EUR" } }`), &c); err != nil {
		t.Fatal(err)
	}
	if c.Name != "per" || string(c.Value) != `{"currency":"EUR","max":5}` {
		t.Errorf("UnmarshalJSON kept %s = %s, want canonical", c.Name, c.Value)
	}
	for _, in := range []string{`{}`, `{"exp":1,"nbf":2}`, `["exp"]`, `{"exp":1.5}`, `{"exp":1,"exp":2}`} {
		if err := json.Unmarshal([]byte(in), &c); err == nil {
			t.Errorf("UnmarshalJSON(%s): no error", in)
		}
	}
	// A caveat built by hand with a non-canonical value marshals canonically.
	hand := Caveat{Name: "svc", Value: json.RawMessage(`[ "a" ]`)}
	if got := hand.String(); got != `{"svc":["a"]}` {
		t.Errorf("String() = %s", got)
	}
	// Constructors never produce invalid UTF-8.
	if got := Svc("\xff").String(); got != `{"svc":["`+"\uFFFD"+`"]}` {
		t.Errorf("Svc(invalid UTF-8) = %s", got)
	}
}

func TestCaveatValue(t *testing.T) {
	if v, err := CaveatValue[[]string](Can("a.*", "b")); err != nil || strings.Join(v, " ") != "a.* b" {
		t.Errorf("[]string: %q %v", v, err)
	}
	if v, err := CaveatValue[int64](Exp(1790000000)); err != nil || v != 1790000000 {
		t.Errorf("int64: %d %v", v, err)
	}
	if v, err := CaveatValue[Money](Per(Money{1250, "USD"})); err != nil || v != (Money{1250, "USD"}) {
		t.Errorf("Money: %v %v", v, err)
	}
	if v, err := CaveatValue[string](Risk("low")); err != nil || v != "low" {
		t.Errorf("string: %q %v", v, err)
	}
	// The value is read as the type asked for, whatever the kind.
	if _, err := CaveatValue[int64](Svc("a")); err == nil {
		t.Error("a list read as an integer: no error")
	}
	if _, err := CaveatValue[[]string](Caveat{Name: "svc", Value: []byte(`["a",1]`)}); err == nil {
		t.Error("a list with a number read as strings: no error")
	}
}

// TestCaveatAppendJSON checks that AppendJSON appends what MarshalJSON
// returns, canonicalizing a value that is not canonical, and leaves the
// text as it was when the value is not JSON.
func TestCaveatAppendJSON(t *testing.T) {
	for _, c := range append(allCaveats(), Caveat{Name: "x", Value: []byte(` { "b" : 1, "a" : [ 2 ] } `)}) {
		want, err := c.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.AppendJSON([]byte("[1,"))
		if err != nil || string(got) != "[1,"+string(want) {
			t.Errorf("%s: AppendJSON gave %q, %v; want %q", c.Name, got, err, "[1,"+string(want))
		}
	}
	bad := Caveat{Name: "x", Value: []byte(`{"a":`)}
	if got, err := bad.AppendJSON([]byte("[1,")); err == nil || string(got) != "[1," {
		t.Errorf("malformed value: AppendJSON gave %q, %v; want the text as it was and an error", got, err)
	}
}
