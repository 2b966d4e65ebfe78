package grant

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

const proposalJSON = `{
  "id": "p_7Hc2", "capability": "shop.order", "summary": "Buy one <mug>",
  "effects": [
    {"op":"charge","target":"card/visa-1","detail":"12.50 USD"},
    {"op":"update","target":"cart","field":"items","from":1,"to":null}
  ],
  "cost": {"amount": 1250, "currency": "USD"}, "risk": "medium", "undo": {"window": 3600},
  "expires": 1790000600, "data": {"weight": 0.35}
}`

func TestParseProposal(t *testing.T) {
	p, err := ParseProposal([]byte(proposalJSON))
	if err != nil {
		t.Fatal(err)
	}
	want := &Proposal{
		ID: "p_7Hc2", Capability: "shop.order", Summary: "Buy one <mug>",
		Effects: []Effect{
			{Op: "charge", Target: "card/visa-1", Detail: "12.50 USD"},
			{Op: "update", Target: "cart", Field: "items", From: json.Number("1")},
		},
		Cost: &Money{1250, "USD"}, Risk: riskMedium, Undo: &Undo{Window: 3600}, Expires: 1790000600,
		Data: json.RawMessage(`{"weight": 0.35}`),
	}
	if diff := cmp.Diff(want, p, cmpopts.IgnoreUnexported(Proposal{})); diff != "" {
		t.Errorf("ParseProposal (-want +got):\n%s", diff)
	}
	if p.Cost == nil || p.Risk != riskMedium {
		t.Errorf("cost %v, risk %q", p.Cost, p.Risk)
	}

	replace := func(old, new string) string {
		if !strings.Contains(proposalJSON, old) {
			t.Fatalf("fixture lacks %q", old)
		}
		return strings.Replace(proposalJSON, old, new, 1)
	}
	bad := []struct{ name, in string }{
		{"fail/not-object", `[]`},
		{"fail/no-id", replace(`"id": "p_7Hc2",`, ``)},
		{"fail/empty-capability", replace(`"shop.order"`, `""`)},
		{"fail/summary-number", replace(`"Buy one <mug>"`, `5`)},
		{"fail/effects-missing", replace(`"effects": [`, `"effectz": [`)},
		{"fail/op-unknown", replace(`"op":"charge"`, `"op":"explode"`)},
		{"fail/target-missing", replace(`"target":"cart",`, ``)},
		{"fail/from-object", replace(`"from":1`, `"from":{"a":1}`)},
		{"fail/from-float", replace(`"from":1`, `"from":1.5`)},
		{"fail/detail-number", replace(`"detail":"12.50 USD"`, `"detail":12`)},
		{"fail/cost-missing", replace(`"cost": {"amount": 1250, "currency": "USD"},`, ``)},
		{"fail/cost-float", replace(`"amount": 1250`, `"amount": 12.5`)},
		{"fail/cost-string", replace(`{"amount": 1250, "currency": "USD"}`, `"12.50 USD"`)},
		{"fail/risk-unknown", replace(`"risk": "medium"`, `"risk": "extreme"`)},
		{"fail/undo-negative", replace(`"window": 3600`, `"window": -1`)},
		{"fail/undo-missing", replace(`"undo": {"window": 3600},`, ``)},
		{"fail/expires-string", replace(`"expires": 1790000600`, `"expires": "soon"`)},
		{"fail/duplicate-key", replace(`"risk": "medium"`, `"risk": "low", "risk": "medium"`)},
		{"fail/hash-number", replace(`"expires": 1790000600`, `"expires": 1790000600, "hash": 5`)},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseProposal([]byte(tt.in)); err == nil {
				t.Error("ParseProposal: no error")
			}
		})
	}
	// A float in data is fine: data is not hashed (§5.1).
	if _, err := ProposalHash([]byte(proposalJSON)); err != nil {
		t.Errorf("ProposalHash with a float in data: %v", err)
	}
	// Unknown fields are ignored but hashed.
	h1, _ := ProposalHash([]byte(proposalJSON))
	h2, err := ProposalHash([]byte(replace(`"risk"`, `"x": 1, "risk"`)))
	if err != nil || h1 == h2 {
		t.Errorf("an unknown field does not change the hash: %s %s %v", h1, h2, err)
	}
}

