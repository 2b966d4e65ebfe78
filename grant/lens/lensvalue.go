package lens

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/parley-keyd/parley-keyd/grant/internal/jsontext"
)

// This file holds the value half of Lens (§9.1): an order-preserving JSON
// decoder, ECMAScript number formatting, the bare-or-quoted string rule, the
// compact JSON of §9.2 and the lean notation itself. Replies are in lens.go.

// maxLensDepth bounds the nesting of a value that Lens decodes. A frame of
// 1 MiB (§2.1) could otherwise nest half a million arrays and make the
// recursive decoder and renderer spend deep stacks on it.
const maxLensDepth = 128

// lensKind is the JSON type of a lensNode.
type lensKind uint8

const (
	lnNull lensKind = iota
	lnBool
	lnNumber
	lnString
	lnArray
	lnObject
)

// lensNode is a decoded JSON value that keeps what Lens needs and
// encoding/json drops: the insertion order of object keys.
type lensNode struct {
	kind lensKind
	b    bool
	num  float64 // the nearest float64 to the number's text, as JSON.parse reads it
	str  string
	arr  []lensNode
	obj  []lensMember
}

// lensMember is one key and value of an object, in insertion order.
type lensMember struct {
	key string
	val lensNode
}

// get returns the value of key in an object, or nil when n is not an object or
// has no such key.
func (n *lensNode) get(key string) *lensNode {
	if n == nil || n.kind != lnObject {
		return nil
	}
	for i := range n.obj {
		if n.obj[i].key == key {
			return &n.obj[i].val
		}
	}
	return nil
}

// present reports whether n exists and is not null: a field that is absent or
// null counts as not given in the reply renderings (§9.2).
func (n *lensNode) present() bool { return n != nil && n.kind != lnNull }

// scalar reports whether n is null, a boolean, a number or a string.
func (n *lensNode) scalar() bool { return n.kind != lnArray && n.kind != lnObject }

// lensDecode parses one JSON text (RFC 8259) into a lensNode. It is strict:
// invalid UTF-8, raw control characters in strings, trailing data and nesting
// deeper than maxLensDepth are errors. Duplicate keys in an object are an
// error too: JSON parsers disagree on which duplicate wins, and what a human
// is shown must not depend on that choice (a parser-differential spoof).
// A \u escape of a lone surrogate is kept (see escape).
//
// Keys keep their insertion order always, as §9.1 says. (ECMAScript engines
// move keys that look like array indices, "0", "1", …, to the front of an
// object; the spec does not, and neither does Lens here.)
func lensDecode(data []byte) (lensNode, error) {
	d := lensDecoder{Scanner: jsontext.Scanner{B: data}}
	d.Space()
	v, err := d.value(0)
	if err != nil {
		return lensNode{}, err
	}
	d.Space()
	if d.I != len(d.B) {
		return lensNode{}, d.errorf("data after the JSON value")
	}
	return v, nil
}

// lensDecoder builds a lensNode from what its jsontext.Scanner reads.
type lensDecoder struct {
	jsontext.Scanner
}

func (d *lensDecoder) errorf(format string, args ...any) error {
	return d.errorAt(d.I, format, args...)
}

func (d *lensDecoder) errorAt(off int, format string, args ...any) error {
	return fmt.Errorf("lens: invalid JSON at offset %d: %s", off, fmt.Sprintf(format, args...))
}

func (d *lensDecoder) value(depth int) (lensNode, error) {
	if d.I >= len(d.B) {
		return lensNode{}, d.errorf("unexpected end of input")
	}
	switch c := d.B[d.I]; {
	case c == '{':
		return d.object(depth + 1)
	case c == '[':
		return d.array(depth + 1)
	case c == '"':
		s, err := d.string()
		return lensNode{kind: lnString, str: s}, err
	case c == 't':
		return lensNode{kind: lnBool, b: true}, d.literal("true")
	case c == 'f':
		return lensNode{kind: lnBool}, d.literal("false")
	case c == 'n':
		return lensNode{kind: lnNull}, d.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return d.number()
	default:
		return lensNode{}, d.errorf("unexpected character %q", c)
	}
}

func (d *lensDecoder) literal(word string) error {
	if !d.Literal(word) {
		return d.errorf("invalid literal")
	}
	return nil
}

