package jsontext

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// This file is the one strict reading of JSON that an agent or a service
// wrote (DESIGN.md property 9): grant.DecodeStrict and grant.ParseProposal
// read through it. Go's encoding/json matches object member names to
// struct fields without regard to case and lets the last of two equal
// names win, so a document can mean one thing to it and another to a
// reader that differs (a policy check, a hash, a display): issue 10 item 3
// added "Cost": null after a proposal's real cost, and the policy saw a
// free proposal while the hash and the human's detail lines covered 1000
// USD.

// Errors of DecodeStrict that name a member, for errors.Is. Each comes
// wrapped in a *StrictError that says where.
var (
	// ErrDuplicateName: an object has two members of the same name.
	ErrDuplicateName = errors.New("duplicate name")
	// ErrNameCase: a member's name differs from a field's name only in
	// case (as encoding/json or strings.EqualFold would fold it).
	ErrNameCase = errors.New("name differs from a known name only in case")
	// ErrUnknownName: a member that no field takes, when DecodeStrict is
	// asked to refuse those.
	ErrUnknownName = errors.New("unknown name")
)

// StrictError is an error of DecodeStrict and StrictObject: what is wrong
// and where.
type StrictError struct {
	// Path is the member or element that holds the fault, such as
	// "effects[0]" or "consent"; "" for the top-level value.
	Path string
	// Offset is the byte offset in the input where the fault was found.
	Offset int
	// Name is the member name at fault, as sent, for ErrDuplicateName,
	// ErrNameCase and ErrUnknownName.
	Name string
	// Known is, for ErrNameCase, the name of the field it resembles.
	Known string
	// Err is ErrDuplicateName, ErrNameCase, ErrUnknownName or an error
	// that describes malformed JSON or a value of the wrong type.
	Err error
}

var _ error = (*StrictError)(nil)

// Error says what is wrong, naming the member; names from the input are
// quoted and cut to 40 characters.
func (e *StrictError) Error() string {
	var b strings.Builder
	b.WriteString("json: ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	switch e.Err {
	case ErrNameCase:
		fmt.Fprintf(&b, "name %s differs only in case from %q; names must match exactly", QuoteName(e.Name), e.Known)
	case ErrDuplicateName:
		fmt.Fprintf(&b, "duplicate name %s", QuoteName(e.Name))
	case ErrUnknownName:
		fmt.Fprintf(&b, "unknown name %s", QuoteName(e.Name))
	default:
		msg := e.Err.Error()
		// Parse's own errors carry their offset already.
		if rest, ok := strings.CutPrefix(msg, "json: offset "); ok {
			if _, m, ok := strings.Cut(rest, ": "); ok {
				msg = m
			}
		}
		fmt.Fprintf(&b, "%s (at offset %d)", msg, e.Offset)
	}
	return b.String()
}

// Unwrap returns Err.
func (e *StrictError) Unwrap() error { return e.Err }

func QuoteName(s string) string { return strconv.Quote(cutName(s)) }

// pathName writes a member name in a path as it is when it is plain
// printable ASCII, else quoted: names come from the input, and an error
// message may reach a terminal.
func pathName(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '.' || c == '[' || c == '"' || c == '\\' {
			return QuoteName(s)
		}
	}
	return cutName(s)
}

// cutName cuts a name from the input to 40 characters, so that an error
// message stays short whatever the input holds.
func cutName(s string) string {
	if utf8.RuneCountInString(s) > 40 {
		s = string([]rune(s)[:40]) + "…"
	}
	return s
}

// DecodeStrict is grant.DecodeStrict, and with known set also refuses a
// member that no field of its struct takes (ErrUnknownName).
func DecodeStrict(data []byte, v any, known bool) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("grant: DecodeStrict needs a non-nil pointer, not %T", v)
	}
	d := strictDecoders.Get().(*strictDecoder)
	*d = strictDecoder{reader: reader{Scanner: Scanner{B: data}}, known: known}
	d.path = d.pathBuf[:0]
	err := d.decodeWhole(rv.Elem())
	*d = strictDecoder{} // holds no input once back in the pool
	strictDecoders.Put(d)
	return err
}

// strictDecoders keeps DecodeStrict's decoders for the next call: the
// daemon decodes three or four values of every request it reads, and a
// decoder allocated for each was a twentieth of what a grant allocated
// (docs/performance.md).
var strictDecoders = sync.Pool{New: func() any { return new(strictDecoder) }}

