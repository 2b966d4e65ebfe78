package desktop

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/parley-keyd/parley-keyd/notify"

	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/godbus/dbus/v5"

	"github.com/parley-keyd/parley-keyd/grant/lens"
)

// The freedesktop notification service (Desktop Notifications Specification 1.2).
const (
	notifyName  = "org.freedesktop.Notifications"
	notifyPath  = dbus.ObjectPath("/org/freedesktop/Notifications")
	notifyIface = "org.freedesktop.Notifications"
)

// AppName is the application name every notification carries.
const AppName = "parley-keyd"

// Urgency levels of the "urgency" hint.
const (
	UrgencyLow      byte = 0
	UrgencyNormal   byte = 1
	UrgencyCritical byte = 2
)

// Reasons a notification server gives in NotificationClosed.
const (
	ClosedExpired   uint32 = 1
	ClosedDismissed uint32 = 2
	ClosedByCall    uint32 = 3
)

// Action is one button (or menu entry) of a notification: Key comes back in
// ActionInvoked, Label is what the human reads.
type Action struct {
	Key   string
	Label string
}

// Notification is what Notify shows.
type Notification struct {
	// ReplacesID replaces an earlier notification in place; 0 shows a new one.
	ReplacesID uint32
	// Icon is an icon name or file:// URI; may be empty.
	Icon string
	// Summary is one line. It is sent as it is: callers make it plain text.
	Summary string
	// Body is sent as it is: callers escape markup when the server parses it
	// (see Desktop.Markup).
	Body    string
	Actions []Action
	Urgency byte
	// ImagePath is sent as the "image-path" hint when not empty.
	ImagePath string
	// Expire is the expire_timeout in milliseconds: 0 never expires, -1 is
	// the server's default.
	Expire int32
}

// Event is a signal from the notification server about one of the
// notifications: Action is set for ActionInvoked, Closed (with Reason) for
// NotificationClosed.
type Event struct {
	ID     uint32
	Action string
	Closed bool
	Reason uint32
}

// Desktop shows notifications through org.freedesktop.Notifications on one
// D-Bus connection and reports what the human does with them. Its methods are
// safe for concurrent use.
type Desktop struct {
	conn   *dbus.Conn
	obj    dbus.BusObject
	caps   []string
	sigs   chan *dbus.Signal
	events chan Event

	mu    sync.Mutex
	owner string // the unique bus name of the notification server
}

// Dial connects to the bus at address, or to the session bus when
// address is empty (see SessionBusAddress), and returns a Desktop on that
// connection. Close closes the connection.
func Dial(address string) (*Desktop, error) {
	if address == "" {
		var err error
		if address, err = SessionBusAddress(); err != nil {
			return nil, err
		}
	}
	conn, err := dbus.Connect(address)
	if err != nil {
		return nil, fmt.Errorf("connect to the session bus: %w", err)
	}
	d, err := New(conn)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return d, nil
}

// SessionBusAddress returns the session bus of the desktop session this
// process runs in: $DBUS_SESSION_BUS_ADDRESS, else the systemd user bus at
// $XDG_RUNTIME_DIR/bus. Unlike godbus it never starts a bus of its own
// (dbus-launch): a new bus would have no notification server and no human.
func SessionBusAddress() (string, error) {
	if a := os.Getenv("DBUS_SESSION_BUS_ADDRESS"); a != "" {
		return a, nil
	}
	if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
		p := filepath.Join(dir, "bus")
		if fi, err := os.Stat(p); err == nil && fi.Mode().Type() == os.ModeSocket {
			return "unix:path=" + dbus.EscapeBusAddressValue(p), nil
		}
	}
	return "", errors.New("no session bus: neither DBUS_SESSION_BUS_ADDRESS nor $XDG_RUNTIME_DIR/bus is set")
}