func (d *lensDecoder) object(depth int) (lensNode, error) {
	if depth > maxLensDepth {
		return lensNode{}, d.errorf("nested deeper than %d", maxLensDepth)
	}
	d.I++ // {
	n := lensNode{kind: lnObject}
	d.Space()
	if d.I < len(d.B) && d.B[d.I] == '}' {
		d.I++
		return n, nil
	}
	var seen jsontext.Names
	for {
		d.Space()
		if d.I >= len(d.B) || d.B[d.I] != '"' {
			return lensNode{}, d.errorf("want an object key")
		}
		key, err := d.string()
		if err != nil {
			return lensNode{}, err
		}
		if !seen.Add([]byte(key)) {
			return lensNode{}, d.errorf("duplicate key %q", key)
		}
		d.Space()
		if d.I >= len(d.B) || d.B[d.I] != ':' {
			return lensNode{}, d.errorf("want ':' after an object key")
		}
		d.I++
		d.Space()
		v, err := d.value(depth)
		if err != nil {
			return lensNode{}, err
		}
		n.obj = append(n.obj, lensMember{key: key, val: v})
		d.Space()
		if d.I >= len(d.B) {
			return lensNode{}, d.errorf("unterminated object")
		}
		switch d.B[d.I] {
		case ',':
			d.I++
		case '}':
			d.I++
			return n, nil
		default:
			return lensNode{}, d.errorf("want ',' or '}' in an object")
		}
	}
}

func (d *lensDecoder) array(depth int) (lensNode, error) {
	if depth > maxLensDepth {
		return lensNode{}, d.errorf("nested deeper than %d", maxLensDepth)
	}
	d.I++ // [
	n := lensNode{kind: lnArray}
	d.Space()
	if d.I < len(d.B) && d.B[d.I] == ']' {
		d.I++
		n.arr = []lensNode{}
		return n, nil
	}
	for {
		d.Space()
		v, err := d.value(depth)
		if err != nil {
			return lensNode{}, err
		}
		n.arr = append(n.arr, v)
		d.Space()
		if d.I >= len(d.B) {
			return lensNode{}, d.errorf("unterminated array")
		}
		switch d.B[d.I] {
		case ',':
			d.I++
		case ']':
			d.I++
			return n, nil
		default:
			return lensNode{}, d.errorf("want ',' or ']' in an array")
		}
	}
}

// number reads a number by the JSON grammar and converts it the way
// ECMAScript's JSON.parse does: to the nearest float64, with overflow giving
// ±Infinity and underflow zero.
func (d *lensDecoder) number() (lensNode, error) {
	text, ok := d.NumberPrefix()
	if !ok {
		return lensNode{}, d.errorf("invalid number")
	}
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return lensNode{}, d.errorf("invalid number")
	}
	return lensNode{kind: lnNumber, num: f}, nil
}

// string reads a JSON string starting at its opening quote. A \u escape of
// a lone surrogate is kept: ECMAScript keeps it in the string, so it is
// kept here too, encoded as UTF-8 would encode it (three bytes starting 0xED
// 0xA0–0xBF, which valid UTF-8 never holds). lensQuote writes it back as
// \udxxx, as JSON.stringify does; lensPlain turns it into U+FFFD, as
// encoding a JavaScript string to UTF-8 does.
func (d *lensDecoder) string() (string, error) {
	start := d.I + 1
	b, _, err := d.String(true)
	if err == nil {
		return string(b), nil
	}
	return "", d.stringError(start, err)
}

// stringError words a fault of the string whose text starts at start as
// Lens reports it: the first fault by position, where invalid UTF-8 counts
// from the first byte that is not (or, before the first escape, from that
// escape; in a string without escapes, from its start).
func (d *lensDecoder) stringError(start int, err error) error {
	b := d.B
	limit := d.I - 1 // the closing quote, for ErrUTF8
	var se *jsontext.SyntaxError
	if errors.As(err, &se) {
		limit = se.Off
	}
	q := start
	for q < len(b) && b[q] != '"' && b[q] != '\\' && b[q] >= 0x20 {
		q++
	}
	switch {
	case q < len(b) && b[q] == '"':
		if !utf8.Valid(b[start:q]) {
			return d.errorAt(start, "invalid UTF-8 in a string")
		}
	case !utf8.Valid(b[start:q]):
		return d.errorAt(q, "invalid UTF-8 in a string")
	}
	for i := q; i < limit && i < len(b); {
		switch c := b[i]; {
		case c == '\\':
			if i+1 < len(b) && b[i+1] == 'u' {
				if i+6 > limit {
					i = limit
					continue
				}
				i += 6
			} else {
				i += 2
			}
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size == 1 {
				return d.errorAt(i, "invalid UTF-8 in a string")
			}
			i += size
		}
	}
	if se == nil {
		return d.errorAt(limit, "invalid UTF-8 in a string")
	}
	switch se.Msg {
	case jsontext.MsgControl:
		return d.errorAt(se.Off, "control character in a string")
	case jsontext.MsgUnterminatedEsc:
		return d.errorAt(se.Off-1, "unterminated escape")
	}
	return d.errorAt(se.Off, "%s", se.Msg)
}

