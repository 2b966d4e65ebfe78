package phone

import (
	"context"
	"crypto/tls"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/duration"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/parley-keyd/parley-keyd/notify"
)

// Requests is what the phone page needs from the daemon.
type Requests interface {
	// Pending lists the waiting requests, as the daemon rendered them.
	Pending() []protocol.PendingView
	// Decide approves or denies request id for the paired device named
	// device, with the match code the human typed. The daemon records the
	// decision as made on the phone channel.
	Decide(id string, approve bool, match, device string) error
}

// Remembering is what the phone page needs from the daemon for remembered
// approvals (issue 24): approving with remember and ending one, each as the
// paired device named device, and listing them all (the page is an
// approver). A page without it offers none.
type Remembering interface {
	DecideRemember(id, match, device, remember string) error
	Remembered() []protocol.RememberedView
	Forget(id, device, reason string) error
}

// Options configure a Phone.
type Options struct {
	// Requests is the daemon whose waiting requests the page shows.
	Requests Requests
	// Listen is the host:port to listen on (keyd.Config.Phone.Listen).
	Listen string
	// URL is the page's base address as put into QR codes
	// (keyd.Config.PhoneURL). Approvals must come from this origin.
	URL string
	// State is the daemon's state folder: certificate and paired devices.
	State string
	// Logf receives operational messages; nil discards them.
	Logf func(format string, args ...any)
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Stop, when set, puts a Stop button on the page: a paired device
	// that presses it calls Stop with its name, which locks the daemon
	// (every request refused until an approver unlocks it).
	Stop func(device string) error
	// Alert, when set, returns what the page shows above the requests in
	// red, or "": the daemon's audit log failed verification and it
	// issues nothing until an admin acknowledges the damage.
	Alert func() string
	// Remember, when set, offers "Approve for …" beside Approve for the
	// requests that offer it, and lists the remembered approvals with a
	// Forget button.
	Remember Remembering
}

// Phone is the phone page: an HTTPS server on a LAN address where a paired
// phone sees the requests routed to it and approves or denies them.
//
// An approval is accepted only when all of these hold: the request comes
// from a paired device (its credential cookie, checked against the device
// file at every request); it carries the one-time token of a request page
// shown to that device for that request; its Origin (or Referer) is the
// page's own; and it comes from an address that is not one of this host's
// (loopback included). The last makes the phone a strong channel: an agent
// on this machine can read the page but cannot approve from here.
type Page struct {
	reqs    Requests
	devices *Devices
	origin  string
	base    string
	listen  string
	cert    tls.Certificate
	info    CertInfo
	logf    func(string, ...any)
	now     func() time.Time
	tmpl    *template.Template
	isLocal func(net.IP) bool
	stop    func(device string) error
	alert   func() string
	remem   Remembering

	mu     sync.Mutex
	tokens map[string]pageToken // by hash of the token

	srv *http.Server
	ln  net.Listener
}

// pageToken binds a request page to the device it was shown to.
type pageToken struct {
	device  string
	request string
	expires time.Time
}

// Limits of the phone page. Attack: a client that holds connections open or
// sends huge headers or bodies to exhaust the daemon's memory; a paired
// device that opens pages without end to grow the token table.
const (
	maxPhoneConns   = 64
	maxPhoneBody    = 16 << 10
	maxPhoneHeaders = 16 << 10
	maxPageTokens   = 256
	pageTokenTTL    = 10 * time.Minute
	maxCodeLen      = 16
)

// DeviceCookie is the cookie holding a paired phone's credential. The
// __Host- prefix makes the browser accept it only when set Secure, for
// Path=/ and without a Domain: another site cannot plant or widen it.
const DeviceCookie = "__Host-parley-device"

// deviceCookieAge is how long a phone keeps its credential; every page it
// opens renews it.
const deviceCookieAge = 400 * 24 * time.Hour

// RefusedLocal is the message of an approval from one of this host's own
// addresses.
const RefusedLocal = "approvals from this machine are not accepted; use your phone"

