package phone

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

var stopTokenRE = regexp.MustCompile(`action="/stop"[^>]*>\s*<input type="hidden" name="token" value="([^"]+)"`)

func (e *phoneEnv) stopToken(t *testing.T, page, cred string) string {
	t.Helper()
	w := e.do("GET", page, phoneTestPeer, cred, nil, nil)
	m := stopTokenRE.FindStringSubmatch(w.Body.String())
	if w.Code != http.StatusOK || m == nil {
		t.Fatalf("%s shows no Stop button: %d %s", page, w.Code, w.Body)
	}
	return m[1]
}

func TestPhoneStop(t *testing.T) {
	e := newPhoneEnv(t)
	var mu sync.Mutex
	var pressed []string
	var err error
	e.p, err = New(Options{Requests: e.fake, Listen: "192.0.2.1:7450", URL: phoneTestURL, State: e.state, Logf: t.Logf,
		Now: func() time.Time { return e.now },
		Stop: func(device string) error {
			mu.Lock()
			defer mu.Unlock()
			pressed = append(pressed, device)
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	e.h = e.p.Handler()
	cred := e.pair(t, "pixel")
	other := e.pair(t, "tablet")
	stops := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), pressed...)
	}

	tests := []struct {
		name   string
		page   string // where the token comes from
		remote string
		cred   string
		hdr    map[string]string
		want   int
		says   string
	}{
		{"fail/cross-site", "/", phoneTestPeer, cred, map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}, 403, "did not come from this page"},
		{"fail/no-origin-or-referer", "/", phoneTestPeer, cred, map[string]string{}, 403, "did not say where it came from"},
		{"fail/unpaired", "/", phoneTestPeer, "", sameOrigin, 403, "not paired"},
		{"fail/token-of-another-device", "/", phoneTestPeer, other, sameOrigin, 403, "used already"},
		{"ok/from-the-index", "/", phoneTestPeer, cred, sameOrigin, 200, "Stopped"},
		{"ok/from-a-request-page", "/r/r_phone1", phoneTestPeer, cred, sameOrigin, 200, "Stopped"},
		// Stopping only refuses, so unlike an approval it is accepted from
		// this host's own addresses (see stop.go).
		{"ok/from-loopback", "/", "127.0.0.1:5000", cred, sameOrigin, 200, "Stopped"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(stops())
			tok := e.stopToken(t, tc.page, cred)
			w := e.do("POST", "/stop", tc.remote, tc.cred, url.Values{"token": {tok}}, tc.hdr)
			if w.Code != tc.want || !strings.Contains(w.Body.String(), tc.says) {
				t.Errorf("%d, want %d saying %q: %s", w.Code, tc.want, tc.says, w.Body)
			}
			got := stops()[before:]
			if tc.want == 200 && (len(got) != 1 || got[0] != "pixel") {
				t.Errorf("Stop called with %v, want [pixel]", got)
			}
			if tc.want != 200 && len(got) != 0 {
				t.Errorf("a refused Stop called Stop: %v", got)
			}
		})
	}

	// A Stop token is used up, and decides no request; a request's token
	// presses no Stop.
	tok := e.stopToken(t, "/", cred)
	e.do("POST", "/stop", phoneTestPeer, cred, url.Values{"token": {tok}}, sameOrigin)
	if w := e.do("POST", "/stop", phoneTestPeer, cred, url.Values{"token": {tok}}, sameOrigin); w.Code != 403 {
		t.Errorf("a Stop token reused: %d", w.Code)
	}
	tok = e.stopToken(t, "/", cred)
	if w := e.do("POST", "/r/r_phone1/decide", phoneTestPeer, cred, url.Values{"token": {tok}, "action": {"deny"}}, sameOrigin); w.Code != 403 {
		t.Errorf("a Stop token decided a request: %d %s", w.Code, w.Body)
	}
	reqTok := e.pageToken(t, "r_phone1", cred)
	before := len(stops())
	if w := e.do("POST", "/stop", phoneTestPeer, cred, url.Values{"token": {reqTok}}, sameOrigin); w.Code != 403 || len(stops()) != before {
		t.Errorf("a request's token pressed Stop: %d", w.Code)
	}
}

// TestPhoneNoStopWithoutDaemon: a page made without Stop shows no button
// and has no /stop.
func TestPhoneNoStopWithoutDaemon(t *testing.T) {
	e := newPhoneEnv(t)
	cred := e.pair(t, "pixel")
	if w := e.do("GET", "/", phoneTestPeer, cred, nil, nil); strings.Contains(w.Body.String(), `action="/stop"`) {
		t.Error("a Stop button without a daemon to stop")
	}
	if w := e.do("POST", "/stop", phoneTestPeer, cred, url.Values{"token": {"x"}}, sameOrigin); w.Code != 404 {
		t.Errorf("POST /stop: %d", w.Code)
	}
}