// New returns a Desktop on conn. It asks the notification server for
// its capabilities and subscribes to ActionInvoked and NotificationClosed, so
// it fails when no notification server answers.
func New(conn *dbus.Conn) (*Desktop, error) {
	d := &Desktop{
		conn:   conn,
		obj:    conn.Object(notifyName, notifyPath),
		sigs:   make(chan *dbus.Signal, 64),
		events: make(chan Event, 64),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.obj.CallWithContext(ctx, notifyIface+".GetCapabilities", 0).Store(&d.caps); err != nil {
		return nil, fmt.Errorf("no notification server answers on the session bus: %w", err)
	}
	if _, err := d.lookupOwner(ctx); err != nil {
		return nil, err
	}
	for _, member := range []string{"ActionInvoked", "NotificationClosed"} {
		if err := conn.AddMatchSignalContext(ctx, dbus.WithMatchObjectPath(notifyPath),
			dbus.WithMatchInterface(notifyIface), dbus.WithMatchMember(member)); err != nil {
			return nil, fmt.Errorf("subscribe to %s: %w", member, err)
		}
	}
	conn.Signal(d.sigs)
	go d.translate()
	return d, nil
}

// Capabilities returns what the notification server said it supports.
func (d *Desktop) Capabilities() []string { return slices.Clone(d.caps) }

// Markup reports whether the server parses markup in bodies, in which case
// a body must have <, > and & escaped (see EscapeMarkup).
func (d *Desktop) Markup() bool { return slices.Contains(d.caps, "body-markup") }

// Notify shows n and returns the server's id for it.
func (d *Desktop) Notify(n Notification) (uint32, error) {
	actions := make([]string, 0, 2*len(n.Actions))
	for _, a := range n.Actions {
		actions = append(actions, a.Key, a.Label)
	}
	hints := map[string]dbus.Variant{"urgency": dbus.MakeVariant(n.Urgency)}
	if n.ImagePath != "" {
		hints["image-path"] = dbus.MakeVariant(n.ImagePath)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var id uint32
	err := d.obj.CallWithContext(ctx, notifyIface+".Notify", 0, AppName, n.ReplacesID, n.Icon,
		n.Summary, n.Body, actions, hints, n.Expire).Store(&id)
	if err != nil {
		return 0, fmt.Errorf("show notification: %w", err)
	}
	return id, nil
}

// CloseNotification closes notification id. Closing one that is already
// gone is not an error.
func (d *Desktop) CloseNotification(id uint32) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.obj.CallWithContext(ctx, notifyIface+".CloseNotification", 0, id).Err; err != nil {
		return fmt.Errorf("close notification %d: %w", id, err)
	}
	return nil
}

// Events delivers ActionInvoked and NotificationClosed from the notification
// server. It is closed when the bus connection closes.
func (d *Desktop) Events() <-chan Event { return d.events }

// Close closes the bus connection.
func (d *Desktop) Close() error { return d.conn.Close() }

func (d *Desktop) lookupOwner(ctx context.Context) (string, error) {
	var owner string
	if err := d.conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetNameOwner", 0, notifyName).Store(&owner); err != nil {
		return "", fmt.Errorf("no notification server owns %s: %w", notifyName, err)
	}
	d.mu.Lock()
	d.owner = owner
	d.mu.Unlock()
	return owner, nil
}

// fromServer reports whether a signal was sent by the notification server.
// Attack: any program on the session bus may broadcast a forged
// ActionInvoked naming our notification; only the server's own count. (An
// agent running as the same user can still reach the server itself, which is
// why such approvals are weak.)
func (d *Desktop) fromServer(sender string) bool {
	d.mu.Lock()
	owner := d.owner
	d.mu.Unlock()
	if sender == owner {
		return true
	}
	// The server may have been restarted under a new unique name.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	owner, err := d.lookupOwner(ctx)
	return err == nil && sender == owner
}

func (d *Desktop) translate() {
	defer close(d.events)
	for s := range d.sigs {
		if s.Path != notifyPath || !d.fromServer(s.Sender) {
			continue
		}
		switch s.Name {
		case notifyIface + ".ActionInvoked":
			var ev Event
			if len(s.Body) == 2 && dbus.Store(s.Body, &ev.ID, &ev.Action) == nil {
				d.events <- ev
			}
		case notifyIface + ".NotificationClosed":
			ev := Event{Closed: true}
			if len(s.Body) == 2 && dbus.Store(s.Body, &ev.ID, &ev.Reason) == nil {
				d.events <- ev
			}
		}
	}
}

var _ Screen = (*Desktop)(nil)

// EscapeMarkup escapes the characters that freedesktop body markup gives a
// meaning to, so that the text shows as it is.
func EscapeMarkup(s string) string { return markupEscaper.Replace(s) }

var markupEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// plainSummary makes a summary line that no server can read as markup. The
// specification says summaries are plain text, but some servers (dunst) pass
// them through their markup parser, and escaping would show "&lt;" on the
// others; look-alike characters read the same on both.
func plainSummary(s string) string {
	return strings.NewReplacer("&", "＆", "<", "‹", ">", "›").Replace(lens.SafeText(s, 200))
}