//go:embed templates/*.html templates/phone.css
var phoneFiles embed.FS

// New makes the phone page, creating its certificate in the state
// folder when needed. It does not listen yet; see Start or Handler.
func New(o Options) (*Page, error) {
	if o.Requests == nil || o.State == "" || o.URL == "" {
		return nil, errors.New("notify: the phone page needs the daemon, the state folder and its URL")
	}
	u, err := url.Parse(o.URL)
	if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("the phone page's URL %q must be https://HOST:PORT with no path", o.URL)
	}
	hosts, err := Hosts(o.Listen, o.URL)
	if err != nil {
		return nil, err
	}
	p := &Page{
		reqs:    o.Requests,
		devices: OpenDevices(o.State),
		origin:  originOf(u),
		base:    strings.TrimRight(o.URL, "/"),
		listen:  o.Listen,
		logf:    o.Logf,
		now:     o.Now,
		isLocal: localAddress,
		tokens:  map[string]pageToken{},
		stop:    o.Stop,
		alert:   o.Alert,
		remem:   o.Remember,
	}
	if p.logf == nil {
		p.logf = func(string, ...any) {}
	}
	if p.now == nil {
		p.now = time.Now
	}
	p.cert, p.info, err = EnsureCert(o.State, hosts, p.now())
	if err != nil {
		return nil, err
	}
	if p.info.Made {
		p.logf("phone page: made a new certificate for %s, SHA-256 %s", strings.Join(p.info.Hosts, ", "), p.info.Fingerprint)
	}
	p.tmpl, err = template.ParseFS(phoneFiles, "templates/*.html")
	if err != nil {
		return nil, err
	}
	return p, nil
}

// originOf is the origin a browser sends for pages under u: the default
// port is left out.
func originOf(u *url.URL) string {
	host := strings.ToLower(u.Host)
	if h, port, err := net.SplitHostPort(host); err == nil && port == "443" {
		host = h
		if strings.Contains(h, ":") {
			host = "[" + h + "]"
		}
	}
	return "https://" + host
}

// Cert describes the page's certificate.
func (p *Page) Cert() CertInfo { return p.info }

// Start listens on the configured address and serves the page over TLS in
// the background until Close.
func (p *Page) Start() error {
	ln, err := net.Listen("tcp", p.listen)
	if err != nil {
		return fmt.Errorf("phone page: %w", err)
	}
	p.Serve(ln)
	return nil
}

// Serve serves the page over TLS on ln in the background until Close. Call
// it once, instead of Start.
func (p *Page) Serve(ln net.Listener) {
	p.ln = &limitListener{Listener: ln, isLocal: p.isLocal}
	p.srv = &http.Server{
		Handler: p.Handler(),
		TLSConfig: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{p.cert},
		},
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    maxPhoneHeaders,
		ErrorLog:          log.New(logfWriter(p.logf), "phone page: ", 0),
	}
	go func() {
		if err := p.srv.ServeTLS(p.ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			p.logf("phone page stopped: %v", err)
		}
	}()
}

// Addr is the address the page listens on, once started.
func (p *Page) Addr() net.Addr {
	if p.ln == nil {
		return nil
	}
	return p.ln.Addr()
}

// Close stops the page, giving open requests a few seconds to finish.
func (p *Page) Close() error {
	if p.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		return p.srv.Close()
	}
	return nil
}

