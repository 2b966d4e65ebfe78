// Package testdesktop runs a private desktop for tests: a dbus-daemon with a
// configuration of its own (no service activation, nothing shared with the
// host's buses), an Xvfb display, and the dunst notification server on both.
// dunst's context menu, opened with `dunstctl context`, runs a script in
// place of dmenu that records the menu it was offered and picks the entry the
// test asked for, so a test can press a notification's buttons through the
// real server.
//
// A test that needs the desktop calls Start. When a program is missing the
// test is skipped, or fails when PARLEY_REQUIRE_PEERS=1 (see testpeer). The
// Debian packages are dbus-daemon, dbus-bin, dunst, xvfb and imagemagick.
// Every process is stopped when the test ends, pass or fail.
package testdesktop

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
)

// Programs the desktop needs, with the Debian package of each.
var programs = []struct{ bin, pkg string }{
	{"dbus-daemon", "dbus-daemon"},
	{"dbus-send", "dbus-bin"},
	{"Xvfb", "xvfb"},
	{"dunst", "dunst"},
	{"dunstctl", "dunst"},
	{"import", "imagemagick"},
}

// Wait is how long the helpers wait for the desktop to reach a state.
const Wait = 10 * time.Second

// Session is one running private desktop.
type Session struct {
	// Dir holds the configuration files, the logs and the bus socket.
	Dir string
	// Bus is the D-Bus address of the private bus.
	Bus string
	// Display is the X display, such as ":3".
	Display string

	conn  *dbus.Conn
	dunst *proc
}

type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  string
}

// Start runs a private dbus-daemon, Xvfb and dunst, and returns once dunst
// owns org.freedesktop.Notifications on the private bus.
func Start(t testing.TB) *Session {
	t.Helper()
	for _, p := range programs {
		if _, err := exec.LookPath(p.bin); err != nil {
			testpeer.Unavailable(t, fmt.Sprintf("needs %s (Debian package %s) for a private desktop", p.bin, p.pkg))
		}
	}
	// A folder of its own, not t.TempDir: a Unix socket path must stay
	// short, and test names can be long.
	dir, err := os.MkdirTemp("", "parley-desktop-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &Session{Dir: dir}

	s.Bus = s.startBus(t)
	s.Display = s.startX(t)
	s.conn, err = dbus.Connect(s.Bus)
	if err != nil {
		t.Fatalf("connect to the private bus: %v", err)
	}
	t.Cleanup(func() { s.conn.Close() })
	s.startDunst(t)
	return s
}

// Env is the environment a client of this desktop needs: the bus and the
// display, on top of the current environment.
func (s *Session) Env() []string {
	env := make([]string, 0, len(os.Environ())+2)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "DBUS_SESSION_BUS_ADDRESS", "DISPLAY", "WAYLAND_DISPLAY":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "DBUS_SESSION_BUS_ADDRESS="+s.Bus, "DISPLAY="+s.Display)
}

func (s *Session) start(t testing.TB, name string, env []string, extra []*os.File, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, done: make(chan struct{}), log: filepath.Join(s.Dir, name+".log")}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = s.Dir
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.ExtraFiles = extra
	// Its own process group, so that a signal to the test does not reach
	// it first and the cleanup below decides when it stops.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s log:\n%s", name, b)
		}
	})
	return p
}

// stop ends the process: SIGTERM, then SIGKILL if it lingers.
func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// readLine reads the first line a process writes to r, failing the test if
// the process exits or the deadline passes first.
func readLine(t testing.TB, p *proc, r *os.File) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		got <- strings.TrimSpace(line)
	}()
	select {
	case line := <-got:
		if line == "" {
			t.Fatalf("%s wrote nothing where it announces itself", p.name)
		}
		return line
	case <-p.done:
		b, _ := os.ReadFile(p.log)
		t.Fatalf("%s exited early (%v): %s", p.name, p.err, b)
	case <-time.After(Wait):
		t.Fatalf("%s did not start within %s", p.name, Wait)
	}
	return ""
}

// busConfig is a session bus that activates no services (so nothing of the
// host starts on it) and lets its clients talk freely.
const busConfig = `<busconfig>
  <type>session</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`

func (s *Session) startBus(t testing.TB) string {
	t.Helper()
	conf := filepath.Join(s.Dir, "bus.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, busConfig, filepath.Join(s.Dir, "bus")), 0o644); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p := s.start(t, "dbus-daemon", minimalEnv(), []*os.File{w}, "dbus-daemon",
		"--config-file="+conf, "--nofork", "--nopidfile", "--print-address=3")
	w.Close()
	return readLine(t, p, r)
}