// Decider is the daemon side of the approver: *client.Client.
type Decider interface {
	Approve(ctx context.Context, id, match, channel string) error
	Deny(ctx context.Context, id, channel string) error
}

var _ Decider = (*client.Client)(nil)

// RememberDecider is a Decider that can also approve with remember (issue
// 24): *client.Client. An approver whose Decider is not one offers no
// "Approve for …" action.
type RememberDecider interface {
	ApproveWith(ctx context.Context, id, match, channel string, o client.ApproveOptions) error
}

var _ RememberDecider = (*client.Client)(nil)

// RememberActionPrefix starts the action key of an "Approve for …" button:
// "remember-2h". Choosing it shows the request again with the codes, which
// then approve it with that remember.
const RememberActionPrefix = "remember-"

// rememberPattern is what a remember choice looks like ("15m", "2h",
// "1h30m"); it becomes part of an action key.
var rememberPattern = regexp.MustCompile(`^[0-9][0-9a-z]{0,15}$`)

// Screen is where the approver shows notifications: *Desktop.
type Screen interface {
	Notify(n Notification) (uint32, error)
	CloseNotification(id uint32) error
	Events() <-chan Event
	Markup() bool
}

// DesktopChannel is the approval channel the approver decides through.
const DesktopChannel = "desktop"

// DenyAction is the action key of the Deny button.
const DenyAction = "deny"

// WeakLine opens the body of every notification of a weak approver.
const WeakLine = "Weak approval: an agent running as your user could click this too."

// ApproverOptions configure an Approver.
type ApproverOptions struct {
	// Weak says the approver's user may also act as an agent (the daemon's
	// manifest: Caller.Weak). Requests that need a strong channel are then
	// not shown, and the others say that the approval is weak.
	Weak bool
	// QRDir is a private folder for QR images of phone links; empty shows
	// no QR images.
	QRDir string
	// Logf receives one line per thing worth knowing; nil discards.
	Logf func(format string, args ...any)
	// Timeout bounds each call to the daemon; 0 means 15 seconds.
	Timeout time.Duration
}

// Approver shows pending requests routed to the desktop as notifications and
// relays the human's choice to the daemon over the "desktop" channel. Pending
// and Ended never block, so they may be called from the client's read loop
// (client.Client.Watch); Run does the work.
type Approver struct {
	d    Decider
	s    Screen
	opts ApproverOptions

	mu    sync.Mutex
	inbox []approverMsg
	wake  chan struct{}

	// Owned by Run.
	shown    map[string]*shownRequest // by request id
	byNotify map[uint32]*shownRequest
	ended    endedSet
}

type shownRequest struct {
	view protocol.PendingView
	// offered are the match codes the notification offered as actions:
	// none when it was too long to show whole.
	offered []string
	// remembers are the remember choices the notification offered as
	// "Approve for …" actions; remember is the one chosen, which the codes
	// of this notification then approve with.
	remembers []string
	remember  string
	notify    uint32
	image     string
	timer     *time.Timer
}

type approverMsg struct {
	pending *protocol.PendingView
	ended   string
	reason  string
	outcome string
	expired string
	alarm   string
}

// NewApprover returns an approver that decides through d and shows
// notifications on s. Call Run to start it.
func NewApprover(d Decider, s Screen, opts ApproverOptions) *Approver {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 15 * time.Second
	}
	return &Approver{d: d, s: s, opts: opts, wake: make(chan struct{}, 1),
		shown: map[string]*shownRequest{}, byNotify: map[uint32]*shownRequest{}}
}

// Pending queues v to be shown. It never blocks.
func (a *Approver) Pending(v protocol.PendingView) { a.push(approverMsg{pending: &v}) }

// Ended queues the end of request id, whose notification is then closed. It
// never blocks.
func (a *Approver) Ended(id, outcome, reason string) {
	a.push(approverMsg{ended: id, outcome: outcome, reason: reason})
}

