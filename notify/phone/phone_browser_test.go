package phone_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/parley-keyd/parley-keyd/notify/phone"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testdaemon"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testnet"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"github.com/parley-keyd/parley-keyd/keyd"
)

// phonePolicy routes every request of the test agent to the phone alone, and
// demands a strong channel.
const phonePolicy = `
version = 1
[[agent]]
name = "tester"
any = true
rate = 100000
pending = 4

[[rule]]
name = "ask-phone"
agents = ["tester"]
action = "ask"
max_exp = "1h"
default_exp = "15m"
channels = ["phone"]
strong = true
`

// phoneDaemon is a real daemon on a temporary Unix socket with its phone
// page on listen.
type phoneDaemon struct {
	srv   *keyd.Daemon
	sock  string
	state string
	phone *phone.Page
	base  string
}

// startPhoneDaemon runs a daemon in-process, like keyd's own tests do, with
// the phone page listening on ln.
func startPhoneDaemon(t *testing.T, ln net.Listener) *phoneDaemon {
	t.Helper()
	return startPhoneDaemonWith(t, ln, phonePolicy, false)
}

// startPhoneDaemonWith is startPhoneDaemon with policy, and with the
// page's remembered approvals when remember is set.
func startPhoneDaemonWith(t *testing.T, ln net.Listener, policy string, remember bool) *phoneDaemon {
	t.Helper()
	dir := t.TempDir()
	d := &phoneDaemon{sock: filepath.Join(dir, "agent.sock"), state: dir}
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := keyd.ParseConfig([]byte(keyd.DefaultConfig(d.sock, u.Username, u.Username)), filepath.Join(dir, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Phone.Listen = ln.Addr().String()
	d.base = cfg.PhoneURL()
	cfg.Socket = d.sock
	d.srv = testdaemon.Start(t, cfg, policy, dir)
	o := phone.Options{Requests: d.srv, Listen: cfg.Phone.Listen, URL: d.base, State: dir, Logf: t.Logf}
	if remember {
		o.Remember = d.srv
	}
	d.phone, err = phone.New(o)
	if err != nil {
		t.Fatal(err)
	}
	d.phone.Serve(ln)
	t.Cleanup(func() { d.phone.Close() })
	return d
}

// phoneAsk is an agent's grant request waiting for a human.
type phoneAsk struct {
	id, code string
	done     chan phoneAskResult
}

type phoneAskResult struct {
	res *protocol.GrantResult
	err error
}

// askPhone sends a grant request as the agent and returns once the daemon
// has queued it and told the match code.
func askPhone(t *testing.T, d *phoneDaemon) *phoneAsk {
	t.Helper()
	c, err := client.Dial(d.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_, agent, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	a := &phoneAsk{done: make(chan phoneAskResult, 1)}
	events := make(chan protocol.Event, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	go func() {
		cavs := []grant.Caveat{grant.Svc("mail.example"), grant.Can("mail.send"), grant.Exp(time.Now().Unix() + 600)}
		res, err := c.Grant(ctx, agent, cavs, func(e protocol.Event) { events <- e })
		a.done <- phoneAskResult{res, err}
	}()
	select {
	case e := <-events:
		a.id, a.code = e.Request, e.Code
	case r := <-a.done:
		t.Fatalf("the request ended before waiting for a human: %v", r.err)
	case <-time.After(20 * time.Second):
		t.Fatal("timed out waiting for the request to be queued")
	}
	return a
}

func (a *phoneAsk) result(t *testing.T) phoneAskResult {
	t.Helper()
	select {
	case r := <-a.done:
		return r
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for request %s to end", a.id)
	}
	return phoneAskResult{}
}

func (d *phoneDaemon) pending(id string) (protocol.PendingView, bool) {
	for _, v := range d.srv.Pending() {
		if v.ID == id {
			return v, true
		}
	}
	return protocol.PendingView{}, false
}

// phoneArtifacts is where screenshots go: $PARLEY_ARTIFACTS, else a folder
// of the test.
func phoneArtifacts(t *testing.T) string {
	if d := os.Getenv("PARLEY_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// phoneBrowser starts a headless Chromium inside ns, driven over the
// DevTools pipe, that trusts exactly the phone page's certificate (pinned
// by its public key), and returns its tab.
func phoneBrowser(t *testing.T, ns *testnet.NS, spki string) context.Context {
	t.Helper()
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		testpeer.Unavailable(t, "needs chromium (Debian package chromium) for the phone page test")
	}
	// chromedp starts the browser through this script, which starts it
	// inside the namespace: its connections come from the phone's address.
	// The DevTools pipe (file descriptors 3 and 4) passes through.
	wrapper := filepath.Join(t.TempDir(), "chromium-in-netns")
	script := fmt.Sprintf("#!/bin/sh\nexec %s %q \"$@\"\n", strings.Join(ns.Prefix(), " "), chromium)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(wrapper),
		chromedp.NoSandbox, // root in a container: the sandbox cannot start
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("ignore-certificate-errors-spki-list", spki),
		chromedp.WindowSize(390, 844),
	)
	// The whole browser lives at most this long. (A deadline on the first
	// action's context alone would stop the browser when it passes.)
	life, lcancel := context.WithTimeout(context.Background(), 3*time.Minute)
	actx, acancel := chromedp.NewExecAllocator(life, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		bcancel()
		acancel()
		lcancel()
	})
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile)); err != nil {
		t.Fatalf("starting chromium in %s: %v", ns.Name, err)
	}
	return bctx
}

// phoneShot saves a screenshot of the tab as dir/name.
func phoneShot(t *testing.T, tab context.Context, dir, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(shot, []byte("\x89PNG")) {
		t.Fatal("the screenshot is not a PNG")
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// phoneStep runs actions on the tab with a deadline.
func phoneStep(t *testing.T, tab context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func phoneText(t *testing.T, tab context.Context, sel string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, 30*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("reading %s: %v", sel, err)
	}
	return s
}

// phoneClient is an HTTP client for the phone page that trusts exactly its
// certificate. With dial set, its connections start inside the namespace.
func phoneClient(d *phoneDaemon, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Client {
	fp := d.phone.Cert().Fingerprint
	tr := &http.Transport{
		DialContext: dial,
		TLSClientConfig: &tls.Config{
			InsecureSkipVerify: true, // replaced by the pin below
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 || phone.Fingerprint(cs.PeerCertificates[0].Raw) != fp {
					return errors.New("not the phone page's certificate")
				}
				return nil
			},
		},
	}
	return &http.Client{Transport: tr, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

var tokenRE = regexp.MustCompile(`name="token" value="([A-Za-z0-9_-]+)"`)

// phoneGet fetches path with the device cookie (when cookie is set) and
// returns the status, the body and the page's one-time token, if any.
func phoneGet(t *testing.T, c *http.Client, d *phoneDaemon, path, cookie string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", d.base+path, nil)
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: phone.DeviceCookie, Value: cookie})
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	tok := ""
	if m := tokenRE.FindSubmatch(b); m != nil {
		tok = string(m[1])
	}
	return resp.StatusCode, string(b), tok
}

// phonePost posts a decision form the way a browser would, with the
// headers given (Origin, cookie) and returns the status and body.
func phonePost(t *testing.T, c *http.Client, d *phoneDaemon, id string, form url.Values, origin, cookie string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", d.base+"/r/"+id+"/decide", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: phone.DeviceCookie, Value: cookie})
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST decide %s: %v", id, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestPhoneBrowser is the phone page against real peers: a daemon, a
// Chromium in another network namespace (the phone), and HTTP clients on
// the host and in the namespace.
func TestPhoneBrowser(t *testing.T) {
	ns := testnet.New(t, "phone")
	ln, err := net.Listen("tcp", net.JoinHostPort(ns.HostIP.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	d := startPhoneDaemon(t, ln)
	origin := d.base
	tab := phoneBrowser(t, ns, d.phone.Cert().SPKI)
	shots := phoneArtifacts(t)

	// Pairing: the admin's link, opened on the phone, asks first; the
	// button pairs.
	token, name, err := phone.OpenDevices(d.state).NewPairing("pixel", 10*time.Minute, time.Now())
	if err != nil || name != "pixel" {
		t.Fatalf("NewPairing = %q, %v", name, err)
	}
	phoneStep(t, tab, "opening the pairing link",
		chromedp.Navigate(phone.PairingLink(d.base, token)),
		chromedp.WaitVisible(chromedp.CSS("#pair")),
	)
	phoneShot(t, tab, shots, "phone-pair.png")
	phoneStep(t, tab, "pairing",
		chromedp.Click(chromedp.CSS("#pair")),
		chromedp.WaitVisible(chromedp.CSS("h1.ok")),
	)
	got := phoneText(t, tab, "main")
	if !strings.Contains(got, "paired as “pixel” once you confirm it") {
		t.Fatalf("after pairing the page says %q", got)
	}
	// Number matching for pairing: the admin types, where pair waits, the
	// code this phone shows. Until then the phone decides nothing.
	code := regexp.MustCompile(`\b\d{4}\b`).FindString(got)
	if code == "" {
		t.Fatalf("the pairing page shows no code: %q", got)
	}
	if _, err := phone.OpenDevices(d.state).Confirm("pixel", code, time.Now()); err != nil {
		t.Fatalf("confirming with the code the phone shows: %v", err)
	}
	cookies, err := chromedp.Call(tab, network.GetCookies, network.GetCookiesParams{URLs: []string{d.base + "/"}})
	if err != nil {
		t.Fatal(err)
	}
	var cred string
	for _, c := range cookies.Cookies {
		if c.Name == phone.DeviceCookie {
			cred = c.Value
			if !c.Secure || !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict || c.Path != "/" {
				t.Errorf("device cookie %+v: want Secure, HttpOnly, SameSite=Strict, Path=/", c)
			}
		}
	}
	if cred == "" {
		t.Fatal("the browser holds no device cookie after pairing")
	}
	devs, _, err := phone.OpenDevices(d.state).List(time.Now())
	if err != nil || len(devs) != 1 || devs[0].Name != "pixel" {
		t.Fatalf("devices after pairing = %+v, %v", devs, err)
	}

	// Request 1: opened, code typed and approved on the phone.
	a1 := askPhone(t, d)
	v1, ok := d.pending(a1.id)
	if !ok || v1.Link != d.base+"/r/"+a1.id {
		t.Fatalf("pending %s = %+v, %v; want link %s/r/%s", a1.id, v1, ok, d.base, a1.id)
	}
	phoneStep(t, tab, "opening the request page",
		chromedp.Navigate(v1.Link),
		chromedp.WaitVisible(chromedp.CSS("#code")),
		chromedp.SendKeys(chromedp.CSS("#code"), a1.code),
	)
	if got := phoneText(t, tab, "h1"); got != v1.Title {
		t.Errorf("request page heading = %q, want %q", got, v1.Title)
	}
	if got := phoneText(t, tab, "pre.text"); strings.TrimSpace(got) != strings.TrimSpace(v1.Text) {
		t.Errorf("request page text = %q, want the daemon's rendering %q", got, v1.Text)
	}
	used, err := chromedp.Run(tab, chromedp.Value(chromedp.CSS(`input[name=token]`)))
	if err != nil || used == "" {
		t.Fatalf("reading the page's token: %q, %v", used, err)
	}
	phoneShot(t, tab, shots, "phone-request.png")
	phoneStep(t, tab, "approving",
		chromedp.Click(chromedp.CSS("#approve")),
		chromedp.WaitVisible(chromedp.CSS("h1.ok")),
	)
	r1 := a1.result(t)
	if r1.err != nil {
		t.Fatalf("request approved on the phone ended with %v", r1.err)
	}
	if r1.res.Channel != "phone" || r1.res.Strength != "strong" || r1.res.Approver != "phone:pixel" {
		t.Errorf("grant decided by %q over %q (%s), want phone:pixel over phone (strong)", r1.res.Approver, r1.res.Channel, r1.res.Strength)
	}
	if got := phoneText(t, tab, "h1"); got != "Approved" {
		t.Errorf("after approving the page says %q", got)
	}

	host := phoneClient(d, nil)
	pc := phoneClient(d, ns.Dial)

	// A replay of the phone's own approval, from the phone's address with
	// its cookie and origin: the token is used up.
	if st, body := phonePost(t, pc, d, a1.id, url.Values{"token": {used}, "action": {"approve"}, "code": {a1.code}}, origin, cred); st != http.StatusForbidden || !strings.Contains(body, "used already") {
		t.Errorf("replayed approval: %d %s", st, body)
	}

	// Request 2: attempts that must all be refused and leave it pending.
	a2 := askPhone(t, d)
	approve := func(tok string) url.Values {
		return url.Values{"token": {tok}, "action": {"approve"}, "code": {a2.code}}
	}
	// From the host itself, with a stolen valid cookie and a valid token:
	// viewing works, approving does not.
	st, body, tok := phoneGet(t, host, d, "/r/"+a2.id, cred)
	if st != http.StatusOK || tok == "" {
		t.Fatalf("viewing from the host: %d, token %q: %s", st, tok, body)
	}
	if st, body := phonePost(t, host, d, a2.id, approve(tok), origin, cred); st != http.StatusForbidden || !strings.Contains(body, phone.RefusedLocal) {
		t.Errorf("approval from the host: %d %s", st, body)
	}
	if _, ok := d.pending(a2.id); !ok {
		t.Fatal("an approval from the host ended the request")
	}
	forged := []struct {
		name           string
		form           func() url.Values
		origin, cookie string
		want           string
	}{
		{"fail/no-token", func() url.Values { return approve("") }, origin, cred, "used already"},
		{"fail/token-of-another-request", func() url.Values { return approve(used) }, origin, cred, "used already"},
		{"fail/cross-site-origin", func() url.Values { _, _, tk := phoneGet(t, pc, d, "/r/"+a2.id, cred); return approve(tk) }, "https://evil.example", cred, "did not come from this page"},
		{"fail/no-origin", func() url.Values { _, _, tk := phoneGet(t, pc, d, "/r/"+a2.id, cred); return approve(tk) }, "", cred, "did not say where it came from"},
		{"fail/no-cookie", func() url.Values { _, _, tk := phoneGet(t, pc, d, "/r/"+a2.id, cred); return approve(tk) }, origin, "", "not paired"},
		{"fail/wrong-cookie", func() url.Values { _, _, tk := phoneGet(t, pc, d, "/r/"+a2.id, cred); return approve(tk) }, origin, otherCookie(cred), "not paired"},
	}
	for _, tc := range forged {
		t.Run(tc.name, func(t *testing.T) {
			st, body := phonePost(t, pc, d, a2.id, tc.form(), tc.origin, tc.cookie)
			if st != http.StatusForbidden || !strings.Contains(body, tc.want) {
				t.Errorf("got %d, want 403 saying %q: %s", st, tc.want, body)
			}
			if _, ok := d.pending(a2.id); !ok {
				t.Fatal("a refused approval ended the request")
			}
		})
	}

	// The phone itself with a wrong code: the request is denied and the
	// page says why.
	wrong := "00"
	if a2.code == wrong {
		wrong = "01"
	}
	phoneStep(t, tab, "approving with a wrong code",
		chromedp.Navigate(d.base+"/r/"+a2.id),
		chromedp.WaitVisible(chromedp.CSS("#code")),
		chromedp.SendKeys(chromedp.CSS("#code"), wrong),
		chromedp.Click(chromedp.CSS("#approve")),
		chromedp.WaitVisible(chromedp.CSS("h1.bad")),
	)
	if got := phoneText(t, tab, "main"); !strings.Contains(got, "denied: the code did not match") {
		t.Errorf("after a wrong code the page says %q", got)
	}
	phoneShot(t, tab, shots, "phone-denied.png")
	r2 := a2.result(t)
	var ke *protocol.Error
	if !errors.As(r2.err, &ke) || ke.Code != protocol.CodeDenied {
		t.Errorf("request with a wrong code ended with %v, want denied", r2.err)
	}

	// Revocation takes effect at the next request.
	if _, err := phone.OpenDevices(d.state).Revoke("pixel", time.Now()); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := phoneGet(t, pc, d, "/", cred); st != http.StatusForbidden {
		t.Errorf("a revoked phone's page: %d, want 403", st)
	}
}

// otherCookie returns a cookie value of the same length and alphabet as
// cred that is never cred itself: its first character changed.
func otherCookie(cred string) string {
	first := byte('x')
	if cred[0] == first {
		first = 'y'
	}
	return string(first) + cred[1:]
}
