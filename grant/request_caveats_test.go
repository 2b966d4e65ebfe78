package grant

import (
	"reflect"
	"testing"
)

// TestRequestCaveats: a request's caveats come in the order the daemon has
// always signed them (svc, verbs, can, nbf, exp, per, spend, risk), hold
// only what it restricts, and read back as the same request.
func TestRequestCaveats(t *testing.T) {
	const now = 1_790_000_000
	if got := (Request{}).Caveats(); got != nil {
		t.Errorf("an empty request has caveats %v", got)
	}
	per, spend := Money{Amount: 100, Currency: "USD"}, Money{Amount: 500, Currency: "USD"}
	r := Request{Svc: []string{"cal.example"}, Verbs: []string{"ASK", "COMMIT"}, Can: []string{"calendar.*"},
		Nbf: now + 10, Exp: now + 600, Per: &per, Spend: &spend, Risk: "low"}
	want := []Caveat{Svc("cal.example"), Verbs("ASK", "COMMIT"), Can("calendar.*"), Nbf(now + 10), Exp(now + 600),
		Per(per), Spend(spend), Risk("low")}
	got := r.Caveats()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("caveats %v, want %v", got, want)
	}
	back, err := ParseRequest(got, now)
	if err != nil || !reflect.DeepEqual(*back, r) {
		t.Errorf("read back as %+v, %v; want %+v", back, err, r)
	}
	only := Request{Exp: now + 60}
	if got := only.Caveats(); !reflect.DeepEqual(got, []Caveat{Exp(now + 60)}) {
		t.Errorf("an expiry alone gives %v", got)
	}
}
