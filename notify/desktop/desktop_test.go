package desktop_test

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/parley-keyd/parley-keyd/notify/desktop"

	"github.com/google/go-cmp/cmp"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/grant/lens"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testdaemon"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testdesktop"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"github.com/parley-keyd/parley-keyd/keyd"
	"github.com/parley-keyd/parley-keyd/notify"
)

const wait = 10 * time.Second

// ---------------------------------------------------------------------------
// The approver's decisions, against a recording screen and daemon.

type screenOp struct {
	op string // "notify" or "close"
	id uint32
	n  desktop.Notification
}

// fakeScreen records what the approver shows and closes.
type fakeScreen struct {
	markup bool
	mu     sync.Mutex
	next   uint32
	ops    chan screenOp
	events chan desktop.Event
}

// The approver plugs into a server in process as well as over WATCH.
var _ keyd.Notifier = (*desktop.Approver)(nil)

func newFakeScreen(markup bool) *fakeScreen {
	return &fakeScreen{markup: markup, ops: make(chan screenOp, 32), events: make(chan desktop.Event, 8)}
}

func (s *fakeScreen) Notify(n desktop.Notification) (uint32, error) {
	s.mu.Lock()
	s.next++
	id := s.next
	s.mu.Unlock()
	s.ops <- screenOp{op: "notify", id: id, n: n}
	return id, nil
}

func (s *fakeScreen) CloseNotification(id uint32) error {
	s.ops <- screenOp{op: "close", id: id}
	return nil
}

func (s *fakeScreen) Events() <-chan desktop.Event { return s.events }
func (s *fakeScreen) Markup() bool                 { return s.markup }

func (s *fakeScreen) expect(t *testing.T, op string) screenOp {
	t.Helper()
	select {
	case got := <-s.ops:
		if got.op != op {
			t.Fatalf("screen: %s %d (%q), want %s", got.op, got.id, got.n.Body, op)
		}
		return got
	case <-time.After(wait):
		t.Fatalf("screen: no %s", op)
	}
	return screenOp{}
}

type decision struct{ Verb, ID, Match, Channel string }

// fakeDecider records decisions and answers with err.
type fakeDecider struct {
	calls chan decision
	err   error
}

func (d *fakeDecider) Approve(ctx context.Context, id, match, channel string) error {
	d.calls <- decision{"approve", id, match, channel}
	return d.err
}

func (d *fakeDecider) Deny(ctx context.Context, id, channel string) error {
	d.calls <- decision{"deny", id, "", channel}
	return d.err
}

// rememberDecider is a fakeDecider that approves with remember too.
type rememberDecider struct{ fakeDecider }

func (d *rememberDecider) ApproveWith(ctx context.Context, id, match, channel string, o client.ApproveOptions) error {
	d.calls <- decision{"approve for " + o.Remember, id, match, channel}
	return d.err
}

// actionKeys are the keys of a notification's actions.
func actionKeys(n desktop.Notification) []string {
	var out []string
	for _, a := range n.Actions {
		out = append(out, a.Key)
	}
	return out
}