// Start makes the phone page and starts serving it.
func Start(o Options) (*Page, error) {
	p, err := New(o)
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

type logfWriter func(string, ...any)

func (f logfWriter) Write(b []byte) (int, error) {
	f("%s", strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// maxPhoneConnsPerAddr caps the connections one address may hold open.
// Attack: a local agent holding every connection slot with keep-alives, so
// that the human's phone, the only strong channel, cannot load the page.
// Every address of this host counts as one: a local process can bind any of
// the 2^24 loopback addresses, and any other address the kernel delivers
// here (localAddress), so counting them apart would let it hold every slot.
const maxPhoneConnsPerAddr = 4

// thisHost is the key under which limitListener counts the connections of
// every local address together.
const thisHost = "this host"

// limitListener holds at most maxPhoneConns connections open, and at most
// maxPhoneConnsPerAddr from one address, every address of this host
// counting as one. A connection past either cap is closed at once: the
// phone's next connection, from its own address, is served.
type limitListener struct {
	net.Listener
	isLocal func(net.IP) bool
	mu      sync.Mutex
	open    int
	perIP   map[string]int
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := l.addrKey(c.RemoteAddr())
		l.mu.Lock()
		if l.perIP == nil {
			l.perIP = map[string]int{}
		}
		if l.open >= maxPhoneConns || l.perIP[key] >= maxPhoneConnsPerAddr {
			l.mu.Unlock()
			c.Close()
			continue
		}
		l.open++
		l.perIP[key]++
		l.mu.Unlock()
		release := sync.OnceFunc(func() {
			l.mu.Lock()
			l.open--
			if l.perIP[key]--; l.perIP[key] <= 0 {
				delete(l.perIP, key)
			}
			l.mu.Unlock()
		})
		return &limitConn{Conn: c, release: release}, nil
	}
}

// addrKey is the address a connection counts against: its IP, or thisHost
// for any local one (and for one that cannot be read: fail closed).
func (l *limitListener) addrKey(a net.Addr) string {
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return thisHost
	}
	if i := strings.IndexByte(host, '%'); i >= 0 {
		host = host[:i]
	}
	ip := net.ParseIP(host)
	if ip == nil || l.isLocal(ip) {
		return thisHost
	}
	return ip.String()
}

type limitConn struct {
	net.Conn
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

var requestIDRE = regexp.MustCompile(`^r_[a-z0-9]{1,32}$`)

// Handler serves the phone page's routes. Start serves it over TLS; tests
// may serve it themselves.
func (p *Page) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", p.index)
	mux.HandleFunc("GET /pair", p.pairPage)
	mux.HandleFunc("POST /pair", p.pair)
	mux.HandleFunc("GET /r/{id}", p.requestPage)
	mux.HandleFunc("POST /r/{id}/decide", p.decide)
	mux.HandleFunc("POST /stop", p.stopPressed)
	mux.HandleFunc("POST /m/{id}/forget", p.forgetPressed)
	mux.HandleFunc("GET /static/phone.css", func(w http.ResponseWriter, r *http.Request) {
		b, _ := phoneFiles.ReadFile("templates/phone.css")
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Write(b)
	})
	return securityHeaders(mux)
}

// securityHeaders sets the headers every response carries and bounds the
// request body.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// Attack: clickjacking (framing the page to trick a tap on
		// Approve) and injected content; the page needs nothing but
		// itself, and runs no script at all.
		h.Set("Content-Security-Policy", "default-src 'self'; script-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Frame-Options", "DENY")
		// Attack: the request URL (with a pairing token) leaking to
		// another site through the Referer header. Not "no-referrer":
		// under it browsers send "Origin: null" with the page's own
		// forms, and the origin check below needs the real one.
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		r.Body = http.MaxBytesReader(w, r.Body, maxPhoneBody)
		next.ServeHTTP(w, r)
	})
}

// page is what every template gets.
type page struct {
	Heading   string
	Device    string
	Kind      string // "ok", "bad" or ""
	Lines     []string
	Back      bool
	Name      string
	Token     string
	View      protocol.PendingView
	Remaining string
	Requests  []protocol.PendingView
	StopToken string // the Stop button's one-time token; "" shows no button
	Alert     string // shown above the requests (Options.Alert)
	// RememberButtons are the request page's "Approve for …" buttons.
	RememberButtons []rememberButton
	// Remembered are the index page's remembered approvals.
	Remembered []rememberedRow
}

// rememberButton is one "Approve for …" button: its action value and label.
type rememberButton struct{ Action, Label string }

