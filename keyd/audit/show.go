package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/parley-keyd/parley-keyd/grant/lens"

	"golang.org/x/sys/unix"
)

// Filter selects records for Read, Follow and ShowLog. The zero Filter
// selects every record.
type Filter struct {
	// Since and Until bound the record's time (inclusive); zero is no
	// bound.
	Since, Until time.Time
	// GrantID selects the records of one grant.
	GrantID string
	// FromSeq selects records with seq ≥ FromSeq. Read skips the closed
	// segments before it without reading them.
	FromSeq uint64
}

func (f *Filter) match(rec *Record) bool {
	if rec.Seq < f.FromSeq {
		return false
	}
	if f.GrantID != "" && rec.GrantID != f.GrantID {
		return false
	}
	if !f.Since.IsZero() || !f.Until.IsZero() {
		t, err := time.Parse(time.RFC3339Nano, rec.Time)
		if err != nil {
			return false
		}
		if !f.Since.IsZero() && t.Before(f.Since) || !f.Until.IsZero() && t.After(f.Until) {
			return false
		}
	}
	return true
}

// Read calls fn with every record of the log whose active segment is at
// path that f selects, in order, across its segments, with the record's line
// as stored (without the newline). It does not verify the chain (Verify
// does). It stops at the first line that is not a record and returns an
// *Error for it, after fn saw the records before it; a last line still
// being written, and NUL bytes after the last record, are left out. An
// error from fn stops Read and is returned.
//
// Read is what the daemon serves approvers (an AUDIT verb) from: with
// FromSeq, it reads only the segments from that record on.
func Read(path string, f Filter, fn func(line []byte, rec *Record) error) error {
	segs, err := Segments(path)
	if err != nil {
		return err
	}
	for i, s := range segs {
		if !s.Active && i+1 < len(segs) && segs[i+1].First != 0 && segs[i+1].First <= f.FromSeq {
			continue // every record of s is before FromSeq
		}
		file, err := openLogFile(s.Path)
		if err != nil {
			return fmt.Errorf("audit log: %w", err)
		}
		var off int64
		if f.FromSeq > 1 {
			off = seekSeq(file, f.FromSeq)
		}
		_, err = readFrom(file, s.Path, off, &f, fn)
		file.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// seekSeq returns the offset of a line start in file before which every
// record has a seq below from, found by bisecting the file on the seq each
// line starts with, so that a reader after the last records of a long
// segment reads a few of its lines, not all of them. Records follow each
// other in seq order; a line that does not start with a seq (a torn or
// NUL-filled tail, a record written otherwise) only stops the search
// early. What lies from the offset on is read and filtered as usual, so
// the offset is an optimization and never decides what is returned.
func seekSeq(file *os.File, from uint64) int64 {
	fi, err := file.Stat()
	if err != nil {
		return 0
	}
	buf := make([]byte, MaxRecord+64)
	lo, hi := int64(0), fi.Size()
	for hi-lo > int64(len(buf)) {
		mid := lo + (hi-lo)/2
		n, _ := file.ReadAt(buf, mid)
		nl := bytes.IndexByte(buf[:n], '\n')
		if nl < 0 {
			hi = mid
			continue
		}
		start := mid + int64(nl) + 1
		seq, ok := lineSeq(buf[nl+1 : n])
		switch {
		case start >= hi || !ok || seq >= from:
			hi = mid
		default:
			lo = start
		}
	}
	return lo
}

// lineSeq reads the seq a record line starts with, {"seq":N, written as
// the log writes it (no sign, no leading zero).
func lineSeq(b []byte) (uint64, bool) {
	seq, rest, ok := leadSeq(b)
	if !ok || !bytes.HasPrefix(rest, []byte(",")) {
		return 0, false
	}
	return seq, true
}

// readFile reads the complete lines of the file at name from offset off,
// calls fn for the records f selects, and returns the offset after the last
// complete line.
func readFile(name string, off int64, f *Filter, fn func([]byte, *Record) error) (int64, error) {
	file, err := openLogFile(name)
	if err != nil {
		return off, fmt.Errorf("audit log: %w", err)
	}
	defer file.Close()
	return readFrom(file, name, off, f, fn)
}

func readFrom(file *os.File, name string, off int64, f *Filter, fn func([]byte, *Record) error) (int64, error) {
	var read int64
	br := newLineReader(io.NewSectionReader(file, off, 1<<62), &read)
	for {
		line, complete, err := readLine(br)
		if err == io.EOF || err == nil && !complete {
			return off, nil
		}
		if err != nil {
			return off, &Error{File: name, Reason: ReasonMalformed, Detail: err.Error()}
		}
		if bytes.IndexByte(line, 0) >= 0 {
			return off, nil // a NUL-filled tail: nothing after it is a record yet
		}
		var rec Record
		if err := json.Unmarshal(line, &rec); err != nil {
			return off, &Error{File: name, Reason: ReasonMalformed, Detail: "not a valid record: " + err.Error()}
		}
		off += int64(len(line)) + 1
		if f.match(&rec) {
			if err := fn(line, &rec); err != nil {
				return off, err
			}
		}
	}
}

// Follow is Read, and then waits for records written after, across new
// segments, until ctx is done (it returns nil then). It polls the active
// segment every poll (a quarter second when zero).
func Follow(ctx context.Context, path string, f Filter, poll time.Duration, fn func(line []byte, rec *Record) error) error {
	if poll <= 0 {
		poll = 250 * time.Millisecond
	}
	var last uint64
	emit := func(line []byte, rec *Record) error {
		if rec.Seq <= last && last != 0 {
			return nil
		}
		last = rec.Seq
		return fn(line, rec)
	}
	segs, err := Segments(path)
	if err != nil {
		return err
	}
	for i, s := range segs {
		if s.Active {
			break
		}
		if i+1 < len(segs) && segs[i+1].First != 0 && segs[i+1].First <= f.FromSeq {
			continue
		}
		if _, err := readFile(s.Path, 0, &f, emit); err != nil {
			return err
		}
	}
	var cur *os.File
	var off int64
	defer func() {
		if cur != nil {
			cur.Close()
		}
	}()
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		if cur == nil {
			if file, err := openLogFile(path); err == nil {
				cur, off = file, 0
			}
		}
		if cur != nil {
			if off, err = readFrom(cur, path, off, &f, emit); err != nil {
				return err
			}
			// A new file at the path: the old one is complete (closed or
			// moved away); read what is left of it, then go on there.
			// Without reading the file's times, which would make each
			// of the daemon's writes write the inode too (statMask).
			a, aerr := statFD(cur)
			b, berr := statx(unix.AT_FDCWD, path, 0)
			if aerr == nil && berr == nil && (a.dev != b.dev || a.ino != b.ino) {
				if _, err = readFrom(cur, path, off, &f, emit); err != nil {
					return err
				}
				cur.Close()
				cur = nil
				continue
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ShowOptions say how ShowLog prints.
type ShowOptions struct {
	Filter
	// JSON prints each record's line as stored, one per line.
	JSON bool
	// Follow keeps printing new records until the context ends.
	Follow bool
}

// ShowLog prints the records of the log whose active segment is at path to
// w, as text (FormatRecord) or as stored (JSON).
func ShowLog(ctx context.Context, path string, w io.Writer, o ShowOptions) error {
	bw := bufio.NewWriter(w)
	fn := func(line []byte, rec *Record) error {
		if o.JSON {
			// As stored, but what an agent sent (a caveat value) may
			// hold bidi overrides or C1 controls that encoding/json
			// leaves raw: they are written as \u escapes, which keeps
			// the JSON's values (lens.EscapeJSONText).
			bw.Write(lens.EscapeJSONText(line))
		} else {
			bw.WriteString(FormatRecord(rec))
		}
		if err := bw.WriteByte('\n'); err != nil {
			return err
		}
		if o.Follow {
			return bw.Flush()
		}
		return nil
	}
	var err error
	if o.Follow {
		err = Follow(ctx, path, o.Filter, 0, fn)
	} else {
		err = Read(path, o.Filter, fn)
	}
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return err
}

// Show writes one human-readable line per record of the log in r to w
// (FormatRecord). Show does not verify the chain; a line that is not a
// record is shown as such and reported in the error returned at the end.
func Show(r io.Reader, w io.Writer) error {
	br := bufio.NewReaderSize(r, 64<<10)
	bw := bufio.NewWriter(w)
	var firstErr error
	for no := 1; ; no++ {
		line, complete, err := readLine(br)
		if err == io.EOF {
			break
		}
		if err != nil {
			if firstErr == nil {
				firstErr = &Error{Line: no, Reason: ReasonMalformed, Detail: err.Error()}
			}
			break
		}
		if !complete && allZero(line) {
			break
		}
		var rec Record
		if err := json.Unmarshal(line, &rec); err != nil {
			fmt.Fprintf(bw, "line %d: not a record\n", no)
			if firstErr == nil {
				firstErr = &Error{Line: no, Reason: ReasonMalformed, Detail: "not a valid record: " + err.Error()}
			}
			continue
		}
		bw.WriteString(FormatRecord(&rec))
		bw.WriteByte('\n')
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return firstErr
}

// FormatRecord renders a record as one line for people: seq, time, kind,
// then name=value for the request id, caller, holder (shortened), decision,
// decided by, grant id, expiry, what was cut or folded, a checkpoint, and the
// message last after "--". Text that came from callers has control, format
// (bidi, zero-width) and other invisible characters escaped Go-style, a
// value holding a space or a quote is quoted, so that no value can fake
// another field, and long values are cut visibly.
func FormatRecord(rec *Record) string {
	var b strings.Builder
	ts := clean(rec.Time, 40)
	if t, err := time.Parse(time.RFC3339Nano, rec.Time); err == nil {
		ts = t.UTC().Format("2006-01-02T15:04:05Z")
	}
	fmt.Fprintf(&b, "#%d %s %s", rec.Seq, ts, clean(rec.Kind, 20))
	field := func(name, value string) {
		if value != "" {
			b.WriteString(" " + name + "=" + value)
		}
	}
	field("req", value(rec.RequestID, 40))
	field("verb", value(rec.Verb, 20))
	field("target", value(rec.Target, 40))
	if c := rec.Caller; c != nil && c.Device != "" {
		field("caller", value("phone:"+c.Device, 48))
	} else if c != nil {
		who := c.User
		if who == "" {
			who = "uid:" + strconv.FormatUint(uint64(c.UID), 10)
		}
		field("caller", value(who+"/pid:"+strconv.FormatInt(int64(c.PID), 10), 48))
		if c.Unit != "" {
			field("unit", value(c.Unit, 48))
		}
	}
	field("holder", shortKey(rec.Holder))
	field("decision", value(rec.Decision, 20))
	if d := rec.DecidedBy; d != nil {
		var parts []string
		if d.Rule != "" {
			parts = append(parts, "rule:"+d.Rule)
		}
		if d.Approver != "" {
			parts = append(parts, d.Approver)
		}
		if d.Channel != "" {
			ch := "via:" + d.Channel
			if d.Strength != "" {
				ch += "(" + d.Strength + ")"
			}
			parts = append(parts, ch)
		}
		if d.Remembered != "" {
			parts = append(parts, "remembered:"+d.Remembered)
		}
		field("by", value(strings.Join(parts, ","), 100))
	}
	if m := rec.Remembered; m != nil {
		field("remembered", value(m.ID, 40))
		field("for", value(m.Agent+"/uid:"+strconv.FormatUint(uint64(m.UID), 10), 60))
		if m.Until != 0 {
			field("until", time.Unix(m.Until, 0).UTC().Format("2006-01-02T15:04:05Z"))
		}
	}
	field("grant", value(rec.GrantID, 48))
	if rec.Expiry != 0 {
		field("exp", time.Unix(rec.Expiry, 0).UTC().Format("2006-01-02T15:04:05Z"))
	}
	if fo := rec.Folded; fo != nil {
		field("repeated", fmt.Sprintf("%d", fo.Count))
		field("between", value(fo.First, 40)+"…"+value(fo.Last, 40))
	}
	if len(rec.Cut) > 0 {
		var names []string
		for name, c := range rec.Cut {
			names = append(names, fmt.Sprintf("%s(%d bytes)", clean(name, 30), c.Size))
		}
		sort.Strings(names)
		field("cut", strings.Join(names, ","))
	}
	if cp := rec.Checkpoint; cp != nil {
		field("covers", strconv.FormatUint(cp.Seq, 10))
		field("hash", value(cp.Hash, 60))
		field("reason", value(cp.Reason, 20))
	}
	if rec.Message != "" {
		b.WriteString(" -- " + cleanText(rec.Message, 200))
	}
	return b.String()
}

// value is a field's value for FormatRecord: cleanText, quoted when it
// holds a space or a quote.
func value(s string, max int) string {
	v := cleanText(s, max)
	if strings.ContainsAny(v, " \"") || v == "" && s != "" {
		return `"` + strings.ReplaceAll(v, `"`, `\"`) + `"`
	}
	return v
}

// shortKey shortens "ed25519:AAAA…" to its prefix and both ends.
func shortKey(k string) string {
	if k == "" {
		return ""
	}
	k = clean(k, 200)
	if utf8.RuneCountInString(k) <= 24 {
		return k
	}
	r := []rune(k)
	return string(r[:14]) + "…" + string(r[len(r)-6:])
}

// clean makes untrusted text safe to print on a terminal: anything that
// is not a graphic character (terminal escapes, control characters, bidi
// overrides, zero-width characters), any space, invalid UTF-8 and the
// backslash are escaped Go-style, so a caller-chosen value can neither
// rewrite the admin's screen nor fake another field; values longer than max
// runes are cut with a visible marker.
func clean(s string, max int) string { return escape(s, max, false) }

// cleanText is clean for free text, which keeps plain spaces.
func cleanText(s string, max int) string { return escape(s, max, true) }

func escape(s string, max int, spaces bool) string {
	var b strings.Builder
	n := 0
	for i := 0; i < len(s); {
		if n == max {
			b.WriteString("…[cut]")
			break
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == ' ' && spaces:
			b.WriteByte(' ')
		case unicode.IsSpace(r) || !unicode.IsGraphic(r):
			switch {
			case r < 0x80:
				fmt.Fprintf(&b, `\x%02x`, r)
			case r <= 0xFFFF:
				fmt.Fprintf(&b, `\u%04x`, r)
			default:
				fmt.Fprintf(&b, `\U%08x`, r)
			}
		default:
			b.WriteRune(r)
		}
		i += size
		n++
	}
	return b.String()
}

// openLogFile opens a file of the log for reading without waiting, and
// refuses anything but a regular file. Attack: the daemon's user swaps a
// named pipe in for a segment right after root's command checked the
// folder (stateowner.go); an open for reading would wait for a writer for
// ever, and audit show or verify with it.
func openLogFile(name string) (*os.File, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file (%s)", name, fi.Mode().Type())
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