func (a *Approver) push(m approverMsg) {
	a.mu.Lock()
	a.inbox = append(a.inbox, m)
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

func (a *Approver) take() []approverMsg {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := a.inbox
	a.inbox = nil
	return m
}

// Run shows and decides until ctx ends or the screen's events stop (the bus
// connection closed). Before it returns it closes every notification it
// showed, since nobody is left to act on them.
func (a *Approver) Run(ctx context.Context) error {
	defer a.closeAll()
	events := a.s.Events()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-a.wake:
			// What the screen reported before the wake-up comes first: a
			// notification the human already dismissed is not closed again,
			// and a click is seen before the request's end.
			for drained := false; !drained; {
				select {
				case ev, ok := <-events:
					if !ok {
						return errors.New("the session bus connection closed")
					}
					a.event(ctx, ev)
				default:
					drained = true
				}
			}
			for _, m := range a.take() {
				a.handle(m)
			}
		case ev, ok := <-events:
			if !ok {
				return errors.New("the session bus connection closed")
			}
			a.event(ctx, ev)
		}
	}
}

func (a *Approver) handle(m approverMsg) {
	switch {
	case m.pending != nil:
		a.show(*m.pending)
	case m.ended != "":
		a.ended.add(m.ended)
		if r := a.shown[m.ended]; r != nil {
			a.opts.Logf("request %s ended (%s%s); closing its notification", m.ended, m.outcome, reasonSuffix(m.reason))
			a.forget(r, true)
		}
	case m.alarm != "":
		a.alarm(m.alarm)
	case m.expired != "":
		if r := a.shown[m.expired]; r != nil {
			a.opts.Logf("request %s has expired; closing its notification", m.expired)
			a.forget(r, true)
		}
	}
}

// codePattern is what a match code looks like. Codes become action keys, so
// anything else (such as the key "default", which servers give a meaning) is
// refused.
var codePattern = regexp.MustCompile(`^[0-9]{1,8}$`)

func (a *Approver) show(v protocol.PendingView) {
	switch {
	case a.shown[v.ID] != nil || a.ended.has(v.ID):
		// WATCH may send a request twice (once from its first listing,
		// once as news), or after its end: show it once, and never
		// after it ended.
		return
	case !slices.Contains(v.Channels, DesktopChannel):
		return
	case v.Strong && a.opts.Weak:
		a.opts.Logf("request %s needs a strong channel; it is not offered here, because this approver's user may also act as an agent", v.ID)
		return
	case len(v.Choices) == 0:
		a.opts.Logf("request %s came without match codes to offer; not shown", v.ID)
		return
	}
	actions := make([]Action, 0, len(v.Choices)+1)
	for _, c := range v.Choices {
		if !codePattern.MatchString(c) || slices.ContainsFunc(actions, func(x Action) bool { return x.Key == c }) {
			a.opts.Logf("request %s came with a malformed match code; not shown", v.ID)
			return
		}
		actions = append(actions, Action{Key: c, Label: "Code " + c})
	}
	if !protocol.FitsNotification(v) {
		// A notification shows a few lines; what the human approves must
		// be shown whole (DESIGN.md property 8). So a longer request gets
		// its summary and a pointer to where it is shown whole, and no
		// code to approve it with: only Deny.
		actions = actions[:0]
	}
	r := &shownRequest{view: v}
	for _, act := range actions {
		r.offered = append(r.offered, act.Key)
	}
	if _, ok := a.d.(RememberDecider); ok && len(r.offered) > 0 && v.Kind == "grant" {
		// "Approve for 2 h" beside the codes, only for what the daemon
		// offers to remember (a GRANT shown whole under a rule that
		// allows it). It approves nothing itself: it shows the request
		// again, and a code there approves it with that remember.
		for _, c := range v.Remember {
			if !rememberPattern.MatchString(c) || slices.Contains(r.remembers, c) {
				a.opts.Logf("request %s came with a malformed remember choice; not offered", v.ID)
				r.remembers = nil
				break
			}
			r.remembers = append(r.remembers, c)
		}
		for _, c := range r.remembers {
			actions = append(actions, Action{Key: RememberActionPrefix + c, Label: "Approve for " + RememberWords(c)})
		}
	}
	actions = append(actions, Action{Key: DenyAction, Label: "Deny"})
	if v.Link != "" && a.opts.QRDir != "" {
		img, err := writeQRImage(a.opts.QRDir, v.ID, v.Link)
		if err != nil {
			a.opts.Logf("request %s: no QR image for its phone link: %v", v.ID, err)
		} else {
			r.image = img
		}
	}
	n := Notification{
		Summary: plainSummary(v.Title),
		Body:    a.body(v, r),
		Actions: actions,
		Urgency: UrgencyCritical,
		Expire:  0,
	}
	if r.image != "" {
		n.ImagePath = (&url.URL{Scheme: "file", Path: r.image}).String()
	}
	a.present(r, n)
}

