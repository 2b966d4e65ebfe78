package phone

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// TestPhoneFormOneReading: a form that carries a field twice has two
// readings (Go's FormValue takes the first, other readers the last), so
// the phone page refuses it and decides nothing (DESIGN.md property 9).
func TestPhoneFormOneReading(t *testing.T) {
	e := newPhoneEnv(t)
	cred := e.pair(t, "pixel")
	for _, tc := range []struct {
		name string
		form func(tok string) url.Values
	}{
		{"fail/action-twice", func(tok string) url.Values {
			return url.Values{"token": {tok}, "action": {"deny", "approve"}, "code": {"42"}}
		}},
		{"fail/code-twice", func(tok string) url.Values {
			return url.Values{"token": {tok}, "action": {"approve"}, "code": {"17", "42"}}
		}},
		{"fail/token-twice", func(tok string) url.Values {
			return url.Values{"token": {tok, tok}, "action": {"approve"}, "code": {"42"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.fake.mu.Lock()
			e.fake.views = []protocol.PendingView{{ID: "r_phone1", Title: "t", Channels: []string{"phone"}, Expires: e.now.Add(time.Minute).Unix()}}
			e.fake.decisions = nil
			e.fake.mu.Unlock()
			tok := e.pageToken(t, "r_phone1", cred)
			w := e.do("POST", "/r/r_phone1/decide", phoneTestPeer, cred, tc.form(tok), sameOrigin)
			if w.Code != 400 || !strings.Contains(w.Body.String(), "twice") {
				t.Errorf("%d: %s", w.Code, w.Body)
			}
			if len(e.fake.decisions) != 0 {
				t.Errorf("decided: %v", e.fake.decisions)
			}
		})
	}
	devs := OpenDevices(e.state)
	tok, _, err := devs.NewPairing("again", time.Minute, e.now)
	if err != nil {
		t.Fatal(err)
	}
	if w := e.do("POST", "/pair", phoneTestPeer, "", url.Values{"t": {tok, "other"}}, sameOrigin); w.Code != 400 || !strings.Contains(w.Body.String(), "twice") {
		t.Errorf("pairing with t twice: %d %s", w.Code, w.Body)
	}
	// The link still works once sent right: nothing was used up.
	if w := e.do("POST", "/pair", phoneTestPeer, "", url.Values{"t": {tok}}, sameOrigin); w.Code != 200 {
		t.Errorf("pairing after the refusal: %d %s", w.Code, w.Body)
	}
}
