package lens

import (
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/grant"
)

// hashedProposal is a proposal with a claimed hash, an unknown member and
// data, none of which may change what Display shows but the unknown member.
const hashedProposal = `{
  "id": "p_7Hc2", "capability": "shop.order", "summary": "Buy one <mug>",
  "effects": [
    {"op":"charge","target":"card/visa-1","detail":"12.50 USD"},
    {"op":"update","target":"cart","field":"items","from":1,"to":null}
  ],
  "cost": {"amount": 1250, "currency": "USD"}, "risk": "medium", "undo": {"window": 3600},
  "hash": "claimed", "x-unknown": [1, {"b": 2}],
  "expires": 1790000600, "data": {"weight": 0.35}
}`

// TestDisplayShowsWhatTheHashCovers: the display of a parsed proposal is
// DisplayProposal of the bytes its hash covers, with no reading of its own;
// it shows the cost and never data.
func TestDisplayShowsWhatTheHashCovers(t *testing.T) {
	p, err := grant.ParseProposal([]byte(hashedProposal))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Display(p, 40)
	if err != nil {
		t.Fatal(err)
	}
	hashed, _ := p.Hashed()
	want, err := DisplayProposal(hashed, 40)
	if err != nil || got != want {
		t.Errorf("Display:\n%s\nDisplayProposal of the hashed bytes:\n%s (%v)", got, want, err)
	}
	if strings.Contains(got, "weight") || strings.Contains(got, "claimed") || !strings.Contains(got, "12.50 USD") {
		t.Errorf("Display shows data or the claimed hash, or lacks the cost:\n%s", got)
	}
	if _, err := Display(&grant.Proposal{}, 0); err == nil {
		t.Error("Display of a hand-made proposal: no error")
	}
}

// FuzzDisplay: for every proposal ParseProposal accepts, Display succeeds
// and equals DisplayProposal of the hashed bytes.
func FuzzDisplay(f *testing.F) {
	f.Add([]byte(hashedProposal))
	f.Add([]byte(`{"id":"a","capability":"c","summary":"s\u0000\n","effects":[{"op":"other","target":"","from":true,"to":"x"}],"cost":{"amount":-1,"currency":""},"risk":"high","undo":{"window":0},"expires":-9007199254740991,"hash":""}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		p, err := grant.ParseProposal(in)
		if err != nil {
			return
		}
		got, err1 := Display(p, 30)
		hashed, _ := p.Hashed()
		want, err2 := DisplayProposal(hashed, 30)
		if err1 != nil || err2 != nil || got != want {
			t.Fatalf("Display differs:\n%s\n%s\n%v %v", got, want, err1, err2)
		}
	})
}