// lnNumber formats f exactly as ECMAScript's Number::toString(f) does
// (§9.1): the shortest digits that read back as f, in plain decimal when the
// decimal exponent is in [-6, 21) and in exponent form ("1e+21", "1.5e-7")
// otherwise; -0 is "0".
func lensNumber(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case f == 0:
		return "0"
	}
	// Integers below 2^53 are common (amounts, times) and print the same
	// either way; take the quick road for them.
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.FormatInt(int64(f), 10)
	}
	sign := ""
	if f < 0 {
		sign = "-"
		f = -f
	}
	// FormatFloat 'e' with precision -1 gives the shortest round-trip digits,
	// the same digits s that Number::toString chooses: "d.ddde±XX".
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, exp, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	x, _ := strconv.Atoi(exp)
	k := len(digits)
	n := x + 1 // the position of the decimal point relative to the digits
	var s string
	switch {
	case k <= n && n <= 21:
		s = digits + strings.Repeat("0", n-k)
	case 0 < n && n <= 21:
		s = digits[:n] + "." + digits[n:]
	case -6 < n && n <= 0:
		s = "0." + strings.Repeat("0", -n) + digits
	default:
		es := "+"
		if n-1 < 0 {
			es = "-"
		}
		ev := strconv.Itoa(n - 1)
		if n-1 < 0 {
			ev = strconv.Itoa(1 - n)
		}
		if k == 1 {
			s = digits + "e" + es + ev
		} else {
			s = digits[:1] + "." + digits[1:] + "e" + es + ev
		}
	}
	return sign + s
}

// lensQuote appends s as a JSON string with the escapes of §10 (which are
// also the escapes of ECMAScript's JSON.stringify): \" \\ \b \f \n \r \t and
// \u00xx with lower-case hex for other code points below U+0020. Everything
// else is literal.
func lensQuote(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c != 0xed {
			continue
		}
		if c == 0xed {
			if !lensSurrogateAt(s, i) {
				continue
			}
			b.WriteString(s[start:i])
			r := rune(s[i]&0x0f)<<12 | rune(s[i+1]&0x3f)<<6 | rune(s[i+2]&0x3f)
			b.WriteString(`\u`)
			for shift := 12; shift >= 0; shift -= 4 {
				b.WriteByte(hex[r>>shift&0xf])
			}
			i += 2
			start = i + 1
			continue
		}
		b.WriteString(s[start:i])
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		}
		start = i + 1
	}
	b.WriteString(s[start:])
	b.WriteByte('"')
}

// lensSurrogateAt reports whether s holds a lone surrogate kept by the
// decoder at byte i.
func lensSurrogateAt(s string, i int) bool { return jsontext.IsSurrogateAt(s, i) }

// lensPlain returns s with every lone surrogate replaced by U+FFFD, which is
// what an ECMAScript string holding one becomes when it is encoded as UTF-8.
// Text placed into Lens as it is goes through lensPlain, so Lens is always
// valid UTF-8.
func lensPlain(s string) string {
	if strings.IndexByte(s, 0xed) < 0 {
		return s
	}
	var b strings.Builder
	start := 0
	for i := 0; i < len(s); i++ {
		if lensSurrogateAt(s, i) {
			b.WriteString(s[start:i])
			b.WriteString("\uFFFD")
			i += 2
			start = i + 1
		}
	}
	b.WriteString(s[start:])
	return b.String()
}

// lensBareByte marks the bytes a bare string may hold (§9.1):
// [A-Za-z0-9_@./+\-:() '!?&%$#*=<>~^].
var lensBareByte = func() (t [256]bool) {
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
		t[c+'a'-'A'] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "_@./+-:() '!?&%$#*=<>~^" {
		t[c] = true
	}
	return t
}()