func TestCheckConsent(t *testing.T) {
	raw := []byte(proposalJSON)
	hash, err := ProposalHash(raw)
	if err != nil {
		t.Fatal(err)
	}
	good := ConsentRequest{
		Proposal: "p_7Hc2", Hash: hash, Service: "shop.example", Capability: "shop.order",
		Principal: principalPub, Summary: "anything the service writes", Expires: 1790000600,
	}
	withHash := []byte(strings.Replace(proposalJSON, `"expires"`, `"hash": "`+hash+`", "expires"`, 1))
	wrongHashField := []byte(strings.Replace(proposalJSON, `"expires"`, `"hash": "bogus", "expires"`, 1))
	// The service swaps effects after the agent received the proposal:
	// the hash no longer matches.
	swapped := []byte(strings.Replace(proposalJSON, "card/visa-1", "card/other", 1))

	tests := []struct {
		name     string
		mutate   func(*ConsentRequest)
		raw      []byte
		service  string
		now      int64
		wantCode string
	}{
		{name: "ok/matching", now: testNow},
		{name: "ok/with-hash-field", raw: withHash, now: testNow},
		{name: "ok/consent-expires-before-proposal", mutate: func(c *ConsentRequest) { c.Expires = testNow + 60 }, now: testNow},
		{name: "fail/hash-mismatch", mutate: func(c *ConsentRequest) { c.Hash = "3YBSE3lWje0kWnzf3PaGMr3CI3aoO1qdYRLxUkmOJVU" }, now: testNow, wantCode: codeConflict},
		{name: "fail/effects-swapped", raw: swapped, now: testNow, wantCode: codeConflict},
		{name: "fail/hash-field-lies", raw: wrongHashField, now: testNow, wantCode: codeConflict},
		{name: "fail/other-proposal-id", mutate: func(c *ConsentRequest) { c.Proposal = "p_other" }, now: testNow, wantCode: codeConflict},
		{name: "fail/other-service", service: "evil.example", now: testNow, wantCode: codeConflict},
		{name: "fail/other-capability", mutate: func(c *ConsentRequest) { c.Capability = "shop.refund" }, now: testNow, wantCode: codeConflict},
		{name: "fail/outlives-proposal", mutate: func(c *ConsentRequest) { c.Expires = 1790000601 }, now: testNow, wantCode: codeConflict},
		{name: "fail/proposal-expired", now: 1790000600, wantCode: codeExpired},
		{name: "fail/request-expired", mutate: func(c *ConsentRequest) { c.Expires = testNow }, now: testNow, wantCode: codeExpired},
		{name: "fail/malformed-proposal", raw: []byte(`{"id":"p_7Hc2"}`), now: testNow, wantCode: codeInvalidParams},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			if tt.mutate != nil {
				tt.mutate(&c)
			}
			r := raw
			if tt.raw != nil {
				r = tt.raw
			}
			svc := "shop.example"
			if tt.service != "" {
				svc = tt.service
			}
			p, err := ParseProposal(r)
			if err == nil {
				err = CheckConsent(c, svc, p, tt.now)
			} else {
				err = &Error{Code: codeInvalidParams, Message: err.Error()}
			}
			if tt.wantCode == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if codeOf(err) != tt.wantCode {
				t.Errorf("CheckConsent = %v, want %s", err, tt.wantCode)
			}
			if err != nil && strings.Contains(err.Error(), hash) {
				t.Errorf("error reveals the correct hash: %v", err)
			}
		})
	}
}

