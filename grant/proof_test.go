package grant

import (
	"math"
	"testing"
)

func TestProofMessage(t *testing.T) {
	got := string(proofMessage("cal.example.com", "COMMIT", "a\"<b>\u2028", 1790000000))
	want := "{\"aud\":\"cal.example.com\",\"target\":\"a\\\"<b>\u2028\",\"ts\":1790000000,\"verb\":\"COMMIT\"}"
	if got != want {
		t.Errorf("proofMessage\n got %s\nwant %s", got, want)
	}
	// It is exactly canonical({"aud","verb","target","ts"}) (§6.5, §10).
	c, err := canonical(map[string]any{"aud": "cal.example.com", "verb": "COMMIT", "target": "a\"<b>\u2028", "ts": 1790000000})
	if err != nil || string(c) != got {
		t.Errorf("Canonical = %s, %v", c, err)
	}
}

// autoTarget returns the proof target of an auto INTENT (§4.3.1, §6.5):
// "auto:{capability}:{frame id}".
func autoTarget(capability, frameID string) string {
	return "auto:" + capability + ":" + frameID
}

func TestAutoTarget(t *testing.T) {
	if got := autoTarget("calendar.reschedule", "f-91"); got != "auto:calendar.reschedule:f-91" {
		t.Errorf("autoTarget = %q", got)
	}
}

func TestVerifyProof(t *testing.T) {
	const aud = "shop.example"
	// Every target kind of §6.5.
	kinds := []struct {
		name, verb, target string
	}{
		{"commit/proposal-hash", "COMMIT", "3YBSE3lWje0kWnzf3PaGMr3CI3aoO1qdYRLxUkmOJVU"},
		{"undo/receipt-id", "UNDO", "r_91"},
		{"ask/capability", "ASK", "shop.search"},
		{"intent/capability", "INTENT", "shop.order"},
		{"intent-auto/frame", "INTENT", autoTarget("shop.order", "7f3a9c0d1e2b4a56")},
		{"expand/handle", "EXPAND", "h_3kd"},
	}
	for _, k := range kinds {
		t.Run("ok/"+k.name, func(t *testing.T) {
			p, err := MakeProof(keyAgent, aud, k.verb, k.target, testNow)
			if err != nil {
				t.Fatal(err)
			}
			if p.Key != pubText(keyAgent) || p.Ts != testNow {
				t.Errorf("proof %+v", p)
			}
			if err := VerifyProof(p, aud, k.verb, k.target, testNow); err != nil {
				t.Fatal(err)
			}
			// A proof for one target is no proof for any other.
			for _, other := range kinds {
				if other == k {
					continue
				}
				if err := VerifyProof(p, aud, other.verb, other.target, testNow); codeOf(err) != codeUnauthorized {
					t.Errorf("proof for %s accepted for %s: %v", k.name, other.name, err)
				}
			}
			if err := VerifyProof(p, "evil.example", k.verb, k.target, testNow); codeOf(err) != codeUnauthorized {
				t.Errorf("proof accepted at another audience: %v", err)
			}
		})
	}

	p, err := MakeProof(keyAgent, aud, "ASK", "shop.search", testNow)
	if err != nil {
		t.Fatal(err)
	}
	skew := []struct {
		name string
		now  int64
		ok   bool
	}{
		{"ok/now", testNow, true},
		{"ok/300s-later", testNow + 300, true},
		{"ok/300s-earlier", testNow - 300, true},
		{"fail/301s-later", testNow + 301, false},
		{"fail/301s-earlier", testNow - 301, false},
		{"fail/far-future-now", math.MaxInt64, false},
		{"fail/far-past-now", math.MinInt64, false},
	}
	for _, tt := range skew {
		t.Run(tt.name, func(t *testing.T) {
			err := VerifyProof(p, aud, "ASK", "shop.search", tt.now)
			if tt.ok && err != nil {
				t.Errorf("VerifyProof at now%+d: %v", tt.now-testNow, err)
			}
			if !tt.ok && codeOf(err) != codeUnauthorized {
				t.Errorf("VerifyProof at now%+d = %v, want unauthorized", tt.now-testNow, err)
			}
		})
	}

	bad := []struct {
		name string
		p    Proof
	}{
		{"fail/other-key", Proof{Key: pubText(keyMallory), Ts: p.Ts, Sig: p.Sig}},
		{"fail/other-ts", Proof{Key: p.Key, Ts: p.Ts + 1, Sig: p.Sig}},
		{"fail/bad-key", Proof{Key: "ed25519:xyz", Ts: p.Ts, Sig: p.Sig}},
		{"fail/short-sig", Proof{Key: p.Key, Ts: p.Ts, Sig: p.Sig[:85]}},
		{"fail/padded-sig", Proof{Key: p.Key, Ts: p.Ts, Sig: p.Sig + "=="}},
		{"fail/empty", Proof{}},
		{"fail/ts-min-int", Proof{Key: p.Key, Ts: math.MinInt64, Sig: p.Sig}},
		{"fail/ts-max-int", Proof{Key: p.Key, Ts: math.MaxInt64, Sig: p.Sig}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if err := VerifyProof(tt.p, aud, "ASK", "shop.search", testNow); codeOf(err) != codeUnauthorized {
				t.Errorf("VerifyProof = %v, want unauthorized", err)
			}
		})
	}
	if err := VerifyProof(p, aud, "ASK", "shop.search\xff", testNow); err == nil {
		t.Error("VerifyProof accepted a target that is not UTF-8")
	}
	if _, err := MakeProof(keyAgent, aud, "ASK", "x", 1<<60); err == nil {
		t.Error("MakeProof accepted a ts outside the canonical integer range")
	}
}