// TestApproverRemember: "Approve for …" actions appear only for a grant
// the daemon offers to remember, shown whole, with a decider that can
// remember; choosing one approves nothing and shows the codes again, and a
// code there approves with that remember. A remember action the
// notification did not offer decides nothing.
func TestApproverRemember(t *testing.T) {
	offer := func(v *protocol.PendingView) { v.Remember = []string{"15m", "1h", "2h"} }
	t.Run("ok/approve-for-2h", func(t *testing.T) {
		s := newFakeScreen(false)
		d := &rememberDecider{fakeDecider{calls: make(chan decision, 4)}}
		a := startApprover(t, s, d, desktop.ApproverOptions{})
		a.Pending(view("r_a", offer))
		n := s.expect(t, "notify")
		want := []string{"31", "47", "82", "remember-15m", "remember-1h", "remember-2h", "deny"}
		if diff := cmp.Diff(want, actionKeys(n.n)); diff != "" {
			t.Fatalf("actions (-want +got):\n%s", diff)
		}
		if n.n.Actions[5].Label != "Approve for 2 h" || n.n.Actions[3].Label != "Approve for 15 min" {
			t.Errorf("labels %+v", n.n.Actions)
		}
		s.events <- desktop.Event{ID: n.id, Action: "remember-2h"}
		s.expect(t, "close")
		again := s.expect(t, "notify")
		if diff := cmp.Diff([]string{"31", "47", "82", "deny"}, actionKeys(again.n)); diff != "" {
			t.Fatalf("second notification's actions (-want +got):\n%s", diff)
		}
		if !strings.HasPrefix(again.n.Body, "Approving for 2 h:") || !strings.HasPrefix(again.n.Summary, "For 2 h: ") {
			t.Errorf("second notification %q / %q", again.n.Summary, again.n.Body)
		}
		select {
		case c := <-d.calls:
			t.Fatalf("Approve for 2 h decided %+v before a code was chosen", c)
		default:
		}
		s.events <- desktop.Event{ID: again.id, Action: "47"}
		s.expect(t, "close")
		select {
		case got := <-d.calls:
			if diff := cmp.Diff(decision{"approve for 2h", "r_a", "47", "desktop"}, got); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
		case <-time.After(wait):
			t.Fatal("no decision")
		}
		if f := s.expect(t, "notify"); !strings.Contains(f.n.Body, "remembered for 2 h") || !strings.Contains(f.n.Body, "parley-grant forget") {
			t.Errorf("follow-up %q", f.n.Body)
		}
	})
	t.Run("ok/a-code-approves-once", func(t *testing.T) {
		s := newFakeScreen(false)
		d := &rememberDecider{fakeDecider{calls: make(chan decision, 4)}}
		a := startApprover(t, s, d, desktop.ApproverOptions{})
		a.Pending(view("r_a", offer))
		s.events <- desktop.Event{ID: s.expect(t, "notify").id, Action: "31"}
		s.expect(t, "close")
		if got := <-d.calls; got != (decision{"approve", "r_a", "31", "desktop"}) {
			t.Errorf("decision %+v", got)
		}
	})
	for _, tt := range []struct {
		name string
		d    desktop.Decider
		mod  func(*protocol.PendingView)
	}{
		{"skip/not-offered-by-the-daemon", &rememberDecider{fakeDecider{calls: make(chan decision, 4)}}, func(*protocol.PendingView) {}},
		{"skip/too-long-to-show-whole", &rememberDecider{fakeDecider{calls: make(chan decision, 4)}}, func(v *protocol.PendingView) {
			offer(v)
			v.Text = strings.Repeat("  - a line\n", 20)
			v.Lines = 20
		}},
		{"skip/consent", &rememberDecider{fakeDecider{calls: make(chan decision, 4)}}, func(v *protocol.PendingView) { offer(v); v.Kind = "consent" }},
		{"skip/malformed-choice", &rememberDecider{fakeDecider{calls: make(chan decision, 4)}}, func(v *protocol.PendingView) { v.Remember = []string{"2h", "default"} }},
		{"skip/decider-cannot-remember", &fakeDecider{calls: make(chan decision, 4)}, offer},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeScreen(false)
			a := startApprover(t, s, tt.d, desktop.ApproverOptions{})
			a.Pending(view("r_a", tt.mod))
			n := s.expect(t, "notify")
			for _, k := range actionKeys(n.n) {
				if strings.HasPrefix(k, desktop.RememberActionPrefix) {
					t.Fatalf("offers %s: %v", k, actionKeys(n.n))
				}
			}
			// A remember action the server reports but the notification
			// never offered decides nothing and shows nothing.
			s.events <- desktop.Event{ID: n.id, Action: "remember-2h"}
			a.Pending(view("r_barrier"))
			if got := s.expect(t, "notify").n.Body; !strings.Contains(got, "r_barrier") {
				t.Errorf("shown %q, want the barrier request", got)
			}
		})
	}
}

func view(id string, mods ...func(*protocol.PendingView)) protocol.PendingView {
	v := protocol.PendingView{
		ID: id, Kind: "grant", Title: "tester asks for a grant",
		Text:     "Request " + id + ": a grant\nIt would allow:\n  - every verb\n",
		Channels: []string{"terminal", "desktop"},
		Choices:  []string{"31", "47", "82"},
		Expires:  time.Now().Add(time.Hour).Unix(),
	}
	for _, m := range mods {
		m(&v)
	}
	return v
}

func startApprover(t *testing.T, s desktop.Screen, d desktop.Decider, o desktop.ApproverOptions) *desktop.Approver {
	t.Helper()
	o.Logf = t.Logf
	a := desktop.NewApprover(d, s, o)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return a
}

func TestApproverShows(t *testing.T) {
	tests := []struct {
		name     string
		weak     bool
		markup   bool
		view     protocol.PendingView
		wantBody string
	}{
		{
			name: "ok/strong-approver",
			view: view("r_a"),
			wantBody: "Request r_a: a grant\nIt would allow:\n  - every verb\n" +
				"Choose the code shown where the agent asked. A wrong code denies the request.",
		},
		{
			name: "ok/weak-approver-says-so-first",
			weak: true,
			view: view("r_b"),
			wantBody: desktop.WeakLine + "\nRequest r_b: a grant\nIt would allow:\n  - every verb\n" +
				"Choose the code shown where the agent asked. A wrong code denies the request.",
		},
		{
			name:   "ok/markup-escaped",
			markup: true,
			view:   view("r_c", func(v *protocol.PendingView) { v.Text = "svc <b>bold</b> & co\n" }),
			wantBody: "svc &lt;b&gt;bold&lt;/b&gt; &amp; co\n" +
				"Choose the code shown where the agent asked. A wrong code denies the request.",
		},
		{
			name: "ok/unsafe-text-neutralized-again",
			view: view("r_d", func(v *protocol.PendingView) { v.Text = "evil \x1b[2J\u202eright-to-left\n" }),
			wantBody: lens.SafeLines("evil \x1b[2J\u202eright-to-left", 0) +
				"\nChoose the code shown where the agent asked. A wrong code denies the request.",
		},
		{
			// Property 8: a request longer than a notification shows is
			// offered only its summary and Deny, never a part for approval.
			name: "ok/too-long-summary-and-deny-only",
			view: view("r_f", func(v *protocol.PendingView) {
				v.Text = strings.Repeat("  - calendar.find\n", 20) + "  - mail.*\n"
				v.Lines = 21
				v.Summary = "21 capability patterns · until 12:00"
			}),
			wantBody: "21 capability patterns · until 12:00\n" +
				"This request is 21 lines long, more than a notification shows whole, so it cannot be approved here.\n" +
				"Read it whole and decide in a terminal: parley-grant approve r_f",
		},
		{
			name: "ok/strong-request-strong-approver",
			view: view("r_e", func(v *protocol.PendingView) { v.Strong = true; v.Text = "x\n" }),
			wantBody: "x\n" +
				"Choose the code shown where the agent asked. A wrong code denies the request.",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeScreen(tt.markup)
			a := startApprover(t, s, &fakeDecider{calls: make(chan decision, 4)}, desktop.ApproverOptions{Weak: tt.weak})
			a.Pending(tt.view)
			got := s.expect(t, "notify").n
			actions := []desktop.Action{{"31", "Code 31"}, {"47", "Code 47"}, {"82", "Code 82"}, {"deny", "Deny"}}
			if tt.view.Lines > 14 {
				actions = actions[3:]
			}
			want := desktop.Notification{
				Summary: "tester asks for a grant",
				Body:    tt.wantBody,
				Actions: actions,
				Urgency: desktop.UrgencyCritical,
				Expire:  0,
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("notification (-want +got):\n%s", diff)
			}
		})
	}
}

