// Package journal writes parley-keyd's own log lines and structured entries:
// to the systemd journal through its native socket when there is one, as
// plain lines on stderr when there is not.
//
// # Guarantees
//
//   - Every entry has a priority (syslog's levels) and may carry fields,
//     which the journal keeps as its own fields (PARLEY_AUDIT_SEQ=…). The
//     stderr fallback prints the priority (warning and above) and the
//     message, one line per entry; fields are for the journal.
//   - Flood control folds, it never drops silently. Entries share a budget
//     per key (by default the format string, or the message) and one across
//     all keys; an entry over budget is counted, and when its window ends one
//     entry says how many were folded, repeating the last one's fields. A
//     caller that floods the daemon with failing requests therefore costs a
//     few lines a second, not thousands (issue 10: one agent made the daemon
//     print 9 500–17 000 lines a second).
//   - An entry the journal refuses (journald gone, a full socket buffer) is
//     written to stderr instead.
//
// Field names follow the journal's rules (uppercase letters, digits and
// underscores, not starting with an underscore); a name that breaks them is
// rewritten, never passed on, so that journald cannot drop the entry.
package journal

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	sdjournal "github.com/coreos/go-systemd/v22/journal"
)

// Priority is a syslog priority; lower is more urgent.
type Priority int

// The priorities, as syslog(3) numbers them.
const (
	Emerg Priority = iota
	Alert
	Crit
	Err
	Warning
	Notice
	Info
	Debug
)

func (p Priority) String() string {
	switch p {
	case Emerg:
		return "emerg"
	case Alert:
		return "alert"
	case Crit:
		return "crit"
	case Err:
		return "err"
	case Warning:
		return "warning"
	case Notice:
		return "notice"
	case Info:
		return "info"
	case Debug:
		return "debug"
	}
	return "priority" + strconv.Itoa(int(p))
}

// Entry is one structured log entry.
type Entry struct {
	Priority Priority
	Message  string
	// Fields are extra journal fields, such as "PARLEY_AUDIT_SEQ". The
	// journal adds its own trusted ones (_PID, _UID, …).
	Fields map[string]string
	// Key groups entries for flood control: entries with the same key share
	// one budget and fold into one count. Empty means the message itself.
	Key string
	// Always writes the entry even over budget. It is for rare entries
	// that must be seen one by one, such as the audit log's checkpoints
	// and a log that vanished; they still use up the budget.
	Always bool
	// Budget, when above zero, gives the entry's key a budget of its own
	// for each window, instead of Options.PerKey, outside the total: the
	// audit log's records use it, so that a burst of grants neither folds
	// at the daemon's line rate nor crowds its lines out.
	Budget int
}

// Options configure a Logger. The zero value logs to the journal when it is
// reachable, else to os.Stderr, with the default budgets.
type Options struct {
	// Identifier is the journal's SYSLOG_IDENTIFIER and the prefix of
	// stderr lines ("parley-keyd: …").
	Identifier string
	// Stderr receives lines when there is no journal; nil means os.Stderr.
	Stderr io.Writer
	// NoJournal writes to Stderr even when the journal is reachable.
	NoJournal bool
	// Window is the flood-control window (default 1s). Within one window,
	// PerKey entries of one key (default 20) and Total entries in all
	// (default 400) are written; the rest are counted.
	Window time.Duration
	PerKey int
	Total  int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Logger writes entries. Its methods are safe for concurrent use.
type Logger struct {
	ident   string
	stderr  io.Writer
	journal bool
	window  time.Duration
	perKey  int
	total   int
	now     func() time.Time

	mu         sync.Mutex
	windowEnd  time.Time
	sentTotal  int
	keys       map[string]*keyState
	timer      *time.Timer
	closed     bool
	sendFailed bool // the journal refused an entry; report it once
}

type keyState struct {
	sent   int
	folded int
	last   Entry // the last folded entry, repeated in the count line
	worst  Priority
}

// maxKeys bounds the flood-control table. Past it, a new key shares the
// budget of an overflow key, so the table cannot grow without end even when
// every entry has its own key.
const maxKeys = 1024

const overflowKey = "\x00overflow"

// New returns a Logger. It uses the journal's native socket when
// /run/systemd/journal/socket accepts a datagram, unless o.NoJournal.
func New(o Options) *Logger {
	l := &Logger{
		ident:  o.Identifier,
		stderr: o.Stderr,
		window: o.Window,
		perKey: o.PerKey,
		total:  o.Total,
		now:    o.Now,
		keys:   map[string]*keyState{},
	}
	if l.ident == "" {
		l.ident = "parley-keyd"
	}
	if l.stderr == nil {
		l.stderr = os.Stderr
	}
	if l.window <= 0 {
		l.window = time.Second
	}
	if l.perKey <= 0 {
		l.perKey = 20
	}
	if l.total <= 0 {
		l.total = 400
	}
	if l.now == nil {
		l.now = time.Now
	}
	l.journal = !o.NoJournal && sdjournal.Enabled()
	return l
}

// Journal reports whether entries go to the systemd journal (rather than to
// stderr).
func (l *Logger) Journal() bool { return l != nil && l.journal }

// Send writes e, or counts it when its key or the whole logger is over
// budget. A nil Logger discards.
func (l *Logger) Send(e Entry) {
	if l == nil {
		return
	}
	key := e.Key
	if key == "" {
		key = e.Message
	}
	now := l.now()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		l.write(e)
		return
	}
	if now.After(l.windowEnd) {
		pending := l.rollLocked(now)
		l.mu.Unlock()
		l.writeFolds(pending)
		l.mu.Lock()
	}
	ks := l.keys[key]
	if ks == nil {
		if len(l.keys) >= maxKeys {
			key = overflowKey
			ks = l.keys[key]
		}
		if ks == nil {
			ks = &keyState{}
			l.keys[key] = ks
		}
	}
	within := ks.sent < l.perKey && l.sentTotal < l.total
	if e.Budget > 0 {
		within = ks.sent < e.Budget
	}
	if e.Always || within {
		ks.sent++
		if e.Budget == 0 {
			l.sentTotal++
		}
		l.mu.Unlock()
		l.write(e)
		return
	}
	if ks.folded == 0 || e.Priority < ks.worst {
		ks.worst = e.Priority
	}
	ks.folded++
	ks.last = e
	if l.timer == nil {
		// Make sure the count is written even if nothing else is logged.
		l.timer = time.AfterFunc(time.Until(l.windowEnd)+time.Millisecond, l.flushTimer)
	}
	l.mu.Unlock()
}