// rememberedRow is one remembered approval on the index page, with its
// Forget button's one-time token.
type rememberedRow struct {
	View  protocol.RememberedView
	Until string
	Token string
}

// rememberAction starts the action value of an "Approve for …" button:
// "remember-2h".
const rememberAction = "remember-"

// rememberedIDRE is what a remembered approval's id looks like.
var rememberedIDRE = regexp.MustCompile(`^m_[a-z0-9]{1,32}$`)

// rememberButtons are the "Approve for …" buttons of v: its remember
// choices, when the page can remember at all.
func (p *Page) rememberButtons(v protocol.PendingView) []rememberButton {
	if p.remem == nil || v.Kind != "grant" {
		return nil
	}
	var out []rememberButton
	for _, c := range v.Remember {
		out = append(out, rememberButton{Action: rememberAction + c, Label: "Approve for " + notify.RememberWords(c)})
	}
	return out
}

// rememberedRows lists the remembered approvals, each with a Forget token
// for dev; nil when the page cannot remember.
func (p *Page) rememberedRows(dev Device, now time.Time) []rememberedRow {
	if p.remem == nil {
		return nil
	}
	var out []rememberedRow
	for _, v := range p.remem.Remembered() {
		if !rememberedIDRE.MatchString(v.ID) {
			continue
		}
		until := time.Unix(v.Until, 0)
		out = append(out, rememberedRow{View: v, Until: until.Format("15:04") + " (" + remaining(until.Sub(now)) + ")",
			Token: p.issueToken(dev.ID, forgetTarget(v.ID), now, now.Add(pageTokenTTL))})
	}
	return out
}

// forgetTarget is what a Forget button's token is bound to: never a
// request id, so that no request page's token can forget.
func forgetTarget(id string) string { return "forget " + id }