func TestApproverSkips(t *testing.T) {
	tests := []struct {
		name string
		weak bool
		view protocol.PendingView
	}{
		{"skip/not-routed-to-desktop", false, view("r_x", func(v *protocol.PendingView) { v.Channels = []string{"terminal", "phone"} })},
		{"skip/strong-request-weak-approver", true, view("r_x", func(v *protocol.PendingView) { v.Strong = true })},
		{"skip/no-codes", false, view("r_x", func(v *protocol.PendingView) { v.Choices = nil })},
		{"skip/code-is-not-digits", false, view("r_x", func(v *protocol.PendingView) { v.Choices = []string{"31", "default", "82"} })},
		{"skip/code-twice", false, view("r_x", func(v *protocol.PendingView) { v.Choices = []string{"31", "31", "82"} })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeScreen(false)
			a := startApprover(t, s, &fakeDecider{calls: make(chan decision, 4)}, desktop.ApproverOptions{Weak: tt.weak})
			a.Pending(tt.view)
			// The approver handles its inbox in order: once the next
			// request is shown, the first was decided on.
			a.Pending(view("r_next"))
			if got := s.expect(t, "notify"); !strings.Contains(got.n.Body, "r_next") {
				t.Errorf("shown first: %q, want only r_next", got.n.Body)
			}
		})
	}
}

func TestApproverDecides(t *testing.T) {
	denied := &protocol.Error{Code: protocol.CodeDenied, Message: "the match code does not match"}
	tests := []struct {
		name       string
		event      func(id uint32) desktop.Event
		err        error
		want       *decision
		wantFollow string // a follow-up notification's body, if any
	}{
		{
			name:  "ok/code-approves",
			event: func(id uint32) desktop.Event { return desktop.Event{ID: id, Action: "47"} },
			want:  &decision{"approve", "r_a", "47", "desktop"},
		},
		{
			name:       "fail/wrong-code-is-denied-and-says-so",
			event:      func(id uint32) desktop.Event { return desktop.Event{ID: id, Action: "82"} },
			err:        denied,
			want:       &decision{"approve", "r_a", "82", "desktop"},
			wantFollow: "Request r_a was denied: the code you chose did not match the code shown where the agent asked.",
		},
		{
			name:  "ok/deny",
			event: func(id uint32) desktop.Event { return desktop.Event{ID: id, Action: "deny"} },
			want:  &decision{"deny", "r_a", "", "desktop"},
		},
		{
			name:       "fail/daemon-refuses",
			event:      func(id uint32) desktop.Event { return desktop.Event{ID: id, Action: "31"} },
			err:        &protocol.Error{Code: protocol.CodeNotFound, Message: "no pending request \"r_a\""},
			want:       &decision{"approve", "r_a", "31", "desktop"},
			wantFollow: "Request r_a: no pending request \"r_a\"",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeScreen(false)
			d := &fakeDecider{calls: make(chan decision, 4), err: tt.err}
			a := startApprover(t, s, d, desktop.ApproverOptions{})
			a.Pending(view("r_a"))
			id := s.expect(t, "notify").id
			s.events <- tt.event(id)
			if c := s.expect(t, "close"); c.id != id {
				t.Errorf("closed %d, want %d", c.id, id)
			}
			select {
			case got := <-d.calls:
				if diff := cmp.Diff(*tt.want, got); diff != "" {
					t.Errorf("decision (-want +got):\n%s", diff)
				}
			case <-time.After(wait):
				t.Fatal("no decision")
			}
			// A second click on the same notification decides nothing.
			s.events <- tt.event(id)
			a.Pending(view("r_barrier"))
			if tt.wantFollow != "" {
				if got := s.expect(t, "notify").n.Body; got != tt.wantFollow {
					t.Errorf("follow-up %q, want %q", got, tt.wantFollow)
				}
			}
			if got := s.expect(t, "notify").n.Body; !strings.Contains(got, "r_barrier") {
				t.Errorf("shown %q, want the barrier request", got)
			}
			select {
			case c := <-d.calls:
				t.Errorf("second click decided again: %+v", c)
			default:
			}
		})
	}
}

