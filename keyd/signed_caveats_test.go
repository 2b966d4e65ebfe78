package keyd

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

var updateSigned = flag.Bool("update-signed", false, "rewrite testdata/signed_caveats.txt from the daemon's replies")

// signedPolicy has a rule for every caveat kind the daemon signs: a clamping
// rule that adds verbs, risk, per and a default lifetime, one that allows
// money, a deny rule and an ask rule for the rest.
const signedPolicy = `
version = 1
[[agent]]
name = "tester"
any = true
rate = 100000
pending = 4

[[rule]]
name = "no-bank"
agents = ["*"]
action = "deny"
can = ["bank.*"]

[[rule]]
name = "cal-auto"
agents = ["tester"]
action = "auto"
svc = ["cal.example"]
verbs = ["ASK", "INTENT", "COMMIT"]
can = ["calendar.*"]
max_exp = "1h"
default_exp = "10m"
risk = "low"
per = "0.00USD"
on_exceed = "clamp"

[[rule]]
name = "shop-auto"
agents = ["tester"]
action = "auto"
svc = ["shop.example"]
can = ["shop.*"]
per = "20.00USD"
spend = "100.00USD"
max_exp = "2h"

[[rule]]
name = "fallback"
agents = ["*"]
action = "ask"
max_exp = "1h"
per = "0.00USD"
channels = ["terminal"]
`