// lensBare reports whether s renders bare, without quotes (§9.1): it is
// non-empty, uses only the bare characters, neither starts nor ends with a
// space, is not -, true, false or null, and is not a JSON number.
func lensBare(s string) bool {
	if s == "" || s[0] == ' ' || s[len(s)-1] == ' ' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !lensBareByte[s[i]] {
			return false
		}
	}
	switch s {
	case "-", "true", "false", "null":
		return false
	}
	return !lensIsJSONNumber(s)
}

// lensIsJSONNumber reports whether s matches the JSON number grammar.
func lensIsJSONNumber(s string) bool { return jsontext.ValidNumber(s) }

// lensWriter builds Lens text line by line. Lines are joined with \n and the
// text has no trailing newline. hook, when set, rewrites every piece of
// untrusted text before it is written (display.go uses it to neutralize what
// a service wrote); Lens itself leaves it nil and stays byte-exact.
type lensWriter struct {
	b       strings.Builder
	started bool
	hook    func(string) string
}

// line starts a new line indented by two spaces per level.
func (w *lensWriter) line(indent int) {
	if w.started {
		w.b.WriteByte('\n')
	}
	w.started = true
	for range indent {
		w.b.WriteString("  ")
	}
}

// raw writes untrusted text as it is (through w.hook when set).
func (w *lensWriter) raw(s string) {
	s = lensPlain(s)
	if w.hook != nil {
		s = w.hook(s)
	}
	w.b.WriteString(s)
}

// str writes s by the string rule of §9.1: bare when it may be, else quoted.
func (w *lensWriter) str(s string) {
	if w.hook == nil && lensBare(s) {
		w.b.WriteString(s)
		return
	}
	if lensBare(s) {
		w.raw(s) // bare text is safe to show but may still be long
		return
	}
	if w.hook == nil {
		lensQuote(&w.b, s)
		return
	}
	var q strings.Builder
	lensQuote(&q, s)
	w.raw(q.String())
}

// scalar writes a scalar in lean notation (§9.1).
func (w *lensWriter) scalar(n *lensNode) {
	switch n.kind {
	case lnNull:
		w.b.WriteByte('-')
	case lnBool:
		w.b.WriteString(strconv.FormatBool(n.b))
	case lnNumber:
		w.b.WriteString(lensNumber(n.num))
	case lnString:
		w.str(n.str)
	default:
		w.compact(n)
	}
}

// compact writes n as ECMAScript's JSON.stringify(n) would (§9.2): insertion
// order, no whitespace, numbers per Number::toString and non-finite numbers
// as null.
func (w *lensWriter) compact(n *lensNode) {
	if w.hook == nil {
		lensCompact(&w.b, n)
		return
	}
	var b strings.Builder
	lensCompact(&b, n)
	w.raw(b.String())
}

func lensCompact(b *strings.Builder, n *lensNode) {
	switch n.kind {
	case lnNull:
		b.WriteString("null")
	case lnBool:
		b.WriteString(strconv.FormatBool(n.b))
	case lnNumber:
		if math.IsInf(n.num, 0) || math.IsNaN(n.num) {
			b.WriteString("null")
		} else {
			b.WriteString(lensNumber(n.num))
		}
	case lnString:
		lensQuote(b, n.str)
	case lnArray:
		b.WriteByte('[')
		for i := range n.arr {
			if i > 0 {
				b.WriteByte(',')
			}
			lensCompact(b, &n.arr[i])
		}
		b.WriteByte(']')
	case lnObject:
		b.WriteByte('{')
		for i := range n.obj {
			if i > 0 {
				b.WriteByte(',')
			}
			lensQuote(b, n.obj[i].key)
			b.WriteByte(':')
			lensCompact(b, &n.obj[i].val)
		}
		b.WriteByte('}')
	}
}

// value writes a whole value in lean notation at indent 0 (§9.1): an object
// as its entries, an array as if under the key items, a scalar as a scalar.
func (w *lensWriter) value(n *lensNode) {
	switch {
	case n.kind == lnObject && len(n.obj) == 0:
		w.line(0)
		w.b.WriteString("{}")
	case n.kind == lnObject:
		w.entries(n, 0, false)
	case n.kind == lnArray:
		w.line(0)
		w.entry("items", n, 0)
	default:
		w.line(0)
		w.scalar(n)
	}
}