func TestApproverLifecycle(t *testing.T) {
	t.Run("ok/ended-elsewhere-closes", func(t *testing.T) {
		s := newFakeScreen(false)
		a := startApprover(t, s, &fakeDecider{calls: make(chan decision, 4)}, desktop.ApproverOptions{})
		a.Pending(view("r_a"))
		id := s.expect(t, "notify").id
		a.Ended("r_a", "approved", "")
		if c := s.expect(t, "close"); c.id != id {
			t.Errorf("closed %d, want %d", c.id, id)
		}
	})
	t.Run("ok/dismissed-decides-nothing", func(t *testing.T) {
		s := newFakeScreen(false)
		d := &fakeDecider{calls: make(chan decision, 4)}
		a := startApprover(t, s, d, desktop.ApproverOptions{})
		a.Pending(view("r_a"))
		id := s.expect(t, "notify").id
		s.events <- desktop.Event{ID: id, Closed: true, Reason: desktop.ClosedDismissed}
		a.Ended("r_a", "timeout", "")
		a.Pending(view("r_barrier"))
		if got := s.expect(t, "notify").n.Body; !strings.Contains(got, "r_barrier") {
			t.Errorf("after a dismissal: %q, want the barrier request shown and nothing closed", got)
		}
		if len(d.calls) != 0 {
			t.Errorf("a dismissal decided: %+v", <-d.calls)
		}
	})
	t.Run("ok/alarm-stays-until-dismissed", func(t *testing.T) {
		s := newFakeScreen(false)
		a := startApprover(t, s, &fakeDecider{calls: make(chan decision, 4)}, desktop.ApproverOptions{})
		a.Alarm("the log was rolled back \x1b[2J")
		n := s.expect(t, "notify").n
		if n.Urgency != desktop.UrgencyCritical || n.Expire != 0 || len(n.Actions) != 0 || !strings.Contains(n.Body, "rolled back") || strings.Contains(n.Body, "\x1b") {
			t.Errorf("alarm shown as %+v", n)
		}
	})
	t.Run("ok/shown-once", func(t *testing.T) {
		s := newFakeScreen(false)
		a := startApprover(t, s, &fakeDecider{calls: make(chan decision, 4)}, desktop.ApproverOptions{})
		a.Pending(view("r_a"))
		a.Pending(view("r_a"))
		a.Ended("r_b", "approved", "")
		a.Pending(view("r_b")) // stale: it already ended
		a.Pending(view("r_barrier"))
		s.expect(t, "notify")
		if got := s.expect(t, "notify").n.Body; !strings.Contains(got, "r_barrier") {
			t.Errorf("shown %q, want r_a once, then r_barrier", got)
		}
	})
	t.Run("ok/others-notifications-ignored", func(t *testing.T) {
		s := newFakeScreen(false)
		d := &fakeDecider{calls: make(chan decision, 4)}
		a := startApprover(t, s, d, desktop.ApproverOptions{})
		a.Pending(view("r_a"))
		id := s.expect(t, "notify").id
		s.events <- desktop.Event{ID: id + 100, Action: "47"}
		s.events <- desktop.Event{ID: id, Action: "default"}
		a.Pending(view("r_barrier"))
		s.expect(t, "notify")
		if len(d.calls) != 0 {
			t.Errorf("decided: %+v", <-d.calls)
		}
	})
	t.Run("ok/run-end-closes-all", func(t *testing.T) {
		s := newFakeScreen(false)
		a := desktop.NewApprover(&fakeDecider{calls: make(chan decision, 4)}, s, desktop.ApproverOptions{Logf: t.Logf})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		a.Pending(view("r_a"))
		id := s.expect(t, "notify").id
		cancel()
		if c := s.expect(t, "close"); c.id != id {
			t.Errorf("closed %d, want %d", c.id, id)
		}
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v", err)
		}
	})
}

func TestApproverQRImage(t *testing.T) {
	s := newFakeScreen(false)
	dir := t.TempDir()
	a := startApprover(t, s, &fakeDecider{calls: make(chan decision, 4)}, desktop.ApproverOptions{QRDir: dir})
	link := "https://192.0.2.7:7450/r/r_qr"
	a.Pending(view("r_qr", func(v *protocol.PendingView) { v.Link = link }))
	got := s.expect(t, "notify")
	u, err := url.Parse(got.n.ImagePath)
	if err != nil || u.Scheme != "file" || filepath.Dir(u.Path) != dir {
		t.Fatalf("image-path %q, want a file:// URI in %s", got.n.ImagePath, dir)
	}
	if !strings.HasSuffix(got.n.Body, "\nOr approve it on your phone: "+link) {
		t.Errorf("body %q does not end with the phone link", got.n.Body)
	}
	if txt := zbarDecode(t, u.Path); txt != link {
		t.Errorf("the QR image holds %q, want %q", txt, link)
	}
	a.Ended("r_qr", "approved", "")
	s.expect(t, "close")
	if _, err := os.Stat(u.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("QR image left behind after the request ended: %v", err)
	}
}

func TestQRPNG(t *testing.T) {
	tests := []struct {
		name, link string
		ok         bool
	}{
		{"ok/https", "https://192.168.1.20:7450/r/r_abcdefgh", true},
		{"ok/http", "http://phone.lan/r/r_x", true},
		{"fail/javascript", "javascript:alert(1)", false},
		{"fail/relative", "/r/r_x", false},
		{"fail/too-long", "https://h/" + strings.Repeat("a", 600), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			png, err := notify.QRPNG(tt.link)
			if !tt.ok {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "qr.png")
			if err := os.WriteFile(path, png, 0o600); err != nil {
				t.Fatal(err)
			}
			if got := zbarDecode(t, path); got != tt.link {
				t.Errorf("decoded %q, want %q", got, tt.link)
			}
		})
	}
}