func (p *Page) render(w http.ResponseWriter, status int, name string, pg page) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	var b strings.Builder
	if err := p.tmpl.ExecuteTemplate(&b, name, pg); err != nil {
		p.logf("phone page: template %s: %v", name, err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(status)
	io.WriteString(w, b.String())
}

func (p *Page) message(w http.ResponseWriter, status int, kind, heading string, lines ...string) {
	p.render(w, status, "message", page{Heading: heading, Kind: kind, Lines: lines})
}

// device returns the paired device of r, and renews its cookie.
func (p *Page) device(w http.ResponseWriter, r *http.Request) (Device, bool) {
	c, err := r.Cookie(DeviceCookie)
	if err != nil {
		return Device{}, false
	}
	dev, ok, err := p.devices.Authenticate(c.Value)
	if err != nil {
		p.logf("phone page: reading the paired devices: %v", err)
		return Device{}, false
	}
	if ok && w != nil {
		p.setCookie(w, c.Value)
	}
	return dev, ok
}

func (p *Page) setCookie(w http.ResponseWriter, cred string) {
	http.SetCookie(w, &http.Cookie{
		Name: DeviceCookie, Value: cred, Path: "/",
		MaxAge: int(deviceCookieAge / time.Second),
		// Attack: the credential read by script (HttpOnly), sent over
		// plain HTTP (Secure), or sent with a cross-site form post that
		// rides on it (SameSite=Strict).
		Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode,
	})
}

func (p *Page) notPaired(w http.ResponseWriter) {
	p.message(w, http.StatusForbidden, "bad", "This phone is not paired",
		"Pair it first: on the computer, the admin runs “parley-keyd pair” and you scan the code it shows. If you just did, type the four-digit code this phone showed where “parley-keyd pair” is waiting.")
}

// phoneRequests lists the waiting requests that the phone may decide.
func (p *Page) phoneRequests() []protocol.PendingView {
	var out []protocol.PendingView
	for _, v := range p.reqs.Pending() {
		if slices.Contains(v.Channels, "phone") {
			out = append(out, v)
		}
	}
	return out
}

func (p *Page) index(w http.ResponseWriter, r *http.Request) {
	dev, ok := p.device(w, r)
	if !ok {
		p.notPaired(w)
		return
	}
	alert := ""
	if p.alert != nil {
		alert = p.alert()
	}
	p.render(w, http.StatusOK, "index", page{Heading: "Waiting requests", Device: dev.Name, Requests: p.phoneRequests(),
		StopToken: p.stopToken(dev.ID), Alert: alert, Remembered: p.rememberedRows(dev, p.now())})
}

// pairPage shows what opening a pairing link does, with a button that
// pairs. Opening the link alone changes nothing: a link previewer or
// prefetcher that fetches it must not use up the one-time token.
func (p *Page) pairPage(w http.ResponseWriter, r *http.Request) {
	token := r.URL.Query().Get("t")
	name, ok := p.devices.pairingName(token, p.now())
	if !ok {
		p.message(w, http.StatusForbidden, "bad", "This pairing link does not work",
			ErrPairingInvalid.Error()+". Ask the admin for a new one: parley-keyd pair.")
		return
	}
	p.render(w, http.StatusOK, "pair", page{Heading: "Pair this phone", Name: name, Token: token})
}

func (p *Page) pair(w http.ResponseWriter, r *http.Request) {
	if msg := p.refuseForged(r); msg != "" {
		p.logf("phone page: refused a pairing from %s (origin %q): %s", r.RemoteAddr, truncate(r.Header.Get("Origin"), 80), msg)
		p.message(w, http.StatusForbidden, "bad", "Refused", msg)
		return
	}
	// A phone pairs from the LAN. Attack: an agent on this machine that
	// saw a pairing link (a terminal's scrollback) pairing itself.
	if p.fromThisHost(r) {
		p.message(w, http.StatusForbidden, "bad", "Refused", "pairing from this machine is not accepted; open the link on your phone")
		return
	}
	if msg := twiceInForm(r); msg != "" {
		p.message(w, http.StatusBadRequest, "bad", "Not paired", msg)
		return
	}
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	dev, cred, err := p.devices.Pair(r.PostFormValue("t"), host, p.now())
	if errors.Is(err, ErrPairingInvalid) {
		p.message(w, http.StatusForbidden, "bad", "This pairing link does not work",
			err.Error()+". Ask the admin for a new one: parley-keyd pair.")
		return
	}
	if err != nil {
		p.logf("phone page: pairing: %v", err)
		p.message(w, http.StatusInternalServerError, "bad", "Pairing failed", err.Error())
		return
	}
	p.logf("phone page: paired %s (%s) from %s, waiting for its confirmation code", dev.Name, dev.ID, r.RemoteAddr)
	p.setCookie(w, cred)
	p.render(w, http.StatusOK, "message", page{Heading: "Almost paired", Kind: "ok", Device: dev.Name,
		Lines: []string{
			"This phone is paired as “" + dev.Name + "” once you confirm it. Type this code where “parley-keyd pair” is waiting:",
			dev.Code,
			"Until then it can approve nothing. Then, when an agent asks for something that may be approved here, scan the code it shows, or open the waiting requests."}})
}

func (p *Page) findRequest(w http.ResponseWriter, id string) (protocol.PendingView, bool) {
	if v, ok := p.phoneRequest(id); ok {
		return v, true
	}
	p.message(w, http.StatusNotFound, "bad", "Nothing to approve",
		"No request "+truncate(id, 40)+" is waiting for the phone: it was approved, denied, withdrawn or timed out, or it may not be approved here.")
	return protocol.PendingView{}, false
}

func (p *Page) requestPage(w http.ResponseWriter, r *http.Request) {
	dev, ok := p.device(w, r)
	if !ok {
		p.notPaired(w)
		return
	}
	v, ok := p.findRequest(w, r.PathValue("id"))
	if !ok {
		return
	}
	now := p.now()
	token := p.issueToken(dev.ID, v.ID, now, time.Unix(v.Expires, 0))
	p.render(w, http.StatusOK, "request", page{Heading: v.Title, Device: dev.Name, View: v, Token: token,
		Remaining: remaining(time.Unix(v.Expires, 0).Sub(now)), StopToken: p.stopToken(dev.ID), RememberButtons: p.rememberButtons(v)})
}

// phoneRequest is the waiting request id routed to the phone.
func (p *Page) phoneRequest(id string) (protocol.PendingView, bool) {
	if requestIDRE.MatchString(id) {
		for _, v := range p.phoneRequests() {
			if v.ID == id {
				return v, true
			}
		}
	}
	return protocol.PendingView{}, false
}

// mustDuration is a remember choice the daemon offered as a duration (0
// when it is not one).
func mustDuration(s string) time.Duration {
	d, _ := duration.Parse(s)
	return d
}

// forgetPressed ends a remembered approval from its Forget button, with the
// checks of a decision: not from this host, a same-origin form, a paired
// device, and a one-time token the index page gave that device for it.
// postingDevice is the one guard of every form that changes something (a
// decision, a forget): it refuses, through refuse or with heading, a post
// from this host (the strong-channel property: an agent on this machine may
// reach the page, but nothing it sends from here decides), a cross-site
// post (a page elsewhere posting a form here while the phone's browser
// holds the device cookie), a form naming a field twice, and a phone that
// is not paired. It returns the paired device that posted.
func (p *Page) postingDevice(w http.ResponseWriter, r *http.Request, refuse func(string), heading string) (Device, bool) {
	if p.fromThisHost(r) {
		refuse(RefusedLocal)
		return Device{}, false
	}
	if msg := p.refuseForged(r); msg != "" {
		refuse(msg)
		return Device{}, false
	}
	if msg := twiceInForm(r); msg != "" {
		p.message(w, http.StatusBadRequest, "bad", heading, msg)
		return Device{}, false
	}
	dev, ok := p.device(nil, r)
	if !ok {
		refuse("this phone is not paired; pair it first")
		return Device{}, false
	}
	return dev, true
}

func (p *Page) forgetPressed(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	refuse := func(msg string) {
		p.logf("phone page: refused a forget of %q from %s (origin %q): %s", truncate(id, 40), r.RemoteAddr, truncate(r.Header.Get("Origin"), 80), msg)
		p.message(w, http.StatusForbidden, "bad", "Refused", msg)
	}
	if p.remem == nil || !rememberedIDRE.MatchString(id) {
		p.message(w, http.StatusNotFound, "bad", "Nothing to end", "No remembered approval "+truncate(id, 40)+".")
		return
	}
	dev, ok := p.postingDevice(w, r, refuse, "Nothing ended")
	if !ok {
		return
	}
	if !p.useToken(r.PostFormValue("token"), dev.ID, forgetTarget(id), p.now()) {
		refuse("this page was used already or has expired; open it again")
		return
	}
	err := p.remem.Forget(id, dev.Name, "forgotten on the phone")
	var ke *protocol.Error
	switch {
	case err == nil:
		p.render(w, http.StatusOK, "message", page{Heading: "Ended", Kind: "ok", Device: dev.Name, Back: true,
			Lines: []string{"Remembered approval " + id + " has ended: no grant is issued under it any more."}})
	case errors.As(err, &ke) && ke.Code == protocol.CodeNotFound:
		p.render(w, http.StatusNotFound, "message", page{Heading: "Nothing to end", Kind: "bad", Device: dev.Name, Back: true,
			Lines: []string{"Remembered approval " + id + " had ended already."}})
	case errors.As(err, &ke):
		p.render(w, http.StatusForbidden, "message", page{Heading: "Refused", Kind: "bad", Device: dev.Name, Back: true, Lines: []string{ke.Message}})
	default:
		p.logf("phone page: forgetting %q: %v", id, err)
		p.message(w, http.StatusInternalServerError, "bad", "Nothing ended", "the daemon failed to end it")
	}
}

func remaining(d time.Duration) string {
	switch {
	case d <= 0:
		return "expiring now"
	case d < time.Minute:
		return fmt.Sprintf("%d s left", int(d.Seconds()))
	}
	return fmt.Sprintf("%d min left", int(d.Round(time.Minute).Minutes()))
}

func (p *Page) decide(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	refuse := func(msg string) {
		p.logf("phone page: refused a decision on %q from %s (origin %q): %s", truncate(id, 40), r.RemoteAddr, truncate(r.Header.Get("Origin"), 80), msg)
		p.message(w, http.StatusForbidden, "bad", "Refused", msg)
	}
	dev, ok := p.postingDevice(w, r, refuse, "Nothing decided")
	if !ok {
		return
	}
	// Attack: replaying a decision, or deciding a request the device never
	// saw. The token is used up here whatever follows.
	if !p.useToken(r.PostFormValue("token"), dev.ID, id, p.now()) {
		refuse("this page was used already or has expired; open the request again")
		return
	}
	var approve bool
	remember := ""
	switch action := r.PostFormValue("action"); {
	case action == "approve":
		approve = true
	case action == "deny":
	case strings.HasPrefix(action, rememberAction):
		// Only a choice the request's page offered: the daemon would
		// take any length up to the rule's, which the human never saw.
		remember = strings.TrimPrefix(action, rememberAction)
		v, ok := p.phoneRequest(id)
		if !ok || !slices.ContainsFunc(p.rememberButtons(v), func(b rememberButton) bool { return b.Action == action }) {
			p.message(w, http.StatusBadRequest, "bad", "Nothing decided", "this request may not be approved for "+truncate(remember, 16)+"; open it again")
			return
		}
		approve = true
	default:
		p.message(w, http.StatusBadRequest, "bad", "Nothing decided", "choose Approve or Deny")
		return
	}
	code := strings.TrimSpace(r.PostFormValue("code"))
	if len(code) > maxCodeLen {
		code = code[:maxCodeLen]
	}
	if approve && code == "" {
		p.message(w, http.StatusBadRequest, "bad", "Nothing decided", "enter the code shown where the agent asked, then approve")
		return
	}
	var err error
	if remember != "" {
		err = p.remem.DecideRemember(id, code, dev.Name, remember)
	} else {
		err = p.reqs.Decide(id, approve, code, dev.Name)
	}
	var ke *protocol.Error
	switch {
	case err == nil && remember != "":
		p.render(w, http.StatusOK, "message", page{Heading: "Approved for " + notify.RememberWords(remember), Kind: "ok", Device: dev.Name, Back: true,
			Lines: []string{"Request " + id + " is approved; until " + p.now().Add(mustDuration(remember)).Format("15:04") +
				" the same request from the same agent and user is approved at once.", "End it at any time under Remembered approvals on the first page."}})
	case err == nil && approve:
		p.render(w, http.StatusOK, "message", page{Heading: "Approved", Kind: "ok", Device: dev.Name, Back: true,
			Lines: []string{"Request " + id + " is approved; the agent gets its grant."}})
	case err == nil:
		p.render(w, http.StatusOK, "message", page{Heading: "Denied", Kind: "bad", Device: dev.Name, Back: true,
			Lines: []string{"Request " + id + " is denied."}})
	case errors.As(err, &ke) && ke.Code == protocol.CodeDenied:
		p.render(w, http.StatusOK, "message", page{Heading: "Denied", Kind: "bad", Device: dev.Name, Back: true,
			Lines: []string{"denied: the code did not match", "If the code on the computer differed, someone else's request may have raced yours."}})
	case errors.As(err, &ke) && ke.Code == protocol.CodeNotFound:
		p.render(w, http.StatusNotFound, "message", page{Heading: "Nothing to approve", Kind: "bad", Device: dev.Name, Back: true,
			Lines: []string{"Request " + id + " is no longer waiting: it was decided elsewhere, withdrawn or timed out."}})
	case errors.As(err, &ke):
		p.render(w, http.StatusForbidden, "message", page{Heading: "Refused", Kind: "bad", Device: dev.Name, Back: true,
			Lines: []string{ke.Message}})
	default:
		p.logf("phone page: deciding %q: %v", id, err)
		p.message(w, http.StatusInternalServerError, "bad", "Nothing decided", "the daemon failed to decide the request")
	}
}

// twiceInForm returns why r's form has more than one reading, or "": a
// field sent twice, of which PostFormValue would take the first and another
// reader the last (DESIGN.md property 9). The page's own forms never send
// one.
func twiceInForm(r *http.Request) string {
	if r.ParseForm() != nil {
		return "" // an unreadable form has no values: the checks that follow refuse it
	}
	for k, vs := range r.PostForm {
		if len(vs) > 1 {
			return fmt.Sprintf("the form carries the field %q twice; open the page again", truncate(k, 40))
		}
	}
	return ""
}

// refuseForged returns why r is not a same-origin form post, or "".
func (p *Page) refuseForged(r *http.Request) string {
	// Browsers send Sec-Fetch-Site with every request; when present it
	// must say the form came from the page itself.
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return "the form did not come from this page"
	}
	if o := r.Header.Get("Origin"); o != "" {
		if o != p.origin {
			return "the form did not come from this page"
		}
		return ""
	}
	// No Origin (old browsers): the Referer must be ours.
	ref := r.Header.Get("Referer")
	if ref == "" {
		return "the form did not say where it came from"
	}
	u, err := url.Parse(ref)
	if err != nil || originOf(u) != p.origin {
		return "the form did not come from this page"
	}
	return ""
}