// present shows n for r and keeps r until the request ends or is decided.
func (a *Approver) present(r *shownRequest, n Notification) {
	v := r.view
	id, err := a.s.Notify(n)
	if err != nil {
		a.opts.Logf("request %s: %v", v.ID, err)
		removeImage(r.image)
		return
	}
	r.notify = id
	a.shown[v.ID] = r
	a.byNotify[id] = r
	if v.Expires > 0 {
		// The daemon ends every request by its expiry and says so; this
		// timer only makes sure a lost "ended" cannot leave buttons up.
		reqID := v.ID
		r.timer = time.AfterFunc(time.Until(time.Unix(v.Expires, 0))+2*time.Second, func() {
			a.push(approverMsg{expired: reqID})
		})
	}
	a.opts.Logf("request %s shown as notification %d", v.ID, id)
}

// body is what the notification says: the daemon's rendering, made safe for
// display once more (defence in depth: it already is), then escaped for
// servers that parse markup.
func (a *Approver) body(v protocol.PendingView, r *shownRequest) string {
	var b strings.Builder
	if a.opts.Weak {
		b.WriteString(WeakLine + "\n")
	}
	if r.remember != "" {
		fmt.Fprintf(&b, "Approving for %s: until then the same request from the same agent and user is approved at once.\n", RememberWords(r.remember))
	}
	if protocol.FitsNotification(v) {
		b.WriteString(strings.TrimRight(lens.SafeLines(v.Text, 0), "\n"))
		b.WriteString("\nChoose the code shown where the agent asked. A wrong code denies the request.")
		if len(r.remembers) > 0 {
			b.WriteString("\nOr choose \"Approve for …\" to keep approving this same request for that long; the codes follow.")
		}
	} else {
		fmt.Fprintf(&b, "%s\n", lens.SafeText(v.Summary, 0))
		fmt.Fprintf(&b, "This request is %d lines long, more than a notification shows whole, so it cannot be approved here.\n", v.Lines)
		fmt.Fprintf(&b, "Read it whole and decide in a terminal: parley-grant approve %s", lens.SafeText(v.ID, 64))
	}
	if v.Link != "" {
		fmt.Fprintf(&b, "\nOr approve it on your phone: %s", lens.SafeText(v.Link, 400))
	}
	if a.s.Markup() {
		return EscapeMarkup(b.String())
	}
	return b.String()
}

func (a *Approver) event(ctx context.Context, ev Event) {
	r := a.byNotify[ev.ID]
	if r == nil {
		return // someone else's notification, or one already decided
	}
	id := r.view.ID
	if ev.Closed {
		// Dismissed: the request stays pending for the other channels.
		a.opts.Logf("notification for request %s closed; the request still waits for the other channels", id)
		a.forget(r, false)
		return
	}
	var err error
	switch {
	case ev.Action == DenyAction:
		a.forget(r, true)
		err = a.decide(ctx, func(ctx context.Context) error { return a.d.Deny(ctx, id, DesktopChannel) })
		if err == nil {
			a.opts.Logf("request %s denied on the desktop", id)
		}
	case strings.HasPrefix(ev.Action, RememberActionPrefix) && slices.Contains(r.remembers, strings.TrimPrefix(ev.Action, RememberActionPrefix)):
		// "Approve for 2 h" approves nothing yet: the request comes back
		// with its codes, which then approve it with that remember.
		a.forget(r, true)
		a.showRemember(r.view, r.offered, strings.TrimPrefix(ev.Action, RememberActionPrefix))
		return
	case slices.Contains(r.offered, ev.Action):
		// Only a code the notification offered approves: a request shown
		// with Deny only (too long to show whole, property 8) is never
		// approved here, whatever action the server reports.
		// Each notification decides once: a second click finds it gone.
		a.forget(r, true)
		if rd, ok := a.d.(RememberDecider); ok && r.remember != "" {
			err = a.decide(ctx, func(ctx context.Context) error {
				return rd.ApproveWith(ctx, id, ev.Action, DesktopChannel, client.ApproveOptions{Remember: r.remember})
			})
			if err == nil {
				a.opts.Logf("request %s approved on the desktop, remembered for %s", id, r.remember)
				a.followUp(fmt.Sprintf("Request %s approved and remembered for %s. See remembered approvals with: parley-grant remembered; end one at any time with: parley-grant forget ID",
					id, RememberWords(r.remember)))
			}
			break
		}
		err = a.decide(ctx, func(ctx context.Context) error { return a.d.Approve(ctx, id, ev.Action, DesktopChannel) })
		if err == nil {
			a.opts.Logf("request %s approved on the desktop", id)
		}
	default:
		return // "default" (a click on the body) or another key: not a decision
	}
	if err == nil {
		return
	}
	why := err.Error()
	var e *protocol.Error
	if errors.As(err, &e) {
		why = e.Message
	}
	msg := fmt.Sprintf("Request %s: %s", id, lens.SafeText(why, 300))
	if e != nil && e.Code == protocol.CodeDenied {
		msg = fmt.Sprintf("Request %s was denied: the code you chose did not match the code shown where the agent asked.", id)
	}
	a.opts.Logf("request %s: %v", id, err)
	a.followUp(msg)
}