// TestSignedCaveatsUnchanged sends a table of GRANT and EXPLAIN requests at
// a fixed clock and compares, byte for byte, EXPLAIN's reply and the
// caveats a GRANT is issued with (its reply and its audit record) to
// testdata/signed_caveats.txt, written from the daemon before the policy
// took grant.Request (af2880d). A change to how a request is read, decided
// or turned into caveats shows here.
func TestSignedCaveatsUnchanged(t *testing.T) {
	now := time.Unix(1_790_000_000, 0)
	h := newHarness(t, func(c *Config, o *Options) {
		o.Policy = mustPolicy(t, signedPolicy)
		o.Now = func() time.Time { return now }
	})
	n := now.Unix()
	usd := func(cents int64) grant.Money { return grant.Money{Amount: cents, Currency: "USD"} }
	cases := [][]grant.Caveat{
		nil,
		{grant.Svc("cal.example"), grant.Can("calendar.find")},
		{grant.Svc("cal.example"), grant.Verbs("ASK"), grant.Can("calendar.find", "calendar.list"), grant.Nbf(n + 10), grant.Exp(n + 600)},
		{grant.Exp(n + 600), grant.Can("calendar.find"), grant.Svc("cal.example")},
		{grant.Svc("cal.example"), grant.Can("calendar.find"), grant.Exp(n + 7200)},
		{grant.Svc("cal.example"), grant.Can("calendar.find"), grant.Risk("high")},
		{grant.Svc("cal.example"), grant.Can("calendar.find"), grant.Risk("low"), grant.Per(usd(0))},
		{grant.Svc("cal.example"), grant.Can("calendar.find"), grant.Per(usd(500))},
		{grant.Svc("cal.example", "shop.example"), grant.Can("calendar.*", "mail.read")},
		{grant.Svc("cal.example"), grant.Verbs("ASK", "UNDO"), grant.Can("calendar.find")},
		{grant.Svc("cal.example"), grant.Can("calendar.find"), grant.Per(grant.Money{Amount: 1, Currency: "EUR"})},
		{grant.Svc("cal.example"), grant.Can("calendar.find"), grant.Nbf(n + 7200)},
		{grant.Svc("shop.example"), grant.Can("shop.buy"), grant.Per(usd(1000)), grant.Spend(usd(5000)), grant.Exp(n + 3600)},
		{grant.Svc("shop.example"), grant.Can("shop.buy")},
		{grant.Svc("shop.example"), grant.Can("shop.buy"), grant.Per(usd(3000))},
		{grant.Can("bank.transfer")},
		{grant.Can("notes.read")},
		{grant.Svc("notes.example"), grant.Verbs("COMMIT"), grant.Can("notes.*"), grant.Risk("medium"), grant.Exp(n + 60)},
		{grant.Can("calendar.find"), grant.Exp(n)},
		{grant.Can("calendar.find"), grant.Can("calendar.list")},
		{grant.Svc()},
		{grant.Verbs("STEAL")},
		{grant.Can("calendar.find"), grant.Nbf(n + 100), grant.Exp(n + 50)},
		{grant.Can("calendar.find"), grant.Per(usd(-1))},
	}
	raw := []string{
		`[{"Can":["calendar.find"]}]`,
		`[{"admin":true}]`,
		`[{"only":{"effects":["x"]}}]`,
	}
	var bodies []json.RawMessage
	for _, cavs := range cases {
		holder := grant.FormatPublicKey(signedKey().Public().(ed25519.PublicKey))
		b, err := json.Marshal(protocol.GrantBody{Holder: holder, Caveats: cavs})
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	for _, r := range raw {
		holder := grant.FormatPublicKey(signedKey().Public().(ed25519.PublicKey))
		bodies = append(bodies, json.RawMessage(`{"holder":"`+holder+`","caveats":`+r+`}`))
	}
	caller := Caller{Identity: selfIdentity(t), Roles: Roles{Agent: true}}
	var out bytes.Buffer
	for i, body := range bodies {
		fmt.Fprintf(&out, "# %d %s\n", i, body)
		reply, err := h.srv.Handle(context.Background(), caller, &protocol.Frame{Verb: protocol.VerbExplain, Grant: body}, nil)
		var ex struct{ Action string }
		if err != nil {
			fmt.Fprintf(&out, "EXPLAIN %s\n", errLine(err))
		} else {
			fmt.Fprintf(&out, "EXPLAIN %s\n", reply.Data)
			if err := json.Unmarshal(reply.Data, &ex); err != nil {
				t.Fatal(err)
			}
		}
		auto := ex.Action == "auto"
		if err != nil || ex.Action == "ask" {
			// An ask would wait for a human; EXPLAIN says what it would sign.
			continue
		}
		digest, err := protocol.GrantDigest(body)
		if err != nil {
			t.Fatal(err)
		}
		proof, err := grant.MakeProof(signedKey(), h.srv.Principal(), protocol.ProofVerbGrant, digest, n)
		if err != nil {
			t.Fatal(err)
		}
		reply, err = h.srv.Handle(context.Background(), caller, &protocol.Frame{Verb: protocol.VerbGrant, Grant: body, Proof: &proof}, nil)
		if err != nil {
			if auto {
				t.Errorf("case %d: EXPLAIN says auto, GRANT refused: %v", i, err)
			}
			fmt.Fprintf(&out, "GRANT %s\n", errLine(err))
			continue
		}
		var res protocol.GrantResult
		if err := json.Unmarshal(reply.Data, &res); err != nil {
			t.Fatal(err)
		}
		cavs, err := json.Marshal(res.Caveats)
		if err != nil {
			t.Fatal(err)
		}
		tok, err := grant.Decode(res.Token)
		if err != nil {
			t.Fatal(err)
		}
		signed, err := json.Marshal(tok.Blocks[0].Caveats)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(signed, cavs) {
			t.Errorf("case %d: the token carries %s, the reply says %s", i, signed, cavs)
		}
		rec := grantRecord(t, h, res.GrantID)
		fmt.Fprintf(&out, "GRANT %s expires %d decision %s rule %s narrowed %q\nRECORD %s %s %d %q\n",
			signed, res.Expires, res.Decision, res.Rule, res.Narrowed, rec.Kind, rec.Issued, rec.Expiry, rec.Message)
	}
	golden := filepath.Join("testdata", "signed_caveats.txt")
	if *updateSigned {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		gotLines, wantLines := bytes.Split(out.Bytes(), []byte("\n")), bytes.Split(want, []byte("\n"))
		for i := range max(len(gotLines), len(wantLines)) {
			var g, w []byte
			if i < len(gotLines) {
				g = gotLines[i]
			}
			if i < len(wantLines) {
				w = wantLines[i]
			}
			if !bytes.Equal(g, w) {
				t.Errorf("line %d:\n got %s\nwant %s", i+1, g, w)
			}
		}
	}
}

// signedKey is the holder key of TestSignedCaveatsUnchanged, the same in
// every run.
func signedKey() ed25519.PrivateKey {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
}

func errLine(err error) string {
	var e *protocol.Error
	if errors.As(err, &e) {
		return fmt.Sprintf("error %s %q fix %q rule %q", e.Code, e.Message, e.Fix, e.Rule)
	}
	return "error " + err.Error()
}