// TestParseProposalOneReading is issue 10 item 3: a second spelling of a
// field, in another case, after the real one. encoding/json reads the last
// spelling case-insensitively, so a policy that decoded with it saw a free,
// low-risk proposal, while the hash and the display covered the real cost.
// ParseProposal refuses the proposal and names the field.
func TestParseProposalOneReading(t *testing.T) {
	attack := strings.Replace(proposalJSON, `"expires": 1790000600,`, `"expires": 1790000600, "Cost": null, "RISK": "low",`, 1)
	var lenient Proposal
	dec := json.NewDecoder(strings.NewReader(attack))
	dec.UseNumber()
	if err := dec.Decode(&lenient); err != nil || lenient.Cost != nil || lenient.Risk != riskLow {
		t.Fatalf("encoding/json reads the attack differently than expected: %+v %v", lenient, err)
	}
	// The hash covers both spellings, so a service could have signed it.
	if _, err := ProposalHash([]byte(attack)); err != nil {
		t.Fatal(err)
	}
	_, err := ParseProposal([]byte(attack))
	var je *jsonError
	if !errors.As(err, &je) || !errors.Is(err, errNameCase) || je.Name != "Cost" || je.Known != "cost" {
		t.Fatalf("ParseProposal = %v, want errNameCase for \"Cost\"", err)
	}
	if !strings.Contains(err.Error(), `"Cost"`) || !strings.Contains(err.Error(), `"cost"`) {
		t.Errorf("message %q does not name the field", err)
	}
	for _, tt := range []struct{ name, old, new, path, field string }{
		{"risk", `"risk": "medium"`, `"risk": "medium", "RISK": "low"`, "", "RISK"},
		{"effect-op", `"op":"charge"`, `"op":"charge","Op":"other"`, "effects[0]", "Op"},
		{"cost-amount", `"amount": 1250`, `"amount": 1250, "Amount": 0`, "cost", "Amount"},
		{"undo-window", `"window": 3600`, `"window": 3600, "WINDOW": 0`, "undo", "WINDOW"},
		{"long-s-summary", `"summary"`, `"ſummary": "free", "summary"`, "", "ſummary"},
		{"duplicate", `"risk": "medium"`, `"risk": "medium", "risk": "low"`, "", "risk"},
		{"duplicate-in-data", `{"weight": 0.35}`, `{"weight": 0.35, "weight": 0}`, "data", "weight"},
	} {
		t.Run("fail/"+tt.name, func(t *testing.T) {
			_, err := ParseProposal([]byte(strings.Replace(proposalJSON, tt.old, tt.new, 1)))
			var je *jsonError
			if !errors.As(err, &je) || je.Path != tt.path || je.Name != tt.field {
				t.Errorf("ParseProposal = %#v, want a name error at %q for %q", err, tt.path, tt.field)
			}
		})
	}
}

func TestProposalKeepsItsHash(t *testing.T) {
	raw := strings.Replace(proposalJSON, `"expires"`, `"hash": "claimed", "x-unknown": [1, {"b": 2}], "expires"`, 1)
	p, err := ParseProposal([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	h, err := ProposalHash([]byte(raw))
	hashed, ph := p.Hashed()
	if err != nil || ph != h {
		t.Fatalf("Hashed's hash %q, ProposalHash %q %v", ph, h, err)
	}
	c, err := CanonicalizeJSON(hashed)
	if err != nil || string(c) != string(hashed) || strings.Contains(string(c), `"data"`) || strings.Contains(string(c), "claimed") ||
		!strings.Contains(string(c), `"x-unknown":[1,{"b":2}]`) {
		t.Errorf("Hashed's bytes = %s (%v)", hashed, err)
	}
	// Caveats see the computed hash, not the claimed one.
	if got := p.caveatHash(); got != h || p.Hash != "claimed" {
		t.Errorf("caveatHash() = %q, Hash = %q", got, p.Hash)
	}
	// A Proposal not made by ParseProposal has no hash to check against.
	if err := CheckConsent(ConsentRequest{Hash: h}, "s", &Proposal{ID: "p_7Hc2"}, testNow); codeOf(err) != codeInvalidParams {
		t.Errorf("CheckConsent of a hand-made proposal: %v", err)
	}
}

// FuzzParseProposal checks that ParseProposal never panics and that one
// parse gives one reading: the hash is ProposalHash's, the display is
// DisplayProposal of the hashed bytes, and the fields are what DecodeStrict
// (and, for exact names, encoding/json) reads into a Proposal.
func FuzzParseProposal(f *testing.F) {
	f.Add([]byte(proposalJSON))
	f.Add([]byte(strings.Replace(proposalJSON, `"expires": 1790000600,`, `"expires": 1790000600, "Cost": null, "RISK": "low",`, 1)))
	f.Add([]byte(`{"id":"a","capability":"c","summary":"","effects":[],"cost":null,"risk":"low","undo":null,"expires":0,"data":1.5}`))
	f.Add([]byte(`{"id":"a","capability":"c","summary":"s\u0000\n","effects":[{"op":"other","target":"","from":true,"to":"x"}],"cost":{"amount":-1,"currency":""},"risk":"high","undo":{"window":0},"expires":-9007199254740991,"hash":""}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		p, err := ParseProposal(in)
		if err != nil {
			return
		}
		h, err := ProposalHash(in)
		if _, ph := p.Hashed(); err != nil || h != ph {
			t.Fatalf("ProposalHash %q %v, Hashed's hash %q", h, err, ph)
		}
		var q Proposal
		if err := DecodeStrict(in, &q); err != nil {
			t.Fatalf("DecodeStrict refuses what ParseProposal accepts: %v", err)
		}
		if diff := cmp.Diff(&q, p, cmpopts.IgnoreUnexported(Proposal{}), cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("ParseProposal and DecodeStrict read differently (-strict +parse):\n%s", diff)
		}
	})
}
