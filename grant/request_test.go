package grant

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestVerbs(t *testing.T) {
	if got := strings.Join(ParleyVerbs(), " "); got != "HELLO ASK INTENT COMMIT UNDO EXPAND" {
		t.Errorf("ParleyVerbs = %s", got)
	}
	if got := strings.Join(ParleyVerbs()[1:], " "); got != "ASK INTENT COMMIT UNDO EXPAND" {
		t.Errorf("the verbs with grants = %s", got)
	}
	// The lists are copies: a caller cannot change what others see.
	ParleyVerbs()[0] = "STEAL"
	if !isParleyVerb("HELLO") || isParleyVerb("STEAL") || isParleyVerb("ask") || isParleyVerb("") {
		t.Error("isParleyVerb")
	}
}

func TestValidPattern(t *testing.T) {
	tests := []struct {
		p    string
		want bool
	}{
		{"*", true}, {"a", true}, {"a.*", true}, {"a*", true},
		{"", false}, {"**", false}, {"a*b", false}, {"*a", false}, {"a.*.b", false},
	}
	for _, tt := range tests {
		name := "ok/" + tt.p
		if !tt.want {
			name = "fail/" + tt.p
		}
		t.Run(name, func(t *testing.T) {
			if got := ValidPattern(tt.p); got != tt.want {
				t.Errorf("ValidPattern(%q) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
}

func TestParseRequest(t *testing.T) {
	now := int64(testNow)
	r, err := ParseRequest([]Caveat{Svc("cal.example"), Verbs("ASK", "HELLO"), Can("calendar.*"), Nbf(now + 10), Exp(now + 60),
		Per(Money{100, "USD"}), Spend(Money{0, "EUR"}), Risk(riskLow)}, now)
	if err != nil {
		t.Fatal(err)
	}
	want := &Request{Svc: []string{"cal.example"}, Verbs: []string{"ASK", "HELLO"}, Can: []string{"calendar.*"},
		Exp: now + 60, Nbf: now + 10, Per: &Money{100, "USD"}, Spend: &Money{0, "EUR"}, Risk: riskLow}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("ParseRequest (-want +got):\n%s", diff)
	}
	if r, err := ParseRequest(nil, now); err != nil || !cmp.Equal(r, &Request{}) {
		t.Errorf("no caveats: %+v %v", r, err)
	}

	raw := func(name, value string) Caveat { return Caveat{Name: name, Value: json.RawMessage(value)} }
	many := make([]Caveat, MaxRequestCaveats+1)
	for i := range many {
		many[i] = Svc("s")
	}
	tests := []struct {
		name    string
		cavs    []Caveat
		reason  requestReason
		caveat  string
		message string
	}{
		{"fail/too-many", many, tooManyCaveats, "", "at most 16 caveats"},
		{"fail/unknown", []Caveat{raw("admin", "true")}, unknownCaveat, "admin", `unknown caveat "admin"`},
		// A name in another case is no caveat of §6.3; say which it
		// resembles.
		{"fail/case-variant", []Caveat{raw("Can", `["calendar.*"]`)}, unknownCaveat, "Can", `unknown caveat "Can": caveat names are matched exactly; did you mean "can"?`},
		{"fail/case-variant-long-s", []Caveat{raw("ſvc", `["a"]`)}, unknownCaveat, "ſvc", `did you mean "svc"?`},
		{"fail/malformed", []Caveat{raw("svc", `"a.example"`)}, malformedCaveat, "svc", `caveat "svc" is malformed`},
		{"fail/malformed-risk", []Caveat{Risk("extreme")}, malformedCaveat, "risk", "not low, medium or high"},
		{"fail/repeated", []Caveat{Exp(now + 60), Exp(now + 30)}, repeatedCaveat, "exp", `caveat "exp" appears twice`},
		{"fail/empty-svc", []Caveat{Svc()}, emptyList, "svc", "empty list"},
		{"fail/empty-can", []Caveat{Can()}, emptyList, "can", "empty list"},
		{"fail/not-a-verb", []Caveat{Verbs("ASK", "DELETE")}, notAVerb, "verbs", `verb "DELETE" is not a Parley verb (HELLO, ASK, INTENT, COMMIT, UNDO, EXPAND)`},
		{"fail/verb-lower-case", []Caveat{Verbs("ask")}, notAVerb, "verbs", `verb "ask"`},
		{"fail/pattern-star-inside", []Caveat{Can("cal.*.x")}, badPattern, "can", `"cal.*.x" must be a name`},
		{"fail/pattern-empty", []Caveat{Can("")}, badPattern, "can", `"" must be a name`},
		{"fail/exp-now", []Caveat{Exp(now)}, expiryPassed, "exp", "not in the future"},
		{"fail/nbf-after-exp", []Caveat{Nbf(now + 60), Exp(now + 60)}, nbfNotBeforeExp, "nbf", "nbf must be before exp"},
		{"fail/negative-per", []Caveat{Per(Money{-1, "USD"})}, negativeAmount, "per", "negative"},
		{"fail/negative-spend", []Caveat{Spend(Money{-5, "USD"})}, negativeAmount, "spend", "negative"},
		{"fail/only", []Caveat{Only("h")}, onlyNotAsked, "only", "consent grant"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRequest(tt.cavs, now)
			var re *requestError
			if !errors.As(err, &re) || r != nil {
				t.Fatalf("ParseRequest = %+v, %v; want a *requestError", r, err)
			}
			if re.Reason != tt.reason || re.Caveat != tt.caveat || !strings.Contains(re.Message, tt.message) {
				t.Errorf("error %+v, want reason %d, caveat %q, message with %q", re, tt.reason, tt.caveat, tt.message)
			}
		})
	}
}