// showRemember shows request v again after "Approve for …" was chosen: the
// same rendering with the codes it offered and Deny, each code approving it
// with remember.
func (a *Approver) showRemember(v protocol.PendingView, codes []string, remember string) {
	r := &shownRequest{view: v, offered: codes, remember: remember}
	actions := make([]Action, 0, len(codes)+1)
	for _, c := range codes {
		actions = append(actions, Action{Key: c, Label: "Code " + c})
	}
	actions = append(actions, Action{Key: DenyAction, Label: "Deny"})
	a.present(r, Notification{
		Summary: plainSummary("For " + RememberWords(remember) + ": " + v.Title),
		Body:    a.body(v, r),
		Actions: actions,
		Urgency: UrgencyCritical,
		Expire:  0,
	})
}

// RememberWords is notify.RememberWords.
func RememberWords(choice string) string { return notify.RememberWords(choice) }

func (a *Approver) decide(ctx context.Context, call func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, a.opts.Timeout)
	defer cancel()
	return call(ctx)
}

// Alarm shows text as a critical notification that stays until dismissed:
// for what the human must not miss, such as an audit log that contradicts
// the checkpoint kept of it.
func (a *Approver) Alarm(text string) { a.push(approverMsg{alarm: text}) }

func (a *Approver) alarm(text string) {
	text = lens.SafeText(text, 600)
	if a.s.Markup() {
		text = EscapeMarkup(text)
	}
	if _, err := a.s.Notify(Notification{Summary: "parley-keyd: the audit log was altered", Body: text, Urgency: UrgencyCritical, Expire: 0}); err != nil {
		a.opts.Logf("%v", err)
	}
}

// followUp shows a short note that expires on the server's default timeout.
func (a *Approver) followUp(text string) {
	if a.s.Markup() {
		text = EscapeMarkup(text)
	}
	_, err := a.s.Notify(Notification{Summary: "parley-keyd", Body: text, Urgency: UrgencyNormal, Expire: -1})
	if err != nil {
		a.opts.Logf("%v", err)
	}
}

// forget drops r, closing its notification when close is set.
func (a *Approver) forget(r *shownRequest, close bool) {
	delete(a.shown, r.view.ID)
	delete(a.byNotify, r.notify)
	if r.timer != nil {
		r.timer.Stop()
	}
	removeImage(r.image)
	if close {
		if err := a.s.CloseNotification(r.notify); err != nil {
			a.opts.Logf("%v", err)
		}
	}
}

func (a *Approver) closeAll() {
	for _, r := range a.shown {
		a.forget(r, true)
	}
}

func removeImage(path string) {
	if path != "" {
		os.Remove(path)
	}
}

// writeQRImage writes a PNG of link as a QR code to dir and returns its path.
func writeQRImage(dir, id, link string) (string, error) {
	png, err := notify.QRPNG(link)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "qr-"+filepath.Base(id)+".png")
	if err := os.WriteFile(path, png, 0o600); err != nil {
		return "", err
	}
	return path, nil
}

// endedSet remembers the last request ids that ended, so that a stale
// "pending" arriving after its "ended" shows nothing.
type endedSet struct {
	ids  []string
	next int
}

const endedMemory = 256

func (s *endedSet) add(id string) {
	if len(s.ids) < endedMemory {
		s.ids = append(s.ids, id)
		return
	}
	s.ids[s.next] = id
	s.next = (s.next + 1) % endedMemory
}

func (s *endedSet) has(id string) bool { return slices.Contains(s.ids, id) }

func reasonSuffix(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + lens.SafeText(reason, 200)
}