// decodeWhole decodes the whole of d's input into v.
func (d *strictDecoder) decodeWhole(v reflect.Value) error {
	d.Space()
	if err := d.decode(v, 0); err != nil {
		return err
	}
	d.Space()
	if d.I != len(d.B) {
		return d.fail(errors.New("data after the JSON value"))
	}
	return nil
}

// ErrNotObject is StrictObject's error for a value that is not an object.
var ErrNotObject = errors.New("not an object")

// StrictObject reads raw, by DecodeStrict's rules, as one JSON object
// nested at most MaxStrictDepth deep, into a map of nil, bool, string,
// json.Number, map[string]any and []any, and returns a copy of the exact
// bytes of its member keep, if it has one.
func StrictObject(raw []byte, keep string) (map[string]any, []byte, error) {
	d := &strictDecoder{reader: reader{Scanner: Scanner{B: raw}}}
	d.Space()
	if d.I >= len(d.B) || d.B[d.I] != '{' {
		if _, err := d.anyValue(0, false); err != nil {
			return nil, nil, err
		}
		return nil, nil, ErrNotObject
	}
	m := map[string]any{}
	var kept []byte
	err := d.members(func(name []byte, _ int) error {
		start := d.I
		d.enter(name)
		x, err := d.anyValue(1, true)
		d.leave()
		if string(name) == keep {
			kept = append([]byte(nil), raw[start:d.I]...)
		}
		m[string(name)] = x
		return err
	})
	if err == nil {
		d.Space()
		if d.I != len(d.B) {
			err = d.fail(errors.New("data after the JSON value"))
		}
	}
	if err != nil {
		return nil, nil, err
	}
	return m, kept, nil
}

// strictDecoder reads JSON into Go values by DecodeStrict's rules. It
// walks what its Scanner reads.
type strictDecoder struct {
	reader
	known   bool
	path    []step // where the decoder is, for errors
	pathBuf [8]step
}

// step is one step of a path: a member name, or an index.
type step struct {
	name    []byte // aliases the input or a decoded name; read only for errors
	index   int
	isIndex bool
}

func (d *strictDecoder) enter(name []byte) { d.path = append(d.path, step{name: name}) }
func (d *strictDecoder) enterIndex(i int)  { d.path = append(d.path, step{index: i, isIndex: true}) }
func (d *strictDecoder) leave()            { d.path = d.path[:len(d.path)-1] }