// zbarDecode reads the one QR code in the image at path with zbarimg.
func zbarDecode(t *testing.T, path string) string {
	t.Helper()
	if _, err := exec.LookPath("zbarimg"); err != nil {
		testpeer.Unavailable(t, "needs zbarimg (Debian package zbar-tools) to decode QR codes")
	}
	out, err := exec.Command("zbarimg", "--quiet", "--raw", "-Sdisable", "-Sqrcode.enable", path).Output()
	if err != nil {
		t.Fatalf("zbarimg %s: %v", path, err)
	}
	return strings.TrimSuffix(string(out), "\n")
}

// ---------------------------------------------------------------------------
// The real thing: a daemon on a Unix socket, a private dbus-daemon, dunst
// under Xvfb, and buttons pressed through dunst's context menu.

const desktopPolicy = `
version = 1
[[agent]]
name = "tester"
any = true
rate = 100000
pending = 8

[[rule]]
name = "strong-only"
agents = ["*"]
action = "ask"
svc = ["strong.example"]
max_exp = "1h"
channels = ["terminal", "desktop", "phone"]
strong = true

[[rule]]
name = "phone-too"
agents = ["*"]
action = "ask"
svc = ["phone.example"]
max_exp = "1h"
channels = ["terminal", "desktop", "phone"]

[[rule]]
name = "remember-desktop"
agents = ["*"]
action = "ask"
svc = ["remember.example"]
max_exp = "1h"
channels = ["terminal", "desktop"]
remember = "2h"
remember_exp = "10m"

[[rule]]
name = "ask-desktop"
agents = ["*"]
action = "ask"
svc = ["plain.example"]
max_exp = "1h"
default_exp = "15m"
channels = ["terminal", "desktop"]
`

type daemon struct {
	sock string
}