// fold is a count of entries that were not written one by one.
type fold struct {
	n     int
	worst Priority
	last  Entry
}

// rollLocked starts a new window and returns the folds of the old one.
func (l *Logger) rollLocked(now time.Time) []fold {
	var out []fold
	for k, ks := range l.keys {
		if ks.folded > 0 {
			out = append(out, fold{ks.folded, ks.worst, ks.last})
		}
		delete(l.keys, k)
	}
	l.sentTotal = 0
	l.windowEnd = now.Add(l.window)
	sort.Slice(out, func(i, j int) bool { return out[i].last.Message < out[j].last.Message })
	return out
}

func (l *Logger) flushTimer() {
	l.mu.Lock()
	l.timer = nil
	var pending []fold
	if !l.now().Before(l.windowEnd) || l.closed {
		pending = l.rollLocked(l.now())
	} else {
		l.timer = time.AfterFunc(time.Until(l.windowEnd)+time.Millisecond, l.flushTimer)
	}
	l.mu.Unlock()
	l.writeFolds(pending)
}

// writeFolds writes one count entry per folded key. Count entries are not
// themselves subject to the budget: there is at most one per key and window.
func (l *Logger) writeFolds(folds []fold) {
	for _, f := range folds {
		e := f.last
		fields := make(map[string]string, len(e.Fields)+1)
		for k, v := range e.Fields {
			fields[k] = v
		}
		fields["PARLEY_FOLDED"] = strconv.Itoa(f.n)
		what := "entries like this one"
		if e.Key != "" && e.Key != e.Message {
			what = "entries of this kind"
		}
		l.write(Entry{
			Priority: f.worst,
			Message:  fmt.Sprintf("%d more %s in %v were not written one by one (flood control); the last: %s", f.n, what, l.window, e.Message),
			Fields:   fields,
		})
	}
}

// Flush writes the counts of entries folded so far.
func (l *Logger) Flush() {
	if l == nil {
		return
	}
	l.mu.Lock()
	pending := l.rollLocked(l.now())
	l.mu.Unlock()
	l.writeFolds(pending)
}

// Close flushes the counts and stops the flood-control timer. Entries sent
// afterwards are written without flood control.
func (l *Logger) Close() {
	if l == nil {
		return
	}
	l.mu.Lock()
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	pending := l.rollLocked(l.now())
	l.closed = true
	l.mu.Unlock()
	l.writeFolds(pending)
}

// Printf writes an informational line; its format string is its key.
func (l *Logger) Printf(format string, args ...any) {
	l.Logf(Info, format, args...)
}

// Logf writes a line at priority p; its format string is its key, so the
// same message with other arguments folds into one count.
func (l *Logger) Logf(p Priority, format string, args ...any) {
	if l == nil {
		return
	}
	l.Send(Entry{Priority: p, Message: fmt.Sprintf(format, args...), Key: format})
}

// write sends one entry, to the journal or to stderr.
func (l *Logger) write(e Entry) {
	msg := e.Message
	if l.journal {
		vars := make(map[string]string, len(e.Fields)+1)
		vars["SYSLOG_IDENTIFIER"] = l.ident
		for k, v := range e.Fields {
			vars[FieldName(k)] = v
		}
		err := sdjournal.Send(msg, sdjournal.Priority(e.Priority), vars)
		if err == nil {
			return
		}
		l.mu.Lock()
		first := !l.sendFailed
		l.sendFailed = true
		l.mu.Unlock()
		if first {
			fmt.Fprintf(l.stderr, "%s: the journal refused an entry (%v); writing to stderr instead\n", l.ident, err)
		}
	}
	var b strings.Builder
	b.WriteString(l.ident)
	b.WriteString(": ")
	if e.Priority <= Warning {
		b.WriteString(e.Priority.String())
		b.WriteString(": ")
	}
	b.WriteString(oneLine(msg))
	if n := e.Fields["PARLEY_FOLDED"]; n != "" {
		b.WriteString(" [folded: " + n + "]")
	}
	b.WriteString("\n")
	io.WriteString(l.stderr, b.String())
}

// FieldName returns name as a valid journal field name: uppercase ASCII
// letters, digits and underscores, not starting with an underscore or a
// digit (names starting with "_" are the journal's trusted fields, which a
// client must not try to set).
func FieldName(name string) string {
	var b strings.Builder
	for i := 0; i < len(name) && b.Len() < 64; i++ {
		c := name[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= '0' && c <= '9' && b.Len() > 0, c == '_' && b.Len() > 0:
			b.WriteByte(c)
		case c >= 'a' && c <= 'z':
			b.WriteByte(c - 'a' + 'A')
		case b.Len() > 0:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "PARLEY_FIELD"
	}
	return b.String()
}

// oneLine keeps a message on one line of stderr: a newline in it (from an
// error text, say) becomes a visible \n.
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(s)
}
