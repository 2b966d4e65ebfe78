package keyd

import (
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/parley-keyd/parley-keyd/policies"
)

// consentLimits is the test policy with a consent rule that refuses costs
// above 500.00 USD and risk above medium, and wants a strong channel above
// 20.00 USD or low risk.
var consentLimits = strings.Replace(testPolicy, `[[consent]]
name = "ask-consent"
agents = ["*"]
channels = ["terminal"]
max_exp = "15m"`, `[[consent]]
name = "shop-limits"
agents = ["*"]
channels = ["terminal"]
max_exp = "15m"
deny_above_cost = "500.00USD"
deny_above_risk = "medium"
strong_above_cost = "20.00USD"
strong_above_risk = "low"`, 1)

// TestCaseVariantProposalRefused is issue 10 item 3 as filed: a 1000 USD,
// high-risk proposal with "Cost": null and "RISK": "low" added after the
// real fields. Go's encoding/json matches names without regard to case and
// lets the last one win, so the policy saw a free, low-risk proposal (it
// passed deny_above_cost and deny_above_risk and needed no strong channel)
// and the title said "free", while the hash and the detail lines covered
// 1000.00 USD and high. The proposal must be refused as invalid_params
// naming the field, and never reach the human.
func TestCaseVariantProposalRefused(t *testing.T) {
	pol, err := policies.Parse([]byte(consentLimits), "limits.toml")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(c *Config, o *Options) { o.Policy = pol })
	exp := time.Now().Unix() + 600
	prop := `{"id":"p_1","capability":"shop.order","summary":"Order 3 notebooks",` +
		`"effects":[{"op":"charge","target":"card/visa-4242","detail":"3 notebooks"}],` +
		`"cost":{"amount":100000,"currency":"USD"},"risk":"high","undo":null,"expires":` + itoa64(exp) +
		`,"Cost":null,"RISK":"low"}`
	hash, err := grant.ProposalHash([]byte(prop))
	if err != nil {
		t.Fatal(err)
	}
	c := h.client()
	evs := make(chan protocol.Event, 1)
	errc := make(chan error, 1)
	resc := make(chan *protocol.GrantResult, 1)
	go func() {
		r, err := c.Consent(ctxT(t), newAgentKey(t), "shop.example", consentFor(h.srv.Principal(), "p_1", hash, exp),
			json.RawMessage(prop), func(e protocol.Event) { evs <- e })
		resc <- r
		errc <- err
	}()
	select {
	case ev := <-evs:
		v := h.srv.Pending()[0]
		approveErr := h.client().Approve(ctxT(t), ev.Request, ev.Code, "terminal")
		<-resc
		t.Fatalf("the proposal reached the human: title %q, strong %v; approved: %v, then: %v\n%s",
			v.Title, v.Strong, approveErr, <-errc, v.Text)
	case err := <-errc:
		wantCode(t, err, protocol.CodeInvalidParams)
		if !strings.Contains(err.Error(), `"Cost"`) || !strings.Contains(err.Error(), `"cost"`) {
			t.Errorf("error %v does not name the field", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no answer")
	}
	if p := h.srv.Pending(); len(p) != 0 {
		t.Errorf("pending = %+v", p)
	}
	for _, rec := range auditRecords(t, h) {
		if rec.GrantID != "" {
			t.Errorf("a grant was issued: %+v", rec)
		}
	}
}

// TestStrictFrames sends, over the real socket, frames that have two
// readings under a lenient decoder: names in another case, duplicate
// names, invalid UTF-8. Each is refused with a message that names what is
// wrong, nothing is issued or queued, and the connection stays usable.
func TestStrictFrames(t *testing.T) {
	h := newHarness(t)
	agent := newAgentKey(t)
	holder := grant.FormatPublicKey(agent.Public().(ed25519.PublicKey))
	exp := time.Now().Unix() + 600
	prop, hash := proposalFor(t, "p_1", 4500, exp)
	principal := h.srv.Principal()
	consent := string(consentFor(principal, "p_1", hash, exp))
	// grantFrame signs a GRANT whose body is the given text as sent.
	grantFrame := func(id, body string) string {
		digest, err := protocol.GrantDigest([]byte(body))
		if err != nil {
			// The body is not canonicalizable (a duplicate name): a
			// proof over anything will do, the daemon must refuse first.
			digest = "x"
		}
		p, err := grant.MakeProof(agent, principal, protocol.ProofVerbGrant, digest, time.Now().Unix())
		if err != nil {
			t.Fatal(err)
		}
		pb, _ := json.Marshal(p)
		return `{"parley":1,"id":"` + id + `","verb":"GRANT","grant":` + body + `,"proof":` + string(pb) + "}\n"
	}
	consentFrame := func(id, consent, proposal string) string {
		p, err := grant.MakeProof(agent, principal, protocol.ProofVerbConsent, hash, time.Now().Unix())
		if err != nil {
			t.Fatal(err)
		}
		pb, _ := json.Marshal(p)
		return `{"parley":1,"id":"` + id + `","verb":"CONSENT","service":"shop.example","holder":"` + holder +
			`","consent":` + consent + `,"proposal":` + proposal + `,"proof":` + string(pb) + "}\n"
	}
	calBody := func(extra string) string {
		return `{"holder":"` + holder + `","caveats":[{"svc":["cal.example"]},{"can":["calendar.*"]}]` + extra + `}`
	}
	dupCost := strings.Replace(string(prop), `"cost":`, `"cost":null,"cost":`, 1)
	cases := []struct {
		name, send string
		code       protocol.Code
		re         string
		mention    []string
	}{
		{"fail/frame-verb-case", `{"parley":1,"id":"a","Verb":"HELLO"}` + "\n", protocol.CodeBadFrame, "", []string{`"Verb"`, `"verb"`}},
		{"fail/frame-id-case", `{"parley":1,"ID":"b","verb":"HELLO"}` + "\n", protocol.CodeBadFrame, "", []string{`"ID"`, `"id"`}},
		// A lenient decoder runs the last "verb": a GRANT that an earlier
		// reader took for a HELLO.
		{"fail/frame-verb-smuggled", `{"parley":1,"id":"c","verb":"HELLO","VERB":"GRANT"}` + "\n", protocol.CodeBadFrame, "", []string{`"VERB"`}},
		{"fail/frame-verb-twice", `{"parley":1,"id":"d","verb":"HELLO","verb":"GRANT"}` + "\n", protocol.CodeBadFrame, "", []string{`duplicate`, `"verb"`}},
		{"fail/frame-bad-utf8", "{\"parley\":1,\"id\":\"e\",\"verb\":\"HELLO\",\"pad\":\"\xff\"}\n", protocol.CodeBadFrame, "", []string{"UTF-8"}},
		{"fail/frame-trailing", `{"parley":1,"id":"f","verb":"HELLO"} {"x":1}` + "\n", protocol.CodeBadFrame, "", []string{"after"}},
		{"fail/grant-holder-twice", grantFrame("g", `{"holder":"`+holder+`","holder":"`+holder+`","caveats":[]}`), protocol.CodeBadFrame, "", []string{"duplicate", `"holder"`}},
		{"fail/grant-holder-case", grantFrame("h", `{"Holder":"`+holder+`","caveats":[]}`), protocol.CodeInvalidParams, "h", []string{`"Holder"`, `"holder"`}},
		{"fail/grant-caveat-case", grantFrame("i", `{"holder":"`+holder+`","caveats":[{"Can":["calendar.*"]}]}`), protocol.CodeInvalidParams, "i", []string{`"Can"`, `"can"`}},
		{"fail/grant-unknown-field", grantFrame("j", calBody(`,"admin":true`)), protocol.CodeInvalidParams, "j", []string{`"admin"`}},
		{"fail/consent-hash-case", consentFrame("k", strings.Replace(consent, `"hash":`, `"Hash":`, 1), string(prop)), protocol.CodeInvalidParams, "k", []string{`"Hash"`, `"hash"`}},
		{"fail/consent-frame-case", consentFrame("l", strings.Replace(consent, `"consent":`, `"Consent":`, 1), string(prop)), protocol.CodeInvalidParams, "l", []string{`"Consent"`}},
		{"fail/proposal-cost-twice", consentFrame("m", consent, dupCost), protocol.CodeBadFrame, "", []string{"duplicate", `"cost"`}},
		{"fail/proposals-frame-case", consentFrame("n", consent, `{"kind":"PROPOSALS","Proposals":[`+string(prop)+`]}`), protocol.CodeInvalidParams, "n", []string{`"Proposals"`}},
	}
	r := h.raw()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r.send(tc.send)
			f := r.read()
			for f.Kind == protocol.KindEvent {
				t.Errorf("queued for the human: %+v", f)
				for _, v := range h.srv.Pending() {
					h.srv.queue.decide(v.ID, false, "", Approval{Approver: "test", Channel: "terminal"})
				}
				f = r.read()
			}
			if f.Kind != protocol.KindError || f.Code != tc.code || f.Re != tc.re {
				t.Errorf("reply = %+v, want ERROR %s re %q", f, tc.code, tc.re)
			}
			for _, m := range tc.mention {
				if !strings.Contains(f.Message, m) {
					t.Errorf("message %q does not mention %s", f.Message, m)
				}
			}
			r.send(`{"parley":1,"id":"ok-` + tc.name + `","verb":"HELLO"}` + "\n")
			if f := r.read(); f.Kind != protocol.KindBrief || f.Re != "ok-"+tc.name {
				t.Errorf("after the bad frame: %+v", f)
			}
		})
	}
	for _, rec := range auditRecords(t, h) {
		if rec.GrantID != "" {
			t.Errorf("a grant was issued: %+v", rec)
		}
	}
}