func (s *Session) startX(t testing.TB) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// -displayfd picks a free display and writes its number once the
	// server accepts connections.
	p := s.start(t, "Xvfb", minimalEnv(), []*os.File{w}, "Xvfb",
		"-displayfd", "3", "-screen", "0", "1024x768x24", "-nolisten", "tcp", "-noreset")
	w.Close()
	n := readLine(t, p, r)
	if _, err := strconv.Atoi(n); err != nil {
		t.Fatalf("Xvfb announced display %q", n)
	}
	return ":" + n
}

func minimalEnv() []string {
	return []string{"PATH=" + os.Getenv("PATH"), "LANG=C.UTF-8"}
}

// dunstConfig keeps notifications readable in a screenshot and routes the
// context menu to the script.
const dunstConfig = `[global]
    monitor = 0
    follow = none
    width = 620
    height = 600
    origin = top-right
    offset = 10x10
    notification_limit = 0
    font = DejaVu Sans 10
    markup = full
    format = "<b>%%s</b>\n%%b"
    alignment = left
    show_indicators = yes
    stack_duplicates = false
    sticky_history = yes
    history_length = 50
    icon_position = left
    min_icon_size = 0
    max_icon_size = 200
    frame_width = 2
    padding = 8
    horizontal_padding = 8
    dmenu = %s
    browser = /bin/false
    ignore_dbusclose = false
    mouse_left_click = close_current
    mouse_middle_click = do_action, close_current
    mouse_right_click = close_all
[urgency_low]
    background = "#222222"
    foreground = "#ffffff"
    timeout = 30
[urgency_normal]
    background = "#285577"
    foreground = "#ffffff"
    timeout = 30
[urgency_critical]
    background = "#900000"
    foreground = "#ffffff"
    frame_color = "#ff0000"
    timeout = 0
`

// dmenuScript stands in for dmenu. dunst writes the menu to its stdin, one
// entry a line ("#Label (summary) [id,key]" for an action); the script keeps
// a copy and prints the action entry whose key the test wrote to "want", or
// nothing, which chooses nothing.
const dmenuScript = `#!/bin/sh
dir='%s'
menu=$(cat)
want=$(cat "$dir/want" 2>/dev/null)
printf '%%s\n' "$menu" > "$dir/menu.tmp"
mv "$dir/menu.tmp" "$dir/menu"
if [ -n "$want" ]; then
	printf '%%s\n' "$menu" | grep -E "\[[0-9]+,$want\]\$" | head -n 1
fi
`

func (s *Session) startDunst(t testing.TB) {
	t.Helper()
	script := filepath.Join(s.Dir, "dmenu.sh")
	if err := os.WriteFile(script, fmt.Appendf(nil, dmenuScript, s.Dir), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(s.Dir, "dunstrc")
	if err := os.WriteFile(conf, fmt.Appendf(nil, dunstConfig, script), 0o644); err != nil {
		t.Fatal(err)
	}
	// Watch for the name before starting dunst, so the signal cannot be
	// missed.
	sigs := make(chan *dbus.Signal, 8)
	s.conn.Signal(sigs)
	defer s.conn.RemoveSignal(sigs)
	if err := s.conn.AddMatchSignal(dbus.WithMatchInterface("org.freedesktop.DBus"),
		dbus.WithMatchMember("NameOwnerChanged"), dbus.WithMatchArg(0, "org.freedesktop.Notifications")); err != nil {
		t.Fatal(err)
	}
	env := append(minimalEnv(), "HOME="+s.Dir, "XDG_CONFIG_HOME="+s.Dir, "XDG_DATA_HOME="+s.Dir,
		"DBUS_SESSION_BUS_ADDRESS="+s.Bus, "DISPLAY="+s.Display)
	s.dunst = s.start(t, "dunst", env, nil, "dunst", "-config", conf)
	deadline := time.After(Wait)
	for {
		var has bool
		if err := s.conn.BusObject().Call("org.freedesktop.DBus.NameHasOwner", 0, "org.freedesktop.Notifications").Store(&has); err != nil {
			t.Fatal(err)
		}
		if has {
			return
		}
		select {
		case <-sigs:
		case <-s.dunst.done:
			b, _ := os.ReadFile(s.dunst.log)
			t.Fatalf("dunst exited early (%v): %s", s.dunst.err, b)
		case <-deadline:
			t.Fatalf("dunst did not take org.freedesktop.Notifications within %s", Wait)
		}
	}
}

// Dunstctl runs dunstctl with args against this desktop and returns its
// output.
func (s *Session) Dunstctl(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, "dunstctl", args...)
	cmd.Env = s.Env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dunstctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Displayed is the number of notifications dunst shows, as `dunstctl count
// displayed` says.
func (s *Session) Displayed(t testing.TB) int {
	t.Helper()
	out := strings.TrimSpace(s.Dunstctl(t, "count", "displayed"))
	n, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("dunstctl count displayed said %q", out)
	}
	return n
}