// fromThisHost reports whether r came from one of this host's addresses.
func (p *Page) fromThisHost(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return true // fail closed
	}
	if i := strings.IndexByte(host, '%'); i >= 0 {
		host = host[:i]
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return true
	}
	return p.isLocal(ip)
}

// localAddress reports whether ip is loopback, unspecified, an address of
// one of this host's interfaces, or any other address the kernel delivers to
// this host (kernelLocal), read at every call so that an address added after
// start counts. An error reading them counts as local.
func localAddress(ip net.IP) bool {
	if ip.IsLoopback() || ip.IsUnspecified() || kernelLocal(ip) {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true
	}
	for _, a := range addrs {
		var aip net.IP
		switch a := a.(type) {
		case *net.IPNet:
			aip = a.IP
		case *net.IPAddr:
			aip = a.IP
		}
		if aip != nil && aip.Equal(ip) {
			return true
		}
	}
	return false
}

// issueToken returns a new one-time token for device to decide request,
// valid until the request expires or pageTokenTTL passes.
func (p *Page) issueToken(device, request string, now, reqExpires time.Time) string {
	tok := randomToken()
	exp := now.Add(pageTokenTTL)
	if reqExpires.Before(exp) {
		exp = reqExpires
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for h, t := range p.tokens {
		if !now.Before(t.expires) {
			delete(p.tokens, h)
		}
	}
	for len(p.tokens) >= maxPageTokens {
		// Full of live tokens: the oldest page stops working first.
		var oldest string
		for h, t := range p.tokens {
			if oldest == "" || t.expires.Before(p.tokens[oldest].expires) {
				oldest = h
			}
		}
		delete(p.tokens, oldest)
	}
	p.tokens[hashSecret(tok)] = pageToken{device: device, request: request, expires: exp}
	return tok
}

// useToken consumes tok and reports whether it was issued to device for
// request and has not expired. A token is gone after its first use, even a
// failed one.
func (p *Page) useToken(tok, device, request string, now time.Time) bool {
	if tok == "" || len(tok) > 128 {
		return false
	}
	h := hashSecret(tok)
	p.mu.Lock()
	t, ok := p.tokens[h]
	delete(p.tokens, h)
	p.mu.Unlock()
	return ok && t.device == device && t.request == request && now.Before(t.expires)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