// entries writes the entries of a non-empty object, one per line, at indent.
// With dash set the first entry shares the line of a list item's "- ", one
// level out, so that later entries align under it.
func (w *lensWriter) entries(n *lensNode, indent int, dash bool) {
	for i := range n.obj {
		if i == 0 && dash {
			w.line(indent - 1)
			w.b.WriteString("- ")
		} else {
			w.line(indent)
		}
		w.entry(n.obj[i].key, &n.obj[i].val, indent)
	}
}

// entry writes key and its value on the current line, which is at indent, and
// any nested lines below it (§9.1).
func (w *lensWriter) entry(key string, v *lensNode, indent int) {
	w.str(key)
	switch {
	case v.scalar():
		w.b.WriteString(": ")
		w.scalar(v)
	case v.kind == lnObject && len(v.obj) == 0:
		w.b.WriteString(": {}")
	case v.kind == lnArray && len(v.arr) == 0:
		w.b.WriteString(": []")
	case v.kind == lnObject:
		w.b.WriteByte(':')
		w.entries(v, indent+1, false)
	case lensAllScalar(v.arr):
		w.b.WriteString(": ")
		w.scalarList(v.arr)
	case lensTable(v.arr):
		w.b.WriteByte('[')
		w.b.WriteString(strconv.Itoa(len(v.arr)))
		w.b.WriteString("]{")
		for i, m := range v.arr[0].obj {
			if i > 0 {
				w.b.WriteByte(',')
			}
			w.str(m.key)
		}
		w.b.WriteString("}:")
		for _, row := range v.arr {
			w.line(indent + 1)
			for i := range row.obj {
				if i > 0 {
					w.b.WriteByte(',')
				}
				w.scalar(&row.obj[i].val)
			}
		}
	default:
		w.b.WriteByte('[')
		w.b.WriteString(strconv.Itoa(len(v.arr)))
		w.b.WriteString("]:")
		for i := range v.arr {
			w.item(&v.arr[i], indent+1)
		}
	}
}

// item writes one element of a list that is neither all scalars nor a table,
// as "- " plus the element, at indent (§9.1).
func (w *lensWriter) item(e *lensNode, indent int) {
	if e.kind == lnObject && len(e.obj) > 0 {
		w.entries(e, indent+1, true)
		return
	}
	w.line(indent)
	w.b.WriteString("- ")
	switch {
	case e.kind == lnObject:
		w.b.WriteString("{}")
	case e.kind == lnArray && lensAllScalar(e.arr):
		w.scalarList(e.arr)
	case e.kind == lnArray:
		w.compact(e)
	default:
		w.scalar(e)
	}
}

// scalarList writes all-scalar elements as [a, b, c].
func (w *lensWriter) scalarList(arr []lensNode) {
	w.b.WriteByte('[')
	for i := range arr {
		if i > 0 {
			w.b.WriteString(", ")
		}
		w.scalar(&arr[i])
	}
	w.b.WriteByte(']')
}

func lensAllScalar(arr []lensNode) bool {
	for i := range arr {
		if !arr[i].scalar() {
			return false
		}
	}
	return true
}

// lensTable reports whether arr takes the table form of §9.1: every element
// a non-empty object with the same keys in the same order and only scalar
// values.
func lensTable(arr []lensNode) bool {
	if len(arr) == 0 || arr[0].kind != lnObject || len(arr[0].obj) == 0 {
		return false
	}
	first := arr[0].obj
	for _, e := range arr {
		if e.kind != lnObject || len(e.obj) != len(first) {
			return false
		}
		for i, m := range e.obj {
			if m.key != first[i].key || !m.val.scalar() {
				return false
			}
		}
	}
	return true
}

// LensValue renders any JSON value in the lean notation of §9.1: object keys
// in insertion order, numbers as ECMAScript's Number::toString, strings bare
// or quoted by the rule of §9.1 with the escapes of §10, lines joined by \n
// with no trailing newline. The result is byte-exact, as conformance/lens.json
// pins it.
//
// LensValue returns an error for input that is not one JSON text, holds
// invalid UTF-8, repeats a key within an object, or nests deeper than 128
// levels. Its output is not safe to print to a terminal as it is: strings may
// hold bidi and other invisible code points: a display shows it through
// SafeLines.
func Value(raw []byte) (string, error) {
	n, err := lensDecode(raw)
	if err != nil {
		return "", err
	}
	var w lensWriter
	w.value(&n)
	return w.b.String(), nil
}
