package phone_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testnet"
	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/parley-keyd/parley-keyd/notify/phone"
)

const phoneRememberPolicy = `
version = 1
[[agent]]
name = "tester"
any = true
rate = 100000
pending = 4

[[rule]]
name = "remember-mail"
agents = ["tester"]
action = "ask"
svc = ["mail.example"]
max_exp = "1h"
channels = ["phone"]
strong = true
remember = "2h"
remember_exp = "10m"

[[rule]]
name = "once-only"
agents = ["tester"]
action = "ask"
svc = ["once.example"]
max_exp = "1h"
channels = ["phone"]
strong = true
`

// askFor sends a grant request for svc from c and returns its id, code and
// the channel its result comes on.
func askFor(t *testing.T, c *client.Client, svc string) (id, code string, done chan phoneAskResult) {
	t.Helper()
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	done = make(chan phoneAskResult, 1)
	events := make(chan protocol.Event, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	go func() {
		res, err := c.Grant(ctx, key, []grant.Caveat{grant.Svc(svc), grant.Can("mail.read")}, func(e protocol.Event) { events <- e })
		done <- phoneAskResult{res, err}
	}()
	select {
	case e := <-events:
		return e.Request, e.Code, done
	case r := <-done:
		if r.err == nil && r.res.Decision == "remembered" {
			done <- r
			return "", "", done
		}
		t.Fatalf("the request ended before waiting for a human: %+v %v", r.res, r.err)
	case <-time.After(20 * time.Second):
		t.Fatal("timed out waiting for the request to be queued")
	}
	return
}

// pairChromium pairs the browser in tab as "pixel" and returns its
// device credential.
func pairChromium(t *testing.T, tab context.Context, d *phoneDaemon) string {
	t.Helper()
	token, _, err := phone.OpenDevices(d.state).NewPairing("pixel", 10*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	phoneStep(t, tab, "pairing",
		chromedp.Navigate(phone.PairingLink(d.base, token)),
		chromedp.WaitVisible(chromedp.CSS("#pair")),
		chromedp.Click(chromedp.CSS("#pair")),
		chromedp.WaitVisible(chromedp.CSS("h1.ok")),
	)
	code := regexp.MustCompile(`\b\d{4}\b`).FindString(phoneText(t, tab, "main"))
	if _, err := phone.OpenDevices(d.state).Confirm("pixel", code, time.Now()); err != nil {
		t.Fatal(err)
	}
	cookies, err := chromedp.Call(tab, network.GetCookies, network.GetCookiesParams{URLs: []string{d.base + "/"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cookies.Cookies {
		if c.Name == phone.DeviceCookie {
			return c.Value
		}
	}
	t.Fatal("no device cookie after pairing")
	return ""
}

// phoneForget posts a Forget of id as the page's form would.
func phoneForget(t *testing.T, c *http.Client, d *phoneDaemon, id, token, origin, cookie string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", d.base+"/m/"+id+"/forget", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", origin)
	req.AddCookie(&http.Cookie{Name: phone.DeviceCookie, Value: cookie})
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestPhoneBrowserRemember: in Chromium on another network namespace,
// "Approve for 2 h" appears beside Approve only for a request that offers
// it, approves it remembered for 2 h (so the same request is then issued at
// once), and the first page lists the remembered approval with a Forget
// button that ends it. Refused: a remember the page did not offer (45m,
// within the rule's 2 h), a Forget from this host, a Forget with a request
// page's token.
func TestPhoneBrowserRemember(t *testing.T) {
	ns := testnet.New(t, "phonerem")
	ln, err := net.Listen("tcp", net.JoinHostPort(ns.HostIP.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	d := startPhoneDaemonWith(t, ln, phoneRememberPolicy, true)
	tab := phoneBrowser(t, ns, d.phone.Cert().SPKI)
	shots := phoneArtifacts(t)
	cred := pairChromium(t, tab, d)
	agent, err := client.Dial(d.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Close() })
	pc, host := phoneClient(d, ns.Dial), phoneClient(d, nil)

	// Not offered by the rule: no remember buttons.
	onceID, _, onceDone := askFor(t, agent, "once.example")
	phoneStep(t, tab, "opening a request that offers no remember",
		chromedp.Navigate(d.base+"/r/"+onceID), chromedp.WaitVisible(chromedp.CSS("#approve")))
	if got := phoneText(t, tab, "form"); strings.Contains(got, "Approve for") {
		t.Errorf("a request that offers no remember shows %q", got)
	}
	if err := d.srv.Decide(onceID, false, "", "pixel"); err != nil {
		t.Fatal(err)
	}
	<-onceDone

	id, code, done := askFor(t, agent, "mail.example")
	// A remember the page did not offer, from the phone with a valid
	// token: refused, nothing decided.
	_, _, tok := phoneGet(t, pc, d, "/r/"+id, cred)
	if st, body := phonePost(t, pc, d, id, url.Values{"token": {tok}, "action": {"remember-45m"}, "code": {code}}, d.base, cred); st != http.StatusBadRequest || !strings.Contains(body, "may not be approved for 45m") {
		t.Errorf("remember-45m: %d %s", st, body)
	}
	if _, ok := d.pending(id); !ok {
		t.Fatal("a remember not offered decided the request")
	}

	phoneStep(t, tab, "opening the request page",
		chromedp.Navigate(d.base+"/r/"+id),
		chromedp.WaitVisible(chromedp.CSS("#remember-2h")),
	)
	for sel, want := range map[string]string{"#remember-15m": "Approve for 15 min", "#remember-1h": "Approve for 1 h", "#remember-2h": "Approve for 2 h"} {
		if got := phoneText(t, tab, sel); got != want {
			t.Errorf("%s says %q, want %q", sel, got, want)
		}
	}
	phoneStep(t, tab, "typing the code", chromedp.SendKeys(chromedp.CSS("#code"), code))
	phoneShot(t, tab, shots, "phone-remember.png")
	phoneStep(t, tab, "approving for 2 h",
		chromedp.Click(chromedp.CSS("#remember-2h")),
		chromedp.WaitVisible(chromedp.CSS("h1.ok")),
	)
	if got := phoneText(t, tab, "h1"); got != "Approved for 2 h" {
		t.Errorf("after Approve for 2 h the page says %q", got)
	}
	if r := <-done; r.err != nil || r.res.Channel != "phone" || r.res.Strength != "strong" {
		t.Fatalf("approved for 2 h on the phone: %+v %v", r.res, r.err)
	}
	// The same request again: issued at once.
	if id2, _, done2 := askFor(t, agent, "mail.example"); id2 != "" {
		t.Fatalf("the same request waits for a human again: %s", id2)
	} else if r := <-done2; r.res.Decision != "remembered" || r.res.Until < time.Now().Add(119*time.Minute).Unix() {
		t.Fatalf("under the remembered approval: %+v", r.res)
	}
	list := d.srv.Remembered()
	if len(list) != 1 {
		t.Fatalf("remembered: %+v", list)
	}
	m := list[0]

	// Forget: from this host (valid cookie and token) refused; with a
	// request page's token refused; from the phone's button it ends.
	_, body, tok := phoneGet(t, host, d, "/", cred)
	if tok == "" || !strings.Contains(body, "Remembered approvals") {
		t.Fatalf("the first page lists no remembered approval: %s", body)
	}
	ftoks := regexp.MustCompile(`action="/m/` + m.ID + `/forget"[^>]*>\s*<input type="hidden" name="token" value="([A-Za-z0-9_-]+)"`).FindStringSubmatch(body)
	if ftoks == nil {
		t.Fatalf("no Forget form for %s: %s", m.ID, body)
	}
	if st, body := phoneForget(t, host, d, m.ID, ftoks[1], d.base, cred); st != http.StatusForbidden || !strings.Contains(body, phone.RefusedLocal) {
		t.Errorf("forget from this host: %d %s", st, body)
	}
	onceID, _, onceDone = askFor(t, agent, "once.example")
	_, _, reqTok := phoneGet(t, pc, d, "/r/"+onceID, cred)
	if st, body := phoneForget(t, pc, d, m.ID, reqTok, d.base, cred); st != http.StatusForbidden || !strings.Contains(body, "used already") {
		t.Errorf("forget with a request page's token: %d %s", st, body)
	}
	if l := d.srv.Remembered(); len(l) != 1 {
		t.Fatal("a refused forget ended the remembered approval")
	}
	d.srv.Decide(onceID, false, "", "pixel")
	<-onceDone

	phoneStep(t, tab, "opening the first page",
		chromedp.Navigate(d.base+"/"),
		chromedp.WaitVisible(chromedp.CSS("#forget-"+m.ID)),
	)
	if got := phoneText(t, tab, "ul.remembered"); !strings.Contains(got, "mail.example") || !strings.Contains(got, "approved by phone:pixel on the phone") {
		t.Errorf("the remembered approval shows %q", got)
	}
	phoneShot(t, tab, shots, "phone-remembered.png")
	phoneStep(t, tab, "forgetting",
		chromedp.Click(chromedp.CSS("#forget-"+m.ID)),
		chromedp.WaitVisible(chromedp.CSS("h1.ok")),
	)
	if l := d.srv.Remembered(); len(l) != 0 {
		t.Fatalf("still remembered after Forget: %+v", l)
	}
	if id3, _, _ := askFor(t, agent, "mail.example"); id3 == "" {
		t.Fatal("after Forget the request was issued at once")
	}
}