// startDaemon runs parley-keyd in this process on a socket in dir, with
// desktopPolicy and the configuration text cfg.
func startDaemon(t *testing.T, dir, cfg string) *daemon {
	t.Helper()
	d := &daemon{sock: filepath.Join(dir, "agent.sock")}
	c, err := keyd.ParseConfig([]byte(cfg), filepath.Join(dir, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	c.Socket = d.sock
	testdaemon.Start(t, c, desktopPolicy, dir)
	if err := os.Chmod(d.sock, 0o666); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *daemon) client(t *testing.T) *client.Client {
	t.Helper()
	c, err := client.Dial(d.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// runApprover connects the desktop approver as `parley-grant approver` does:
// it learns from HELLO whether it is weak, then shows what WATCH streams.
func runApprover(t *testing.T, d *daemon, s *testdesktop.Session) (weak bool) {
	t.Helper()
	desk, err := desktop.Dial(s.Bus)
	if err != nil {
		t.Fatal(err)
	}
	c := d.client(t)
	ctx, cancel := context.WithCancel(context.Background())
	man, err := c.Hello(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a := desktop.NewApprover(c, desk, desktop.ApproverOptions{Weak: man.Caller.Weak, QRDir: t.TempDir(), Logf: t.Logf})
	runDone := make(chan error, 1)
	go func() { runDone <- a.Run(ctx) }()
	go c.Watch(ctx, client.Feed{Pending: a.Pending, Ended: a.Ended})
	t.Cleanup(func() {
		cancel()
		<-runDone
		desk.Close()
	})
	return man.Caller.Weak
}

// ask is a grant request waiting for a human.
type ask struct {
	ev  protocol.Event
	res chan askResult
}

type askResult struct {
	g   *protocol.GrantResult
	err error
}

// askGrant sends a grant request from c and returns once the daemon has
// queued it and told the requester its match code.
func askGrant(t *testing.T, c *client.Client, cavs ...grant.Caveat) *ask {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	a := &ask{res: make(chan askResult, 1)}
	evs := make(chan protocol.Event, 4)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		g, err := c.Grant(ctx, key, cavs, func(e protocol.Event) { evs <- e })
		a.res <- askResult{g, err}
	}()
	select {
	case a.ev = <-evs:
	case r := <-a.res:
		t.Fatalf("the request ended before it waited for a human: %v", r.err)
	case <-time.After(wait):
		t.Fatal("no match code from the daemon")
	}
	return a
}

func (a *ask) result(t *testing.T) askResult {
	t.Helper()
	select {
	case r := <-a.res:
		return r
	case <-time.After(wait):
		t.Fatalf("request %s did not end", a.ev.Request)
	}
	return askResult{}
}

// menuEntries are dunst's context-menu lines for actions, by action key.
func menuEntries(t *testing.T, menu []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range menu {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndex(l, ",")
		if i < 0 || !strings.HasSuffix(l, "]") {
			t.Fatalf("menu entry %q", l)
		}
		out[l[i+1:len(l)-1]] = l
	}
	return out
}

func wantDenied(t *testing.T, err error) {
	t.Helper()
	var e *protocol.Error
	if !errors.As(err, &e) || e.Code != protocol.CodeDenied {
		t.Fatalf("the agent got %v, want code %s", err, protocol.CodeDenied)
	}
}

// historyFor returns dunst's history entry whose body names request id.
func historyFor(t *testing.T, s *testdesktop.Session, id string) (testdesktop.HistoryEntry, bool) {
	t.Helper()
	for _, h := range s.History(t) {
		if strings.Contains(h.Body, "Request "+id+":") {
			return h, true
		}
	}
	return testdesktop.HistoryEntry{}, false
}

func currentUser(t *testing.T) string {
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return u.Username
}

func TestDesktopWithDunst(t *testing.T) {
	s := testdesktop.Start(t)
	dir := t.TempDir()
	me := currentUser(t)
	// The agent and the approver are one user here, so approvals are weak.
	// With the phone page on, requests routed to the phone carry a link.
	// Nothing listens there: the link only goes into a QR code.
	cfg := strings.Replace(keyd.DefaultConfig(filepath.Join(dir, "agent.sock"), me, me),
		`listen = ""`, `listen = "192.0.2.7:7450"`, 1)
	d := startDaemon(t, dir, cfg)
	if weak := runApprover(t, d, s); !weak {
		t.Fatal("HELLO says the approver is not weak, but it is the agent's own user")
	}
	agent := d.client(t)
	terminal := d.client(t)
	run := func(name string, f func(t *testing.T)) {
		t.Run(name, func(t *testing.T) {
			// Whatever a failing step leaves on screen must not
			// confuse the next one.
			t.Cleanup(func() {
				if t.Failed() {
					s.Dunstctl(t, "close-all")
				}
			})
			f(t)
		})
	}

	run("ok/right-code-through-dunst", func(t *testing.T) {
		a := askGrant(t, agent, grant.Svc("plain.example"), grant.Can("mail.read"))
		s.WaitDisplayed(t, 1)
		menu := menuEntries(t, s.Choose(t, "")) // look, choose nothing
		keys := make([]string, 0, len(menu))
		for k := range menu {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if len(keys) != 4 || !slices.Contains(keys, a.ev.Code) || !slices.Contains(keys, "deny") {
			t.Fatalf("menu offers %q, want three codes (one of them %s) and deny", keys, a.ev.Code)
		}
		if e := menu[a.ev.Code]; !strings.HasPrefix(e, "#Code "+a.ev.Code+" (tester asks for a grant) [") {
			t.Errorf("menu entry %q", e)
		}
		if e := menu["deny"]; !strings.HasPrefix(e, "#Deny (tester asks for a grant) [") {
			t.Errorf("menu entry %q", e)
		}
		s.Screenshot(t, "request")

		s.Choose(t, a.ev.Code)
		r := a.result(t)
		if r.err != nil {
			t.Fatalf("the agent got %v, want a grant", r.err)
		}
		if r.g.Channel != "desktop" || r.g.Strength != "weak" || r.g.Token == "" {
			t.Errorf("grant: channel %q, strength %q, want desktop and weak", r.g.Channel, r.g.Strength)
		}
		s.WaitDisplayed(t, 0)
		h, ok := historyFor(t, s, a.ev.Request)
		if !ok {
			t.Fatal("the closed notification is not in dunst's history")
		}
		if h.AppName != desktop.AppName || !strings.HasPrefix(h.Body, desktop.WeakLine+"\n") {
			t.Errorf("history entry: app %q, body %q; want %s and the weak line first", h.AppName, h.Body, desktop.AppName)
		}
	})

	run("fail/wrong-code-denies", func(t *testing.T) {
		a := askGrant(t, agent, grant.Svc("plain.example"), grant.Can("mail.read"))
		s.WaitDisplayed(t, 1)
		menu := menuEntries(t, s.Choose(t, ""))
		wrong := ""
		for k := range menu {
			if k != a.ev.Code && k != "deny" {
				wrong = k
			}
		}
		s.Choose(t, wrong)
		wantDenied(t, a.result(t).err)
		// The request's notification is replaced by one that says why.
		s.WaitDisplayed(t, 1)
		s.Screenshot(t, "denied")
		s.CloseAll(t)
		h := s.History(t)
		if len(h) == 0 || !strings.Contains(h[0].Body, "was denied: the code you chose did not match") {
			t.Errorf("newest history entry %+v, want the denial note", h)
		}
	})

	run("ok/approve-for-2h-through-dunst", func(t *testing.T) {
		a := askGrant(t, agent, grant.Svc("remember.example"), grant.Can("mail.read"))
		s.WaitDisplayed(t, 1)
		menu := menuEntries(t, s.Choose(t, ""))
		for _, k := range []string{a.ev.Code, "deny", "remember-15m", "remember-1h", "remember-2h"} {
			if _, ok := menu[k]; !ok {
				t.Fatalf("menu %q has no %s", menu, k)
			}
		}
		if e := menu["remember-2h"]; !strings.HasPrefix(e, "#Approve for 2 h (") {
			t.Errorf("menu entry %q", e)
		}
		s.Screenshot(t, "remember-offered")
		// "Approve for 2 h" approves nothing: the request comes back with
		// its codes.
		s.Choose(t, "remember-2h")
		s.WaitDisplayed(t, 1)
		menu = menuEntries(t, s.Choose(t, ""))
		if _, ok := menu["remember-2h"]; ok || len(menu) != 4 {
			t.Fatalf("after Approve for 2 h the menu offers %q, want the three codes and deny", menu)
		}
		if list, err := terminal.Pending(context.Background()); err != nil || len(list) != 1 {
			t.Fatalf("choosing Approve for 2 h decided something: pending %+v, %v", list, err)
		}
		s.Screenshot(t, "remember-codes")
		s.Choose(t, a.ev.Code)
		if r := a.result(t); r.err != nil || r.g.Channel != "desktop" {
			t.Fatalf("the agent got %+v, want a grant approved on the desktop", r)
		}
		// The same request again is issued at once under it.
		_, key, _ := ed25519.GenerateKey(rand.Reader)
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		g, err := agent.Grant(ctx, key, []grant.Caveat{grant.Svc("remember.example"), grant.Can("mail.read")}, func(e protocol.Event) {
			t.Errorf("the remembered request waits for a human: %+v", e)
		})
		if err != nil || g.Decision != "remembered" {
			t.Fatalf("under the remembered approval: %+v, %v", g, err)
		}
		list, err := terminal.Remembered(context.Background())
		if err != nil || len(list) != 1 || list[0].Channel != "desktop" {
			t.Fatalf("remembered: %+v, %v", list, err)
		}
		if err := terminal.Forget(context.Background(), list[0].ID, "test done"); err != nil {
			t.Fatal(err)
		}
		s.CloseAll(t)
	})

	run("ok/deny-button", func(t *testing.T) {
		a := askGrant(t, agent, grant.Svc("plain.example"), grant.Can("mail.read"))
		s.WaitDisplayed(t, 1)
		s.Choose(t, "deny")
		wantDenied(t, a.result(t).err)
		s.WaitDisplayed(t, 0)
	})

	run("ok/approved-in-terminal-closes-notification", func(t *testing.T) {
		a := askGrant(t, agent, grant.Svc("plain.example"), grant.Can("mail.read"))
		s.WaitDisplayed(t, 1)
		if err := terminal.Approve(context.Background(), a.ev.Request, a.ev.Code, "terminal"); err != nil {
			t.Fatal(err)
		}
		if r := a.result(t); r.err != nil || r.g.Channel != "terminal" {
			t.Fatalf("the agent got %+v, want a grant approved in the terminal", r)
		}
		s.WaitDisplayed(t, 0)
		if _, ok := historyFor(t, s, a.ev.Request); !ok {
			t.Error("the closed notification is not in dunst's history")
		}
	})

	run("ok/dismissed-stays-pending", func(t *testing.T) {
		a := askGrant(t, agent, grant.Svc("plain.example"), grant.Can("mail.read"))
		s.WaitDisplayed(t, 1)
		s.Dunstctl(t, "close")
		s.WaitDisplayed(t, 0)
		list, err := terminal.Pending(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || list[0].ID != a.ev.Request {
			t.Fatalf("pending %+v, want %s still waiting", list, a.ev.Request)
		}
		if err := terminal.Deny(context.Background(), a.ev.Request, "terminal"); err != nil {
			t.Fatal(err)
		}
		wantDenied(t, a.result(t).err)
	})

	run("ok/phone-link-as-qr-code", func(t *testing.T) {
		a := askGrant(t, agent, grant.Svc("phone.example"), grant.Can("mail.read"))
		s.WaitDisplayed(t, 1)
		shot := s.Screenshot(t, "qr")
		link := "https://192.0.2.7:7450/r/" + a.ev.Request
		if got := zbarDecode(t, shot); got != link {
			t.Errorf("the QR code on screen holds %q, want %q", got, link)
		}
		if err := terminal.Deny(context.Background(), a.ev.Request, "terminal"); err != nil {
			t.Fatal(err)
		}
		wantDenied(t, a.result(t).err)
		s.WaitDisplayed(t, 0)
	})

	run("skip/strong-request-not-offered-to-weak-approver", func(t *testing.T) {
		strong := askGrant(t, agent, grant.Svc("strong.example"), grant.Can("mail.read"))
		if !strong.ev.Strong {
			t.Fatalf("event %+v, want a request that needs a strong channel", strong.ev)
		}
		plain := askGrant(t, agent, grant.Svc("plain.example"), grant.Can("mail.read"))
		// The approver takes requests in order: once the second is on
		// screen, it has passed over the first.
		s.WaitDisplayed(t, 1)
		var keys []string
		for k := range menuEntries(t, s.Choose(t, "")) {
			keys = append(keys, k)
		}
		want := append(codesOf(t, terminal, plain.ev.Request), "deny")
		slices.Sort(keys)
		slices.Sort(want)
		if !slices.Equal(keys, want) {
			t.Errorf("menu offers %q, want only the plain request's %q", keys, want)
		}
		if err := terminal.Approve(context.Background(), plain.ev.Request, plain.ev.Code, "terminal"); err != nil {
			t.Fatal(err)
		}
		plain.result(t)
		s.WaitDisplayed(t, 0)
		if _, ok := historyFor(t, s, strong.ev.Request); ok {
			t.Error("the strong request was shown to a weak approver")
		}
		if err := terminal.Deny(context.Background(), strong.ev.Request, "terminal"); err != nil {
			t.Fatal(err)
		}
		wantDenied(t, strong.result(t).err)
	})
}

// codesOf returns the codes the daemon offers for request id.
func codesOf(t *testing.T, c *client.Client, id string) []string {
	t.Helper()
	list, err := c.Pending(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range list {
		if v.ID == id {
			return v.Choices
		}
	}
	t.Fatalf("request %s is not pending", id)
	return nil
}

// agentHelperEnv names the socket for TestDesktopAgentHelper.
const agentHelperEnv = "PARLEY_DESKTOP_AGENT"

// TestDesktopAgentHelper is the agent of TestDesktopStrongApprover, run as
// another OS user: it asks for a grant that needs a strong channel, prints
// "asked ID CODE" once the daemon queued it, then "granted CHANNEL STRENGTH"
// or "refused CODE".
func TestDesktopAgentHelper(t *testing.T) {
	sock := os.Getenv(agentHelperEnv)
	if sock == "" {
		return // an ordinary test run: this runs only as a helper process
	}
	c, err := client.Dial(sock)
	if err != nil {
		fmt.Println("refused dial:", err)
		os.Exit(1)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := c.Grant(ctx, key, []grant.Caveat{grant.Svc("strong.example"), grant.Can("mail.read")}, func(e protocol.Event) {
		fmt.Printf("asked %s %s\n", e.Request, e.Code)
	})
	var e *protocol.Error
	switch {
	case err == nil:
		fmt.Printf("granted %s %s\n", g.Channel, g.Strength)
	case errors.As(err, &e):
		fmt.Printf("refused %s\n", e.Code)
	default:
		fmt.Printf("refused %v\n", err)
	}
	os.Exit(0)
}

// TestDesktopStrongApprover runs the agent as another OS user, so the
// approver is strong: a request that needs a strong channel is shown, without
// the weak line, and approving it through dunst gives a strong grant.
func TestDesktopStrongApprover(t *testing.T) {
	testpeer.RequirePeers(t)
	agent := testpeer.Name("agent")
	uid, gid := testpeer.EnsureUser(t, agent)
	s := testdesktop.Start(t)
	dir := testpeer.SharedDir(t)
	d := startDaemon(t, dir, keyd.DefaultConfig(filepath.Join(dir, "agent.sock"), agent, currentUser(t)))
	if weak := runApprover(t, d, s); weak {
		t.Fatal("HELLO says the approver is weak, but no agent runs as its user")
	}

	cmd := testpeer.Helper(t, uid, gid, nil, "TestDesktopAgentHelper", agentHelperEnv+"="+d.sock)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func() []string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the agent helper exited without a word")
			}
			return strings.Fields(l)
		case <-time.After(wait):
			t.Fatal("the agent helper said nothing")
		}
		return nil
	}

	asked := next()
	if len(asked) != 3 || asked[0] != "asked" {
		t.Fatalf("agent helper said %q", asked)
	}
	id, code := asked[1], asked[2]
	s.WaitDisplayed(t, 1)
	if _, ok := menuEntries(t, s.Choose(t, ""))[code]; !ok {
		t.Fatalf("the menu does not offer the match code %s", code)
	}
	s.Choose(t, code)
	if got := next(); !slices.Equal(got, []string{"granted", "desktop", "strong"}) {
		t.Errorf("agent helper said %q, want a strong grant approved on the desktop", got)
	}
	s.WaitDisplayed(t, 0)
	h, ok := historyFor(t, s, id)
	if !ok {
		t.Fatal("the closed notification is not in dunst's history")
	}
	if strings.Contains(h.Body, desktop.WeakLine) {
		t.Errorf("a strong approver's notification says it is weak: %q", h.Body)
	}
}

func TestSessionBusAddress(t *testing.T) {
	withBus := t.TempDir()
	ln, err := net.Listen("unix", filepath.Join(withBus, "bus"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tests := []struct {
		name, env, runtime, want string
	}{
		{"ok/environment", "unix:path=/run/x/bus", withBus, "unix:path=/run/x/bus"},
		{"ok/user-bus", "", withBus, "unix:path=" + filepath.Join(withBus, "bus")},
		{"fail/no-bus-socket", "", t.TempDir(), ""},
		{"fail/nothing", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("DBUS_SESSION_BUS_ADDRESS", tt.env)
			t.Setenv("XDG_RUNTIME_DIR", tt.runtime)
			got, err := desktop.SessionBusAddress()
			if tt.want == "" {
				if err == nil {
					t.Fatalf("got %q, want an error (never a bus of its own)", got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestApproverRefusesActionsNotOffered: issue 20 item 8. A request too long
// for a notification is offered with Deny only (property 8); a server that
// reports a click on one of its match codes anyway (a hostile or buggy
// notification server, or a stale action from an earlier notification)
// must approve nothing. Only the actions the notification offered decide.
func TestApproverRefusesActionsNotOffered(t *testing.T) {
	long := func(v *protocol.PendingView) {
		v.Text = strings.Repeat("  - calendar.find\n", 20)
		v.Lines = 20
	}
	for _, tt := range []struct {
		name   string
		mod    func(*protocol.PendingView)
		action string
	}{
		{"fail/real-code-on-deny-only", long, "47"},
		{"fail/other-code-on-deny-only", long, "31"},
		{"fail/default-on-deny-only", long, "default"},
		{"fail/code-not-offered", func(*protocol.PendingView) {}, "12"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeScreen(false)
			d := &fakeDecider{calls: make(chan decision, 4)}
			a := startApprover(t, s, d, desktop.ApproverOptions{})
			a.Pending(view("r_a", tt.mod))
			id := s.expect(t, "notify").id
			s.events <- desktop.Event{ID: id, Action: tt.action}
			// The approver handles its inbox and events in order: once
			// the next request is shown, the click was decided on.
			a.Pending(view("r_barrier"))
			for {
				op := s.expect(t, "notify")
				if strings.Contains(op.n.Body, "r_barrier") {
					break
				}
				t.Logf("notification %q", op.n.Body)
			}
			select {
			case c := <-d.calls:
				t.Errorf("a click on %q, which the notification did not offer, decided: %+v", tt.action, c)
			default:
			}
			// The notification still stands, and its Deny still works.
			s.events <- desktop.Event{ID: id, Action: desktop.DenyAction}
			s.expect(t, "close")
			select {
			case got := <-d.calls:
				if got != (decision{"deny", "r_a", "", "desktop"}) {
					t.Errorf("decision %+v, want the deny", got)
				}
			case <-time.After(wait):
				t.Fatal("Deny decided nothing")
			}
		})
	}
}
