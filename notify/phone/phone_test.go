package phone

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/google/go-cmp/cmp"
)

// phoneFake is a daemon with fixed waiting requests that records decisions.
type phoneFake struct {
	mu        sync.Mutex
	views     []protocol.PendingView
	decisions []string
}

func (f *phoneFake) Pending() []protocol.PendingView {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.views)
}

func (f *phoneFake) Decide(id string, approve bool, match, device string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.IndexFunc(f.views, func(v protocol.PendingView) bool { return v.ID == id })
	if i < 0 {
		return &protocol.Error{Code: protocol.CodeNotFound, Message: "no pending request"}
	}
	f.views = slices.Delete(f.views, i, i+1)
	f.decisions = append(f.decisions, fmt.Sprintf("%s approve=%v match=%s by phone:%s", id, approve, match, device))
	if approve && match != "42" {
		return &protocol.Error{Code: protocol.CodeDenied, Message: "the match code does not match"}
	}
	return nil
}

const (
	phoneTestURL  = "https://192.0.2.1:7450"
	phoneTestPeer = "192.0.2.10:40000" // TEST-NET-1: never an address of this host
)

type phoneEnv struct {
	p     *Page
	fake  *phoneFake
	state string
	now   time.Time
	h     http.Handler
}

func newPhoneEnv(t *testing.T) *phoneEnv {
	t.Helper()
	e := &phoneEnv{state: t.TempDir(), now: time.Unix(1_800_000_000, 0)}
	e.fake = &phoneFake{views: []protocol.PendingView{
		{ID: "r_phone1", Title: "tester asks for a grant", Text: "<script>alert(1)</script>\nline two", Channels: []string{"phone"}, Expires: e.now.Add(2 * time.Minute).Unix()},
		{ID: "r_desk1", Title: "desktop only", Channels: []string{"desktop"}, Expires: e.now.Add(2 * time.Minute).Unix()},
	}}
	var err error
	e.p, err = New(Options{Requests: e.fake, Listen: "192.0.2.1:7450", URL: phoneTestURL, State: e.state, Logf: t.Logf,
		Now: func() time.Time { return e.now }})
	if err != nil {
		t.Fatal(err)
	}
	e.h = e.p.Handler()
	return e
}

