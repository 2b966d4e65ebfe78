package lens

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
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
	d := lensDecoder{data: data}
	d.space()
	v, err := d.value(0)
	if err != nil {
		return lensNode{}, err
	}
	d.space()
	if d.pos != len(d.data) {
		return lensNode{}, d.errorf("data after the JSON value")
	}
	return v, nil
}

type lensDecoder struct {
	data []byte
	pos  int
}

func (d *lensDecoder) errorf(format string, args ...any) error {
	return fmt.Errorf("lens: invalid JSON at offset %d: %s", d.pos, fmt.Sprintf(format, args...))
}

func (d *lensDecoder) space() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

func (d *lensDecoder) value(depth int) (lensNode, error) {
	if d.pos >= len(d.data) {
		return lensNode{}, d.errorf("unexpected end of input")
	}
	switch c := d.data[d.pos]; {
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
	if !bytes.HasPrefix(d.data[d.pos:], []byte(word)) {
		return d.errorf("invalid literal")
	}
	d.pos += len(word)
	return nil
}

func (d *lensDecoder) object(depth int) (lensNode, error) {
	if depth > maxLensDepth {
		return lensNode{}, d.errorf("nested deeper than %d", maxLensDepth)
	}
	d.pos++ // {
	n := lensNode{kind: lnObject}
	d.space()
	if d.pos < len(d.data) && d.data[d.pos] == '}' {
		d.pos++
		return n, nil
	}
	var seen map[string]bool
	for {
		d.space()
		if d.pos >= len(d.data) || d.data[d.pos] != '"' {
			return lensNode{}, d.errorf("want an object key")
		}
		key, err := d.string()
		if err != nil {
			return lensNode{}, err
		}
		// Small objects are searched directly; big ones get a set so that a
		// frame with many keys costs linear time, not quadratic.
		if len(n.obj) >= 16 && seen == nil {
			seen = make(map[string]bool, 2*len(n.obj))
			for _, m := range n.obj {
				seen[m.key] = true
			}
		}
		if seen != nil && seen[key] || seen == nil && n.get(key) != nil {
			return lensNode{}, d.errorf("duplicate key %q", key)
		}
		if seen != nil {
			seen[key] = true
		}
		d.space()
		if d.pos >= len(d.data) || d.data[d.pos] != ':' {
			return lensNode{}, d.errorf("want ':' after an object key")
		}
		d.pos++
		d.space()
		v, err := d.value(depth)
		if err != nil {
			return lensNode{}, err
		}
		n.obj = append(n.obj, lensMember{key: key, val: v})
		d.space()
		if d.pos >= len(d.data) {
			return lensNode{}, d.errorf("unterminated object")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case '}':
			d.pos++
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
	d.pos++ // [
	n := lensNode{kind: lnArray}
	d.space()
	if d.pos < len(d.data) && d.data[d.pos] == ']' {
		d.pos++
		n.arr = []lensNode{}
		return n, nil
	}
	for {
		d.space()
		v, err := d.value(depth)
		if err != nil {
			return lensNode{}, err
		}
		n.arr = append(n.arr, v)
		d.space()
		if d.pos >= len(d.data) {
			return lensNode{}, d.errorf("unterminated array")
		}
		switch d.data[d.pos] {
		case ',':
			d.pos++
		case ']':
			d.pos++
			return n, nil
		default:
			return lensNode{}, d.errorf("want ',' or ']' in an array")
		}
	}
}

// number reads the RFC 8259 number grammar and converts it the way
// ECMAScript's JSON.parse does: to the nearest float64, with overflow giving
// ±Infinity and underflow zero.
func (d *lensDecoder) number() (lensNode, error) {
	start := d.pos
	b := d.data
	if b[d.pos] == '-' {
		d.pos++
	}
	digits := func() int {
		n := 0
		for d.pos < len(b) && b[d.pos] >= '0' && b[d.pos] <= '9' {
			d.pos++
			n++
		}
		return n
	}
	switch {
	case d.pos < len(b) && b[d.pos] == '0':
		d.pos++
	case digits() == 0:
		return lensNode{}, d.errorf("invalid number")
	}
	if d.pos < len(b) && b[d.pos] == '.' {
		d.pos++
		if digits() == 0 {
			return lensNode{}, d.errorf("invalid number")
		}
	}
	if d.pos < len(b) && (b[d.pos] == 'e' || b[d.pos] == 'E') {
		d.pos++
		if d.pos < len(b) && (b[d.pos] == '+' || b[d.pos] == '-') {
			d.pos++
		}
		if digits() == 0 {
			return lensNode{}, d.errorf("invalid number")
		}
	}
	f, err := strconv.ParseFloat(string(b[start:d.pos]), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return lensNode{}, d.errorf("invalid number")
	}
	return lensNode{kind: lnNumber, num: f}, nil
}

// string reads a JSON string starting at its opening quote.
func (d *lensDecoder) string() (string, error) {
	d.pos++ // "
	b := d.data
	start := d.pos
	// Fast path: no escapes, all ASCII or valid UTF-8.
	for d.pos < len(b) {
		c := b[d.pos]
		if c == '"' {
			s := string(b[start:d.pos])
			d.pos++
			if !utf8.ValidString(s) {
				d.pos = start
				return "", d.errorf("invalid UTF-8 in a string")
			}
			return s, nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		d.pos++
	}
	if !utf8.Valid(b[start:d.pos]) {
		return "", d.errorf("invalid UTF-8 in a string")
	}
	var sb strings.Builder
	sb.Write(b[start:d.pos])
	for {
		if d.pos >= len(b) {
			return "", d.errorf("unterminated string")
		}
		c := b[d.pos]
		switch {
		case c == '"':
			d.pos++
			return sb.String(), nil
		case c < 0x20:
			return "", d.errorf("control character in a string")
		case c == '\\':
			if err := d.escape(&sb); err != nil {
				return "", err
			}
		case c < utf8.RuneSelf:
			sb.WriteByte(c)
			d.pos++
		default:
			r, size := utf8.DecodeRune(b[d.pos:])
			if r == utf8.RuneError && size == 1 {
				return "", d.errorf("invalid UTF-8 in a string")
			}
			sb.Write(b[d.pos : d.pos+size])
			d.pos += size
		}
	}
}

func (d *lensDecoder) escape(sb *strings.Builder) error {
	b := d.data
	if d.pos+1 >= len(b) {
		return d.errorf("unterminated escape")
	}
	c := b[d.pos+1]
	d.pos += 2
	switch c {
	case '"', '\\', '/':
		sb.WriteByte(c)
	case 'b':
		sb.WriteByte('\b')
	case 'f':
		sb.WriteByte('\f')
	case 'n':
		sb.WriteByte('\n')
	case 'r':
		sb.WriteByte('\r')
	case 't':
		sb.WriteByte('\t')
	case 'u':
		r, ok := d.hex4()
		if !ok {
			return d.errorf("invalid \\u escape")
		}
		if utf16.IsSurrogate(r) {
			// A high surrogate followed by an escaped low one is one code
			// point. Any other surrogate stands alone: ECMAScript keeps it in
			// the string, so it is kept here too, encoded as UTF-8 would
			// encode it (three bytes starting 0xED 0xA0–0xBF, which valid
			// UTF-8 never holds). lensQuote writes it back as \udxxx, as
			// JSON.stringify does; lensPlain turns it into U+FFFD, as
			// encoding a JavaScript string to UTF-8 does.
			if r < 0xdc00 && d.pos+1 < len(b) && b[d.pos] == '\\' && b[d.pos+1] == 'u' {
				save := d.pos
				d.pos += 2
				r2, ok := d.hex4()
				if !ok {
					return d.errorf("invalid \\u escape")
				}
				if r2 >= 0xdc00 && r2 < 0xe000 {
					sb.WriteRune(utf16.DecodeRune(r, r2))
					return nil
				}
				d.pos = save
			}
			sb.WriteByte(0xe0 | byte(r>>12))
			sb.WriteByte(0x80 | byte(r>>6)&0x3f)
			sb.WriteByte(0x80 | byte(r)&0x3f)
			return nil
		}
		sb.WriteRune(r)
	default:
		return d.errorf("invalid escape \\%c", c)
	}
	return nil
}

func (d *lensDecoder) hex4() (rune, bool) {
	if d.pos+4 > len(d.data) {
		return 0, false
	}
	var r rune
	for _, c := range d.data[d.pos : d.pos+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	d.pos += 4
	return r, true
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
func lensSurrogateAt(s string, i int) bool {
	return i+2 < len(s) && s[i] == 0xed && s[i+1] >= 0xa0 && s[i+1] <= 0xbf
}

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

// lensIsJSONNumber reports whether s matches the JSON number grammar
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func lensIsJSONNumber(s string) bool {
	i := 0
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

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