// WaitDisplayed waits until dunst shows exactly n notifications.
func (s *Session) WaitDisplayed(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(Wait)
	for {
		got := s.Displayed(t)
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("dunst shows %d notifications, want %d", got, n)
		}
		time.Sleep(20 * time.Millisecond) // dunst has no signal for this; poll
	}
}

var keyPattern = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Choose opens dunst's context menu with `dunstctl context` and picks the
// action whose key is key among the displayed notifications; an empty key
// picks nothing. It returns the menu dunst offered, one entry a line. At
// least one displayed notification must have actions, or dunst opens no
// menu.
func (s *Session) Choose(t testing.TB, key string) []string {
	t.Helper()
	if key != "" && !keyPattern.MatchString(key) {
		t.Fatalf("action key %q cannot be chosen by the menu script", key)
	}
	menu := filepath.Join(s.Dir, "menu")
	os.Remove(menu)
	if err := os.WriteFile(filepath.Join(s.Dir, "want"), []byte(key), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(Wait)
	var asked time.Time
	for {
		// dunst refuses to open a menu while its previous one is still
		// finishing (after the script has written its file), and says
		// so only in its log: ask again until the script runs. Only one
		// request can succeed before the file appears, since dunst
		// refuses the others while the menu runs.
		if time.Since(asked) > 200*time.Millisecond {
			s.Dunstctl(t, "context")
			asked = time.Now()
		}
		b, err := os.ReadFile(menu)
		if err == nil {
			return strings.FieldsFunc(string(b), func(r rune) bool { return r == '\n' })
		}
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("dunst did not run the menu script within %s", Wait)
		}
		time.Sleep(10 * time.Millisecond) // the script's only sign is the file; poll
	}
}

// HistoryEntry is a notification in dunst's history: it was closed.
type HistoryEntry struct {
	ID      int32
	AppName string
	Summary string
	Body    string
}

// History lists the notifications dunst has closed, newest first, as
// dunst's own NotificationListHistory (what `dunstctl history` prints) says.
func (s *Session) History(t testing.TB) []HistoryEntry {
	t.Helper()
	var raw []map[string]dbus.Variant
	err := s.conn.Object("org.freedesktop.Notifications", "/org/freedesktop/Notifications").
		Call("org.dunstproject.cmd0.NotificationListHistory", 0).Store(&raw)
	if err != nil {
		t.Fatalf("dunst history: %v", err)
	}
	out := make([]HistoryEntry, 0, len(raw))
	for _, m := range raw {
		var e HistoryEntry
		m["id"].Store(&e.ID)
		m["appname"].Store(&e.AppName)
		m["summary"].Store(&e.Summary)
		m["body"].Store(&e.Body)
		out = append(out, e)
	}
	return out
}

// CloseAll closes every displayed notification (`dunstctl close-all`).
func (s *Session) CloseAll(t testing.TB) {
	t.Helper()
	s.Dunstctl(t, "close-all")
	s.WaitDisplayed(t, 0)
}

// Screenshot saves the whole screen as a PNG named name and returns its path:
// in $PARLEY_ARTIFACTS when set (kept for CI to collect), else in the test's
// temporary folder.
func (s *Session) Screenshot(t testing.TB, name string) string {
	t.Helper()
	dir := os.Getenv("PARLEY_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	safe := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name() + "-" + name)
	path := filepath.Join(dir, safe+".png")
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	cmd := exec.CommandContext(ctx, "import", "-display", s.Display, "-window", "root", "PNG:"+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("screenshot: %v: %s", err, out)
	}
	t.Logf("screenshot: %s", path)
	return path
}