// do serves one request from remote with the device credential cred.
func (e *phoneEnv) do(method, target, remote, cred string, form url.Values, hdr map[string]string) *httptest.ResponseRecorder {
	var r *http.Request
	if form != nil {
		r = httptest.NewRequest(method, phoneTestURL+target, strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		r = httptest.NewRequest(method, phoneTestURL+target, nil)
	}
	r.RemoteAddr = remote
	if cred != "" {
		r.AddCookie(&http.Cookie{Name: DeviceCookie, Value: cred})
	}
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w
}

var sameOrigin = map[string]string{"Origin": phoneTestURL, "Sec-Fetch-Site": "same-origin"}

// pair pairs a device through the page and returns its credential.
func (e *phoneEnv) pair(t *testing.T, name string) string {
	t.Helper()
	tok, chosen, err := OpenDevices(e.state).NewPairing(name, time.Minute, e.now)
	if err != nil {
		t.Fatal(err)
	}
	w := e.do("POST", "/pair", phoneTestPeer, "", url.Values{"t": {tok}}, sameOrigin)
	if w.Code != http.StatusOK {
		t.Fatalf("pairing: %d %s", w.Code, w.Body)
	}
	// The admin types the code the page showed.
	devs, _, _ := OpenDevices(e.state).List(e.now)
	for _, d := range devs {
		if d.Name == chosen && !d.Confirmed {
			if !strings.Contains(w.Body.String(), d.Code) {
				t.Fatalf("the pairing page does not show the code %s", d.Code)
			}
			if _, err := OpenDevices(e.state).Confirm(chosen, d.Code, e.now); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range w.Result().Cookies() {
		if c.Name == DeviceCookie {
			return c.Value
		}
	}
	t.Fatal("pairing set no cookie")
	return ""
}

var pageTokenRE = regexp.MustCompile(`name="token" value="([^"]+)"`)

func (e *phoneEnv) pageToken(t *testing.T, id, cred string) string {
	t.Helper()
	w := e.do("GET", "/r/"+id, phoneTestPeer, cred, nil, nil)
	m := pageTokenRE.FindStringSubmatch(w.Body.String())
	if w.Code != http.StatusOK || m == nil {
		t.Fatalf("request page %s: %d %s", id, w.Code, w.Body)
	}
	return m[1]
}

func TestPhoneHeaders(t *testing.T) {
	e := newPhoneEnv(t)
	for _, target := range []string{"/", "/r/r_phone1", "/pair?t=x", "/static/phone.css"} {
		w := e.do("GET", target, phoneTestPeer, "", nil, nil)
		h := w.Result().Header
		for k, want := range map[string]string{
			"Content-Security-Policy": "default-src 'self'; script-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
			"X-Frame-Options":         "DENY",
			"Referrer-Policy":         "same-origin",
			"X-Content-Type-Options":  "nosniff",
		} {
			if got := h.Get(k); got != want {
				t.Errorf("GET %s: %s = %q, want %q", target, k, got, want)
			}
		}
	}
}

func TestPhonePages(t *testing.T) {
	e := newPhoneEnv(t)
	cred := e.pair(t, "pixel")
	tests := []struct {
		name       string
		target     string
		cred       string
		wantStatus int
		want       []string
		notWant    []string
	}{
		{"fail/index-not-paired", "/", "", 403, []string{"not paired"}, nil},
		{"fail/request-not-paired", "/r/r_phone1", "", 403, []string{"not paired"}, []string{"tester asks"}},
		{"ok/index-lists-phone-requests", "/", cred, 200, []string{`href="/r/r_phone1"`}, []string{"r_desk1"}},
		{"ok/request-escaped", "/r/r_phone1", cred, 200, []string{"&lt;script&gt;alert(1)&lt;/script&gt;\nline two", `name="token"`, `inputmode="numeric"`, `name="viewport"`},
			[]string{"<script>"}},
		{"fail/request-not-for-phone", "/r/r_desk1", cred, 404, []string{"Nothing to approve"}, []string{`name="token"`}},
		{"fail/request-unknown", "/r/r_nothere", cred, 404, []string{"Nothing to approve"}, nil},
		{"fail/request-bad-id", "/r/%3Cb%3E", cred, 404, []string{"Nothing to approve"}, []string{"<b>"}},
		{"fail/unknown-path", "/admin", cred, 404, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := e.do("GET", tc.target, phoneTestPeer, tc.cred, nil, nil)
			body := w.Body.String()
			if w.Code != tc.wantStatus {
				t.Errorf("status %d, want %d: %s", w.Code, tc.wantStatus, body)
			}
			for _, s := range tc.want {
				if !strings.Contains(body, s) {
					t.Errorf("page lacks %q:\n%s", s, body)
				}
			}
			for _, s := range tc.notWant {
				if strings.Contains(body, s) {
					t.Errorf("page has %q:\n%s", s, body)
				}
			}
		})
	}
}

func TestPhonePairing(t *testing.T) {
	e := newPhoneEnv(t)
	devs := OpenDevices(e.state)
	tok, name, err := devs.NewPairing("", time.Minute, e.now)
	if err != nil || name != "phone-1" {
		t.Fatalf("NewPairing = %q, %v; want phone-1", name, err)
	}
	// Opening the link shows the name and uses nothing up.
	for range 2 {
		w := e.do("GET", "/pair?t="+tok, phoneTestPeer, "", nil, nil)
		if w.Code != 200 || !strings.Contains(w.Body.String(), "phone-1") {
			t.Fatalf("pair page: %d %s", w.Code, w.Body)
		}
	}
	form := url.Values{"t": {tok}}
	steps := []struct {
		name   string
		remote string
		hdr    map[string]string
		want   int
		says   string
	}{
		{"fail/from-loopback", "127.0.0.1:5000", sameOrigin, 403, "pairing from this machine is not accepted"},
		{"fail/cross-site", phoneTestPeer, map[string]string{"Origin": "https://evil.example"}, 403, "did not come from this page"},
		{"ok/paired", phoneTestPeer, sameOrigin, 200, "paired as “phone-1” once you confirm it"},
		{"fail/used-twice", phoneTestPeer, sameOrigin, 403, ErrPairingInvalid.Error()},
	}
	for _, s := range steps {
		w := e.do("POST", "/pair", s.remote, "", form, s.hdr)
		if w.Code != s.want || !strings.Contains(w.Body.String(), s.says) {
			t.Errorf("%s: %d, want %d saying %q: %s", s.name, w.Code, s.want, s.says, w.Body)
		}
	}
	d, _, err := devs.List(e.now)
	if err != nil || len(d) != 1 || d[0].Name != "phone-1" {
		t.Fatalf("devices = %+v, %v", d, err)
	}

	// An expired link is refused, on the page and in the store.
	tok2, _, err := devs.NewPairing("late", time.Minute, e.now)
	if err != nil {
		t.Fatal(err)
	}
	e.now = e.now.Add(time.Minute)
	if w := e.do("GET", "/pair?t="+tok2, phoneTestPeer, "", nil, nil); w.Code != 403 {
		t.Errorf("expired link's page: %d", w.Code)
	}
	if w := e.do("POST", "/pair", phoneTestPeer, "", url.Values{"t": {tok2}}, sameOrigin); w.Code != 403 {
		t.Errorf("expired link: %d %s", w.Code, w.Body)
	}
}

func TestPhoneDecide(t *testing.T) {
	e := newPhoneEnv(t)
	cred := e.pair(t, "pixel")
	other := e.pair(t, "tablet")
	approve := func(tok, code string) url.Values {
		return url.Values{"token": {tok}, "action": {"approve"}, "code": {code}}
	}
	tests := []struct {
		name   string
		remote string
		cred   string
		form   func(tok string) url.Values
		hdr    map[string]string
		want   int
		says   string
		// decided is the decision the daemon received, or "".
		decided string
	}{
		{"fail/loopback-v4", "127.0.0.1:5000", cred, func(tok string) url.Values { return approve(tok, "42") }, sameOrigin, 403, RefusedLocal, ""},
		{"fail/loopback-v6", "[::1]:5000", cred, func(tok string) url.Values { return approve(tok, "42") }, sameOrigin, 403, RefusedLocal, ""},
		{"fail/loopback-v4-in-v6", "[::ffff:127.0.0.1]:5000", cred, func(tok string) url.Values { return approve(tok, "42") }, sameOrigin, 403, RefusedLocal, ""},
		{"fail/unparsable-peer", "somewhere", cred, func(tok string) url.Values { return approve(tok, "42") }, sameOrigin, 403, RefusedLocal, ""},
		{"fail/cross-site-fetch", phoneTestPeer, cred, func(tok string) url.Values { return approve(tok, "42") },
			map[string]string{"Origin": phoneTestURL, "Sec-Fetch-Site": "cross-site"}, 403, "did not come from this page", ""},
		{"ok/referer-without-origin", phoneTestPeer, cred, func(tok string) url.Values { return approve(tok, "42") },
			map[string]string{"Referer": phoneTestURL + "/r/r_phone1"}, 200, "Approved", "r_phone1 approve=true match=42 by phone:pixel"},
		{"fail/foreign-referer", phoneTestPeer, cred, func(tok string) url.Values { return approve(tok, "42") },
			map[string]string{"Referer": "https://192.0.2.1.evil.example/r/r_phone1"}, 403, "did not come from this page", ""},
		{"fail/token-of-another-device", phoneTestPeer, other, func(tok string) url.Values { return approve(tok, "42") }, sameOrigin, 403, "used already", ""},
		{"fail/no-action", phoneTestPeer, cred, func(tok string) url.Values { return url.Values{"token": {tok}, "code": {"42"}} }, sameOrigin, 400, "choose Approve or Deny", ""},
		{"fail/approve-without-code", phoneTestPeer, cred, func(tok string) url.Values { return approve(tok, " ") }, sameOrigin, 400, "enter the code", ""},
		{"ok/approve", phoneTestPeer, cred, func(tok string) url.Values { return approve(tok, "42") }, sameOrigin, 200, "Approved", "r_phone1 approve=true match=42 by phone:pixel"},
		{"ok/wrong-code-denies", phoneTestPeer, cred, func(tok string) url.Values { return approve(tok, "17") }, sameOrigin, 200, "denied: the code did not match", "r_phone1 approve=true match=17 by phone:pixel"},
		{"ok/deny", phoneTestPeer, cred, func(tok string) url.Values { return url.Values{"token": {tok}, "action": {"deny"}} }, sameOrigin, 200, "Denied", "r_phone1 approve=false match= by phone:pixel"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e.fake.mu.Lock()
			e.fake.views = []protocol.PendingView{{ID: "r_phone1", Title: "t", Channels: []string{"phone"}, Expires: e.now.Add(time.Minute).Unix()}}
			e.fake.decisions = nil
			e.fake.mu.Unlock()
			tok := e.pageToken(t, "r_phone1", cred)
			w := e.do("POST", "/r/r_phone1/decide", tc.remote, tc.cred, tc.form(tok), tc.hdr)
			if w.Code != tc.want || !strings.Contains(w.Body.String(), tc.says) {
				t.Errorf("%d, want %d saying %q: %s", w.Code, tc.want, tc.says, w.Body)
			}
			var want []string
			if tc.decided != "" {
				want = []string{tc.decided}
			}
			if diff := cmp.Diff(want, e.fake.decisions); diff != "" {
				t.Errorf("decisions (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPhoneTokens(t *testing.T) {
	e := newPhoneEnv(t)
	cred := e.pair(t, "pixel")
	post := func(tok string) *httptest.ResponseRecorder {
		return e.do("POST", "/r/r_phone1/decide", phoneTestPeer, cred, url.Values{"token": {tok}, "action": {"approve"}, "code": {"42"}}, sameOrigin)
	}
	// A token refused for its action is still used up: no retry with it.
	tok := e.pageToken(t, "r_phone1", cred)
	if w := e.do("POST", "/r/r_phone1/decide", phoneTestPeer, cred, url.Values{"token": {tok}}, sameOrigin); w.Code != 400 {
		t.Fatalf("no action: %d", w.Code)
	}
	if w := post(tok); w.Code != 403 || len(e.fake.decisions) != 0 {
		t.Errorf("reused token: %d, decisions %v", w.Code, e.fake.decisions)
	}
	// A token expires with the request (2 minutes here).
	tok = e.pageToken(t, "r_phone1", cred)
	e.now = e.now.Add(3 * time.Minute)
	if w := post(tok); w.Code != 403 || len(e.fake.decisions) != 0 {
		t.Errorf("expired token: %d, decisions %v", w.Code, e.fake.decisions)
	}
	// The table never grows past its cap.
	for range maxPageTokens + 10 {
		e.p.issueToken("d", "r_x", e.now, e.now.Add(time.Minute))
	}
	if n := len(e.p.tokens); n > maxPageTokens {
		t.Errorf("%d tokens held, cap %d", n, maxPageTokens)
	}
	// A body over the cap is refused, not read.
	big := strings.Repeat("a", maxPhoneBody+1)
	if w := e.do("POST", "/r/r_phone1/decide", phoneTestPeer, cred, url.Values{"token": {big}}, sameOrigin); w.Code != 403 || len(e.fake.decisions) != 0 {
		t.Errorf("huge body: %d", w.Code)
	}
}

func TestPhoneRevoke(t *testing.T) {
	e := newPhoneEnv(t)
	cred := e.pair(t, "pixel")
	tok := e.pageToken(t, "r_phone1", cred)
	devs := OpenDevices(e.state)
	list, _, _ := devs.List(e.now)
	if _, err := devs.Revoke(list[0].ID, e.now); err != nil {
		t.Fatal(err)
	}
	if w := e.do("GET", "/", phoneTestPeer, cred, nil, nil); w.Code != 403 {
		t.Errorf("revoked device's index: %d", w.Code)
	}
	w := e.do("POST", "/r/r_phone1/decide", phoneTestPeer, cred, url.Values{"token": {tok}, "action": {"approve"}, "code": {"42"}}, sameOrigin)
	if w.Code != 403 || len(e.fake.decisions) != 0 {
		t.Errorf("revoked device's approval: %d, decisions %v", w.Code, e.fake.decisions)
	}
	if _, err := devs.Revoke("pixel", e.now); !errors.Is(err, ErrNoDevice) {
		t.Errorf("revoking twice: %v, want ErrNoDevice", err)
	}
}

func TestDevicesStore(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tests := []struct {
		name string
		run  func(t *testing.T, d *Devices)
	}{
		{"ok/pair-once", func(t *testing.T, d *Devices) {
			tok, _, err := d.NewPairing("a", time.Minute, now)
			if err != nil {
				t.Fatal(err)
			}
			dev, cred, err := d.Pair(tok, "192.0.2.9", now)
			if err != nil || dev.Name != "a" || len(cred) != 43 || len(dev.Code) != 4 || dev.Addr != "192.0.2.9" {
				t.Fatalf("Pair = %+v %q %v", dev, cred, err)
			}
			if _, _, err := d.Pair(tok, "192.0.2.9", now); !errors.Is(err, ErrPairingInvalid) {
				t.Errorf("second Pair: %v", err)
			}
			// Until the admin confirms the code, the device decides nothing.
			if _, ok, _ := d.Authenticate(cred); ok {
				t.Error("an unconfirmed device authenticates")
			}
			if _, err := d.Confirm("a", dev.Code, now); err != nil {
				t.Fatalf("Confirm: %v", err)
			}
			got, ok, err := d.Authenticate(cred)
			if err != nil || !ok || got.ID != dev.ID {
				t.Errorf("Authenticate = %+v %v %v", got, ok, err)
			}
			changed := cred[:42] + "A"
			if cred[42] == 'A' {
				changed = cred[:42] + "B"
			}
			if _, ok, _ := d.Authenticate(changed); ok {
				t.Error("a changed credential authenticates")
			}
		}},
		{"fail/wrong-confirmation-unpairs", func(t *testing.T, d *Devices) {
			tok, _, _ := d.NewPairing("a", time.Minute, now)
			dev, cred, _ := d.Pair(tok, "192.0.2.9", now)
			wrong := "1000"
			if dev.Code == wrong {
				wrong = "1001"
			}
			if _, err := d.Confirm("a", wrong, now); !errors.Is(err, ErrCodeMismatch) {
				t.Errorf("Confirm with a wrong code: %v", err)
			}
			// One guess only: the device is gone.
			if _, err := d.Confirm("a", dev.Code, now); !errors.Is(err, ErrNoDevice) {
				t.Errorf("Confirm after a wrong code: %v", err)
			}
			if _, ok, _ := d.Authenticate(cred); ok {
				t.Error("a device unpaired by a wrong code authenticates")
			}
		}},
		{"fail/confirmation-expires", func(t *testing.T, d *Devices) {
			tok, _, _ := d.NewPairing("a", time.Minute, now)
			dev, _, _ := d.Pair(tok, "192.0.2.9", now)
			if _, err := d.Confirm("a", dev.Code, now.Add(confirmTTL)); !errors.Is(err, ErrNoDevice) {
				t.Errorf("Confirm after the confirmation time: %v", err)
			}
		}},
		{"fail/expired", func(t *testing.T, d *Devices) {
			tok, _, _ := d.NewPairing("a", time.Minute, now)
			if _, _, err := d.Pair(tok, "192.0.2.9", now.Add(time.Minute)); !errors.Is(err, ErrPairingInvalid) {
				t.Errorf("Pair after expiry: %v", err)
			}
		}},
		{"fail/empty-token", func(t *testing.T, d *Devices) {
			d.NewPairing("a", time.Minute, now)
			if _, _, err := d.Pair("", "192.0.2.9", now); !errors.Is(err, ErrPairingInvalid) {
				t.Errorf("Pair(\"\"): %v", err)
			}
		}},
		{"fail/name-taken", func(t *testing.T, d *Devices) {
			d.NewPairing("a", time.Minute, now)
			if _, _, err := d.NewPairing("a", time.Minute, now); !errors.Is(err, ErrNameTaken) {
				t.Errorf("second pairing named a: %v", err)
			}
		}},
		{"fail/bad-name", func(t *testing.T, d *Devices) {
			for _, n := range []string{"-x", "a b", "ä", strings.Repeat("x", 33), "x\x1b[31m"} {
				if _, _, err := d.NewPairing(n, time.Minute, now); err == nil {
					t.Errorf("name %q accepted", n)
				}
			}
		}},
		{"fail/too-many-pairings", func(t *testing.T, d *Devices) {
			for i := range MaxPairings {
				if _, _, err := d.NewPairing("", time.Minute, now); err != nil {
					t.Fatalf("pairing %d: %v", i, err)
				}
			}
			if _, _, err := d.NewPairing("", time.Minute, now); err == nil {
				t.Error("pairing beyond the cap accepted")
			}
		}},
		{"ok/file-modes", func(t *testing.T, d *Devices) {
			d.NewPairing("a", time.Minute, now)
			fi, err := os.Stat(d.Path())
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("device file mode %v, %v; want 0600", fi.Mode(), err)
			}
			b, _ := os.ReadFile(d.Path())
			if !strings.Contains(string(b), `"a"`) {
				t.Errorf("device file lacks the name: %s", b)
			}
		}},
		{"ok/secrets-only-hashed", func(t *testing.T, d *Devices) {
			tok, _, _ := d.NewPairing("a", time.Minute, now)
			b, _ := os.ReadFile(d.Path())
			if strings.Contains(string(b), tok) {
				t.Error("the pairing token is stored in clear")
			}
			_, cred, _ := d.Pair(tok, "192.0.2.9", now)
			b, _ = os.ReadFile(d.Path())
			if strings.Contains(string(b), cred) {
				t.Error("the credential is stored in clear")
			}
		}},
		{"fail/unknown-field", func(t *testing.T, d *Devices) {
			os.WriteFile(d.Path(), []byte(`{"version":1,"devices":[],"pairings":[],"extra":1}`), 0o600)
			if _, _, err := d.List(now); err == nil {
				t.Error("a device file with an unknown field was read")
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, OpenDevices(t.TempDir())) })
	}
}

// TestDevicesConcurrent has writers with their own file handles (as the
// daemon and `parley-keyd pair` have) race; the flock keeps every write.
func TestDevicesConcurrent(t *testing.T) {
	dir := t.TempDir()
	now := time.Unix(1_800_000_000, 0)
	var wg sync.WaitGroup
	errs := make(chan error, MaxPairings)
	for i := range MaxPairings {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := OpenDevices(dir).NewPairing(fmt.Sprintf("p%d", i), time.Minute, now)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	_, pairings, err := OpenDevices(dir).List(now)
	if err != nil || len(pairings) != MaxPairings {
		t.Errorf("%d pairings stored, want %d (%v)", len(pairings), MaxPairings, err)
	}
}

func TestPhoneCert(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	_, info, err := EnsureCert(dir, []string{"192.0.2.1"}, now)
	if err != nil || !info.Made {
		t.Fatalf("first EnsureCert: %+v, %v", info, err)
	}
	for name, mode := range map[string]fs.FileMode{CertFile: 0o644, KeyFile: 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, %v; want %v", name, fi.Mode().Perm(), err, mode)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, CertFile))
	blk, _ := pem.Decode(b)
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if c.PublicKeyAlgorithm != x509.ECDSA || len(c.IPAddresses) != 1 || c.IPAddresses[0].String() != "192.0.2.1" {
		t.Errorf("certificate: %v key, IP SANs %v; want ECDSA for 192.0.2.1", c.PublicKeyAlgorithm, c.IPAddresses)
	}
	sum := sha256.Sum256(blk.Bytes)
	if want := fmt.Sprintf("%X", sum[:1]); !strings.HasPrefix(info.Fingerprint, want+":") || len(info.Fingerprint) != 32*3-1 {
		t.Errorf("fingerprint %s does not start with %s", info.Fingerprint, want)
	}

	// The same hosts: kept. Another host, or near expiry: made anew.
	_, again, err := EnsureCert(dir, []string{"192.0.2.1"}, now)
	if err != nil || again.Made || again.Fingerprint != info.Fingerprint {
		t.Errorf("second EnsureCert made a new one: %+v, %v", again, err)
	}
	_, moved, err := EnsureCert(dir, []string{"192.0.2.7"}, now)
	if err != nil || !moved.Made || !slices.Contains(moved.Hosts, "192.0.2.7") {
		t.Errorf("EnsureCert for a new host: %+v, %v", moved, err)
	}
	_, renewed, err := EnsureCert(dir, []string{"192.0.2.7"}, now.Add(certLifetime))
	if err != nil || !renewed.Made {
		t.Errorf("EnsureCert near expiry: %+v, %v", renewed, err)
	}
}

func TestPhoneHosts(t *testing.T) {
	tests := []struct {
		name, listen, url string
		want              []string
		err               bool
	}{
		{"ok/listen-only", "192.168.1.20:7450", "", []string{"192.168.1.20"}, false},
		{"ok/url-and-listen", "192.168.1.20:7450", "https://phone.lan:7450", []string{"phone.lan", "192.168.1.20"}, false},
		{"ok/unspecified-listen", "0.0.0.0:7450", "https://192.168.1.20:7450", []string{"192.168.1.20"}, false},
		{"fail/no-host", ":7450", "", nil, true},
		{"fail/http-url", "192.168.1.20:7450", "http://192.168.1.20:7450", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Hosts(tc.listen, tc.url)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("hosts (-want +got):\n%s", diff)
			}
		})
	}
}