// pathString renders the path to the current value, cut after 8 steps.
func (d *strictDecoder) pathString() string {
	var b strings.Builder
	for i, st := range d.path {
		if i == 8 {
			b.WriteString("…")
			break
		}
		if st.isIndex {
			b.WriteString("[" + strconv.Itoa(st.index) + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(pathName(string(st.name)))
	}
	return b.String()
}

func (d *strictDecoder) fail(err error) error {
	var je *StrictError
	if errors.As(err, &je) {
		return err
	}
	return &StrictError{Path: d.pathString(), Offset: d.I, Err: err}
}

func (d *strictDecoder) nameError(err error, name, known string, off int) error {
	return &StrictError{Path: d.pathString(), Offset: off, Name: name, Known: known, Err: err}
}

// typeError reports a value that the target cannot hold, in JSON's words:
// the message may reach whoever sent the JSON.
func (d *strictDecoder) typeError(what string, t reflect.Type) error {
	return d.fail(fmt.Errorf("want %s, not a JSON %s", jsonWant(t), what))
}

// jsonWant names the JSON value a Go type takes.
func jsonWant(t reflect.Type) string {
	if t == numberType {
		return "a number"
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer in range"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "another value"
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	numberType          = reflect.TypeFor[json.Number]()
)

// kindAt names the JSON value that starts at the current offset.
func (d *strictDecoder) kindAt() string {
	if d.I >= len(d.B) {
		return "end of input"
	}
	switch c := d.B[d.I]; {
	case c == '{':
		return "object"
	case c == '[':
		return "array"
	case c == '"':
		return "string"
	case c == 't' || c == 'f':
		return "bool"
	case c == 'n':
		return "null"
	case c == '-' || IsDigit(c):
		return "number"
	}
	return "value"
}

func (d *strictDecoder) decode(v reflect.Value, depth int) error {
	if depth > MaxStrictDepth {
		return d.fail(ErrTooDeep)
	}
	if d.I >= len(d.B) {
		return d.fail(errors.New("unexpected end of input"))
	}
	isNull := d.B[d.I] == 'n'
	// A pointer takes null as nil; otherwise it is allocated and the value
	// decoded into what it points to, as encoding/json does.
	if v.Kind() == reflect.Pointer {
		if isNull {
			if err := d.lit("null"); err != nil {
				return d.fail(err)
			}
			v.SetZero()
			return nil
		}
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return d.decode(v.Elem(), depth)
	}
	methods := methodsOf(v.Type())
	if v.CanAddr() && methods.unmarshaler {
		start := d.I
		if err := d.skip(depth); err != nil {
			return err
		}
		// As encoding/json does, the Unmarshaler gets the input's own
		// bytes, and copies what it keeps (json.RawMessage does).
		raw := d.B[start:d.I:d.I]
		if err := v.Addr().Interface().(json.Unmarshaler).UnmarshalJSON(raw); err != nil {
			d.I = start
			return d.fail(err)
		}
		return nil
	}
	if isNull {
		if err := d.lit("null"); err != nil {
			return d.fail(err)
		}
		switch v.Kind() {
		case reflect.Interface, reflect.Map, reflect.Slice:
			v.SetZero()
		}
		return nil
	}
	if v.CanAddr() && methods.textUnmarshaler && v.Type() != numberType {
		if d.B[d.I] != '"' {
			return d.typeError(d.kindAt(), v.Type())
		}
		start := d.I
		s, err := d.str()
		if err != nil {
			return d.fail(err)
		}
		if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(s)); err != nil {
			d.I = start
			return d.fail(err)
		}
		return nil
	}
	switch v.Kind() {
	case reflect.Interface:
		if v.NumMethod() != 0 {
			return d.fail(fmt.Errorf("grant: DecodeStrict cannot decode into %s", v.Type()))
		}
		x, err := d.anyValue(depth, true)
		if err != nil {
			return err
		}
		if x == nil {
			v.SetZero()
		} else {
			v.Set(reflect.ValueOf(x))
		}
		return nil
	case reflect.Struct:
		return d.object(v, depth)
	case reflect.Map:
		return d.mapValue(v, depth)
	case reflect.Slice, reflect.Array:
		return d.array(v, depth)
	}
	// Scalars.
	switch c := d.B[d.I]; {
	case c == '"':
		s, err := d.str()
		if err != nil {
			return d.fail(err)
		}
		switch {
		case v.Type() == numberType:
			if !ValidNumber(s) {
				return d.fail(fmt.Errorf("%q is not a JSON number", s))
			}
			v.SetString(s)
		case v.Kind() == reflect.String:
			v.SetString(s)
		default:
			return d.typeError("string", v.Type())
		}
		return nil
	case c == 't' || c == 'f':
		b := c == 't'
		word := "false"
		if b {
			word = "true"
		}
		if err := d.lit(word); err != nil {
			return d.fail(err)
		}
		if v.Kind() != reflect.Bool {
			return d.typeError("bool", v.Type())
		}
		v.SetBool(b)
		return nil
	case c == '-' || IsDigit(c):
		start := d.I
		text, err := d.number()
		if err != nil {
			return err
		}
		return d.setNumber(v, text, start)
	}
	if c := d.B[d.I]; c == '{' || c == '[' {
		return d.typeError(d.kindAt(), v.Type())
	}
	return d.fail(fmt.Errorf("unexpected character %q", d.B[d.I]))
}

func (d *strictDecoder) setNumber(v reflect.Value, text string, start int) error {
	bad := func() error { d.I = start; return d.typeError("number "+text, v.Type()) }
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil || v.OverflowInt(n) {
			return bad()
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n, err := strconv.ParseUint(text, 10, 64)
		if err != nil || v.OverflowUint(n) {
			return bad()
		}
		v.SetUint(n)
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(text, v.Type().Bits())
		if err != nil || v.OverflowFloat(f) {
			return bad()
		}
		v.SetFloat(f)
	case reflect.String:
		if v.Type() != numberType {
			return bad()
		}
		v.SetString(text)
	default:
		return bad()
	}
	return nil
}

// number reads a JSON number and returns its text.
func (d *strictDecoder) number() (string, error) {
	start, err := d.skipNumber()
	if err != nil {
		return "", err
	}
	return string(d.B[start:d.I]), nil
}

// skipNumber reads a JSON number and returns where it starts.
func (d *strictDecoder) skipNumber() (int, error) {
	start := d.I
	if text, ok := d.Number(); !ok {
		return 0, d.fail(fmt.Errorf("invalid number %q", text))
	}
	return start, nil
}

// name reads a member name: the input's own bytes when the name has no
// escape, else its decoded text. A name without escapes that is not UTF-8
// is reported at its start.
func (d *strictDecoder) name() ([]byte, error) {
	start := d.I + 1
	b, _, err := d.String(false)
	if err == ErrUTF8 && bytes.IndexByte(d.B[start:d.I-1], '\\') < 0 {
		d.I = start
	}
	return b, scanErr(err)
}

// members reads an object and calls member for each name, with the
// decoder positioned at its value; member must consume the value. name
// may alias the input: copy it to keep it.
func (d *strictDecoder) members(member func(name []byte, off int) error) error {
	d.I++ // {
	d.Space()
	if d.I < len(d.B) && d.B[d.I] == '}' {
		d.I++
		return nil
	}
	var seen Names
	for {
		d.Space()
		if d.I >= len(d.B) || d.B[d.I] != '"' {
			return d.fail(errors.New("want an object member name"))
		}
		off := d.I
		name, err := d.name()
		if err != nil {
			return d.fail(err)
		}
		// Attack: two members of one name, which readers that keep the
		// first and readers that keep the last see differently.
		if !seen.Add(name) {
			return d.nameError(ErrDuplicateName, string(name), "", off)
		}
		d.Space()
		if d.I >= len(d.B) || d.B[d.I] != ':' {
			return d.fail(errors.New("want ':' after a member name"))
		}
		d.I++
		d.Space()
		if err := member(name, off); err != nil {
			return err
		}
		d.Space()
		if d.I >= len(d.B) {
			return d.fail(errors.New("unexpected end of object"))
		}
		switch d.B[d.I] {
		case ',':
			d.I++
		case '}':
			d.I++
			return nil
		default:
			return d.fail(errors.New("want ',' or '}'"))
		}
	}
}

func (d *strictDecoder) object(v reflect.Value, depth int) error {
	if d.B[d.I] != '{' {
		return d.typeError(d.kindAt(), v.Type())
	}
	fields, err := cachedFields(v.Type())
	if err != nil {
		return d.fail(err)
	}
	return d.members(func(name []byte, off int) error {
		f, ok := fields.byName[string(name)]
		if !ok {
			if known, ok := fields.variant(string(name)); ok {
				return d.nameError(ErrNameCase, string(name), known, off)
			}
			if d.known {
				return d.nameError(ErrUnknownName, string(name), "", off)
			}
			d.enter(name)
			err := d.skip(depth + 1)
			d.leave()
			return err
		}
		fv, err := fieldByIndex(v, f.index)
		if err != nil {
			return d.fail(err)
		}
		d.enter(name)
		err = d.decode(fv, depth+1)
		d.leave()
		return err
	})
}

func (d *strictDecoder) mapValue(v reflect.Value, depth int) error {
	if d.B[d.I] != '{' {
		return d.typeError(d.kindAt(), v.Type())
	}
	t := v.Type()
	if t.Key().Kind() != reflect.String {
		return d.fail(fmt.Errorf("grant: DecodeStrict cannot decode into %s: keys are not strings", t))
	}
	if v.IsNil() {
		v.Set(reflect.MakeMap(t))
	}
	return d.members(func(name []byte, _ int) error {
		e := reflect.New(t.Elem()).Elem()
		d.enter(name)
		err := d.decode(e, depth+1)
		d.leave()
		if err != nil {
			return err
		}
		v.SetMapIndex(reflect.ValueOf(string(name)).Convert(t.Key()), e)
		return nil
	})
}

func (d *strictDecoder) array(v reflect.Value, depth int) error {
	if d.B[d.I] != '[' {
		if v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8 {
			return d.fail(fmt.Errorf("grant: DecodeStrict cannot decode into %s", v.Type()))
		}
		return d.typeError(d.kindAt(), v.Type())
	}
	d.I++ // [
	// out is the new slice, addressable so that it can grow.
	var out reflect.Value
	if v.Kind() == reflect.Slice {
		out = reflect.New(v.Type()).Elem()
		out.Set(reflect.MakeSlice(v.Type(), 0, 0))
	}
	n := 0
	d.Space()
	if d.I < len(d.B) && d.B[d.I] == ']' {
		d.I++
	} else {
		for {
			d.Space()
			d.enterIndex(n)
			var err error
			switch {
			case v.Kind() == reflect.Slice:
				out.Grow(1)
				out.SetLen(n + 1)
				err = d.decode(out.Index(n), depth+1)
			case n < v.Len():
				err = d.decode(v.Index(n), depth+1)
			default: // beyond a Go array's length: read and dropped
				err = d.skip(depth + 1)
			}
			d.leave()
			if err != nil {
				return err
			}
			n++
			d.Space()
			if d.I >= len(d.B) {
				return d.fail(errors.New("unexpected end of array"))
			}
			if d.B[d.I] == ']' {
				d.I++
				break
			}
			if d.B[d.I] != ',' {
				return d.fail(errors.New("want ',' or ']'"))
			}
			d.I++
		}
	}
	if v.Kind() == reflect.Slice {
		v.Set(out)
	} else {
		for i := n; i < v.Len(); i++ {
			v.Index(i).SetZero()
		}
	}
	return nil
}

// skip reads and checks one value of any kind without keeping it.
func (d *strictDecoder) skip(depth int) error {
	_, err := d.anyValue(depth, false)
	return err
}

// anyValue reads one value: into nil, bool, string, json.Number,
// map[string]any and []any when build is set, else only to check it.
func (d *strictDecoder) anyValue(depth int, build bool) (any, error) {
	if depth > MaxStrictDepth {
		return nil, d.fail(ErrTooDeep)
	}
	if d.I >= len(d.B) {
		return nil, d.fail(errors.New("unexpected end of input"))
	}
	switch c := d.B[d.I]; {
	case c == '{':
		var m map[string]any
		if build {
			m = map[string]any{}
		}
		err := d.members(func(name []byte, _ int) error {
			d.enter(name)
			x, err := d.anyValue(depth+1, build)
			d.leave()
			if build {
				m[string(name)] = x
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		return m, nil
	case c == '[':
		d.I++
		var a []any
		if build {
			a = []any{}
		}
		d.Space()
		if d.I < len(d.B) && d.B[d.I] == ']' {
			d.I++
			return a, nil
		}
		for n := 0; ; n++ {
			d.Space()
			d.enterIndex(n)
			x, err := d.anyValue(depth+1, build)
			d.leave()
			if err != nil {
				return nil, err
			}
			if build {
				a = append(a, x)
			}
			d.Space()
			if d.I >= len(d.B) {
				return nil, d.fail(errors.New("unexpected end of array"))
			}
			if d.B[d.I] == ']' {
				d.I++
				return a, nil
			}
			if d.B[d.I] != ',' {
				return nil, d.fail(errors.New("want ',' or ']'"))
			}
			d.I++
		}
	case c == '"':
		if !build {
			// Only checked: no string is made of it.
			_, err := d.strBytes()
			if err != nil {
				return nil, d.fail(err)
			}
			return nil, nil
		}
		s, err := d.str()
		if err != nil {
			return nil, d.fail(err)
		}
		return s, nil
	case c == 't':
		return true, d.litErr("true")
	case c == 'f':
		return false, d.litErr("false")
	case c == 'n':
		return nil, d.litErr("null")
	case c == '-' || IsDigit(c):
		if !build {
			_, err := d.skipNumber()
			return nil, err
		}
		s, err := d.number()
		if err != nil {
			return nil, err
		}
		return json.Number(s), nil
	}
	return nil, d.fail(fmt.Errorf("unexpected character %q", d.B[d.I]))
}

func (d *strictDecoder) litErr(word string) error {
	if err := d.lit(word); err != nil {
		return d.fail(err)
	}
	return nil
}

// structFields are the JSON names of a struct type's fields, resolved as
// encoding/json resolves them.
type structFields struct {
	byName map[string]fieldInfo
	folded map[string]string // FoldName(name) → name
}

type fieldInfo struct {
	index  []int
	tagged bool
	depth  int
}

// variant returns the field name that name resembles, differing only in
// case, and whether there is one.
func (s *structFields) variant(name string) (string, bool) {
	if known, ok := s.folded[FoldName(name)]; ok {
		return known, true
	}
	// strings.EqualFold folds a few runes that FoldName keeps apart.
	for known := range s.byName {
		if strings.EqualFold(known, name) {
			return known, true
		}
	}
	return "", false
}

// FoldName folds name as encoding/json does when it matches names without
// regard to case: ASCII to upper case, other runes through lower then upper
// case (so that "ſ" folds with "s" and the Kelvin sign with "k").
func FoldName(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	for _, r := range name {
		if r < utf8.RuneSelf {
			if 'a' <= r && r <= 'z' {
				r -= 'a' - 'A'
			}
		} else {
			r = unicode.ToUpper(unicode.ToLower(r))
		}
		b.WriteRune(r)
	}
	return b.String()
}

// typeMethods says which decoding methods a pointer to a type has.
type typeMethods struct{ unmarshaler, textUnmarshaler bool }

// methodCache memoizes methodsOf: reflect's Implements walks the method
// set on every call, and decode asks it for every value.
var methodCache sync.Map // reflect.Type → typeMethods

func methodsOf(t reflect.Type) typeMethods {
	if m, ok := methodCache.Load(t); ok {
		return m.(typeMethods)
	}
	p := reflect.PointerTo(t)
	m := typeMethods{unmarshaler: p.Implements(unmarshalerType), textUnmarshaler: p.Implements(textUnmarshalerType)}
	methodCache.Store(t, m)
	return m
}

// fieldCache holds the resolved fields of each struct type decoded so far,
// as encoding/json keeps its own: resolving them costs ten times the
// decoding of a small frame. It only memoizes a function of the type, so
// it holds no state that any result depends on.
var fieldCache sync.Map // reflect.Type → *structFields or error

func cachedFields(t reflect.Type) (*structFields, error) {
	if c, ok := fieldCache.Load(t); ok {
		if err, ok := c.(error); ok {
			return nil, err
		}
		return c.(*structFields), nil
	}
	f, err := fieldsOf(t)
	if err != nil {
		fieldCache.Store(t, err)
		return nil, err
	}
	fieldCache.Store(t, f)
	return f, nil
}

// fieldsOf resolves the JSON names of struct type t's fields: the tag's
// name or the Go name; "-" hides a field; the fields of an embedded struct
// without a tag name are promoted, and of several fields with one name the
// shallowest wins, then the one with a tag, and a tie hides the name.
func fieldsOf(t reflect.Type) (*structFields, error) {
	cands := map[string][]fieldInfo{}
	var walk func(t reflect.Type, index []int, depth int, visited map[reflect.Type]bool) error
	walk = func(t reflect.Type, index []int, depth int, visited map[reflect.Type]bool) error {
		if visited[t] {
			return nil
		}
		visited[t] = true
		defer delete(visited, t)
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			if f.Anonymous && name == "" {
				ft := f.Type
				if ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if ft.Kind() == reflect.Struct {
					if err := walk(ft, append(append([]int{}, index...), i), depth+1, visited); err != nil {
						return err
					}
					continue
				}
				if !f.IsExported() {
					continue
				}
			} else if !f.IsExported() {
				continue
			}
			for _, o := range strings.Split(opts, ",") {
				if o == "string" {
					return fmt.Errorf("grant: DecodeStrict does not support the ,string option (field %s of %s)", f.Name, t)
				}
			}
			tagged := name != ""
			if !tagged {
				name = f.Name
			}
			cands[name] = append(cands[name], fieldInfo{index: append(append([]int{}, index...), i), tagged: tagged, depth: depth})
		}
		return nil
	}
	if err := walk(t, nil, 0, map[reflect.Type]bool{}); err != nil {
		return nil, err
	}
	s := &structFields{byName: map[string]fieldInfo{}, folded: map[string]string{}}
	for name, fs := range cands {
		best := fs[0].depth
		for _, f := range fs {
			best = min(best, f.depth)
		}
		var top, tagged []fieldInfo
		for _, f := range fs {
			if f.depth == best {
				top = append(top, f)
				if f.tagged {
					tagged = append(tagged, f)
				}
			}
		}
		switch {
		case len(top) == 1:
			s.byName[name] = top[0]
		case len(tagged) == 1:
			s.byName[name] = tagged[0]
		}
	}
	for name := range s.byName {
		f := FoldName(name)
		if prev, ok := s.folded[f]; !ok || name < prev {
			s.folded[f] = name
		}
	}
	return s, nil
}

// fieldByIndex returns the field at index, allocating embedded pointers on
// the way.
func fieldByIndex(v reflect.Value, index []int) (reflect.Value, error) {
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				if !v.CanSet() {
					return reflect.Value{}, fmt.Errorf("grant: DecodeStrict cannot set an embedded pointer to an unexported struct in %s", v.Type())
				}
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v, nil
}
