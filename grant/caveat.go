package grant

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/parley-keyd/parley-keyd/grant/internal/jsontext"
)

// Caveat is one restriction of a grant: a single-key JSON object (§6.3).
// Value holds the canonical JSON of the object's value (§10).
//
// A Caveat decoded from a token keeps the exact bytes that were signed. A
// caveat of a kind this package does not know, or with a malformed value,
// still decodes; it is never satisfied (§6.3: fail closed).
type Caveat struct {
	Name  string
	Value json.RawMessage
}

// The caveat kinds of §6.3.
const (
	kindSvc   = "svc"
	kindVerbs = "verbs"
	kindCan   = "can"
	kindExp   = "exp"
	kindNbf   = "nbf"
	kindPer   = "per"
	kindSpend = "spend"
	kindRisk  = "risk"
	kindOnly  = "only"
)

// The risk levels of §5.1 and §6.3, in increasing order.
const (
	riskLow    = "low"
	riskMedium = "medium"
	riskHigh   = "high"
)

// riskRank returns the order of a risk level (low 0, medium 1, high 2) and
// whether level is one of the three.
func riskRank(level string) (int, bool) {
	switch level {
	case riskLow:
		return 0, true
	case riskMedium:
		return 1, true
	case riskHigh:
		return 2, true
	}
	return 0, false
}

var (
	_ json.Marshaler   = Caveat{}
	_ json.Unmarshaler = (*Caveat)(nil)
	_ fmt.Stringer     = Caveat{}
)

// caveatLimits bound a caveat value while a token is decoded. With them, a
// caveat's evaluation costs at most maxListLen pattern matches of at most
// maxStringLen bytes, whatever the attacker sends.
var caveatLimits = jsontext.Limits{Depth: 8, List: maxListLen, Str: maxStringLen}

func stringsValue(ss []string) json.RawMessage {
	b := []byte{'['}
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsontext.AppendString(b, strings.ToValidUTF8(s, "\uFFFD"))
	}
	return append(b, ']')
}

func stringValue(s string) json.RawMessage {
	return jsontext.AppendString(nil, strings.ToValidUTF8(s, "\uFFFD"))
}

func moneyValue(m Money) json.RawMessage {
	b := append([]byte(`{"currency":`), jsontext.AppendString(nil, strings.ToValidUTF8(m.Currency, "\uFFFD"))...)
	b = append(b, `,"max":`...)
	b = strconv.AppendInt(b, m.Amount, 10)
	return append(b, '}')
}

// Svc returns {"svc": ids}: only at the listed services.
func Svc(ids ...string) Caveat { return Caveat{kindSvc, stringsValue(ids)} }

// Verbs returns {"verbs": verbs}: only the listed verbs.
func Verbs(verbs ...string) Caveat { return Caveat{kindVerbs, stringsValue(verbs)} }

// Can returns {"can": patterns}: only capabilities matching a pattern.
func Can(patterns ...string) Caveat { return Caveat{kindCan, stringsValue(patterns)} }

// Exp returns {"exp": unix}: only while now < unix.
func Exp(unix int64) Caveat { return Caveat{kindExp, strconv.AppendInt(nil, unix, 10)} }

// Nbf returns {"nbf": unix}: only once now ≥ unix.
func Nbf(unix int64) Caveat { return Caveat{kindNbf, strconv.AppendInt(nil, unix, 10)} }

// Per returns {"per": {"max": m.Amount, "currency": m.Currency}}: a COMMIT
// costs at most m.
func Per(m Money) Caveat { return Caveat{kindPer, moneyValue(m)} }

// Spend returns {"spend": {"max": m.Amount, "currency": m.Currency}}: the
// commits under this block cost at most m in total.
func Spend(m Money) Caveat { return Caveat{kindSpend, moneyValue(m)} }

// Risk returns {"risk": level}: a COMMIT's proposal risk is at most level.
func Risk(level string) Caveat { return Caveat{kindRisk, stringValue(level)} }

// Only returns {"only": hash}: a COMMIT only of the proposal with that hash.
func Only(hash string) Caveat { return Caveat{kindOnly, stringValue(hash)} }

// known reports whether c is one of the nine kinds of §6.3.
func (c Caveat) known() bool {
	switch c.Name {
	case kindSvc, kindVerbs, kindCan, kindExp, kindNbf,
		kindPer, kindSpend, kindRisk, kindOnly:
		return true
	}
	return false
}

// Check returns nil when c is one of the nine kinds of §6.3 with a
// well-formed, canonical value, and an error that says which of the two it
// is not: svc, verbs and can take arrays of strings; exp and nbf
// integers; per and spend {"currency": string, "max": int} and nothing
// else; risk one of low, medium, high; only a string. Lists may be empty
// (then nothing satisfies them). Values also stay within a token's caps: at
// most 64 items a list and 1024 bytes a string.
func (c Caveat) Check() error {
	var err error
	switch c.Name {
	case kindSvc, kindVerbs, kindCan:
		_, err = c.readStrings()
	case kindExp, kindNbf:
		_, err = c.readInt()
	case kindPer, kindSpend:
		_, err = c.readMoney()
	case kindOnly:
		_, err = c.readText()
	case kindRisk:
		var s string
		if s, err = c.readText(); err == nil {
			if _, ok := riskRank(s); !ok {
				err = fmt.Errorf("risk level %q is not low, medium or high", s)
			}
		}
	default:
		return fmt.Errorf("unknown caveat %q", c.Name)
	}
	if err != nil {
		return fmt.Errorf("malformed %s caveat: %w", c.Name, err)
	}
	return nil
}

var errWholeValue = errors.New("trailing data after the value")

// CaveatValue returns the value of c as a T: the list of a svc, verbs or
// can caveat as []string, the time of an exp or nbf as int64, the limit of a
// per or spend as Money (whose Amount is max), the level of a risk or the
// hash of an only as string. Its error says how the value is not a
// canonical T within a token's caps (Check gives it too); it does not look
// at c.Name.
func CaveatValue[T []string | int64 | Money | string](c Caveat) (T, error) {
	var v T
	var err error
	switch p := any(&v).(type) {
	case *[]string:
		*p, err = c.readStrings()
	case *int64:
		*p, err = c.readInt()
	case *Money:
		*p, err = c.readMoney()
	case *string:
		*p, err = c.readText()
	}
	return v, err
}

// readStrings returns the value of a list caveat (svc, verbs, can).
func (c Caveat) readStrings() ([]string, error) {
	r := &jsontext.Canon{B: c.Value}
	if err := r.Expect('['); err != nil {
		return nil, errors.New("want an array of strings")
	}
	var out []string
	if r.Peek() == ']' {
		r.I++
	} else {
		for {
			if len(out) >= maxListLen {
				return nil, errTooLong
			}
			if r.Peek() != '"' {
				return nil, errors.New("want an array of strings")
			}
			s, err := r.Str(maxStringLen)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
			if r.Peek() == ']' {
				r.I++
				break
			}
			if err := r.Expect(','); err != nil {
				return nil, err
			}
		}
	}
	if !r.Done() {
		return nil, errWholeValue
	}
	return out, nil
}

// readInt returns the value of an integer caveat (exp, nbf).
func (c Caveat) readInt() (int64, error) {
	r := &jsontext.Canon{B: c.Value}
	if c := r.Peek(); c != '-' && !jsontext.IsDigit(c) {
		return 0, errors.New("want an integer")
	}
	n, err := r.Int()
	if err != nil {
		return 0, err
	}
	if !r.Done() {
		return 0, errWholeValue
	}
	return n, nil
}

// readMoney returns the value of a money caveat (per, spend): Amount is max.
func (c Caveat) readMoney() (Money, error) {
	r := &jsontext.Canon{B: c.Value}
	bad := errors.New(`want {"currency": string, "max": int}`)
	if !r.Lit(`{"currency":`) || r.Peek() != '"' {
		return Money{}, bad
	}
	cur, err := r.Str(maxStringLen)
	if err != nil {
		return Money{}, err
	}
	if !r.Lit(`,"max":`) {
		return Money{}, bad
	}
	if c := r.Peek(); c != '-' && !jsontext.IsDigit(c) {
		return Money{}, bad
	}
	n, err := r.Int()
	if err != nil {
		return Money{}, err
	}
	if !r.Lit("}") || !r.Done() {
		return Money{}, bad
	}
	return Money{Amount: n, Currency: cur}, nil
}

// readText returns the value of a string caveat (risk, only).
func (c Caveat) readText() (string, error) {
	r := &jsontext.Canon{B: c.Value}
	if r.Peek() != '"' {
		return "", errors.New("want a string")
	}
	s, err := r.Str(maxStringLen)
	if err != nil {
		return "", err
	}
	if !r.Done() {
		return "", errWholeValue
	}
	return s, nil
}

// String returns the caveat as canonical JSON, {"name":value}.
func (c Caveat) String() string {
	b, err := c.MarshalJSON()
	if err != nil {
		return fmt.Sprintf("{%q: <malformed>}", c.Name)
	}
	return string(b)
}

// MarshalJSON returns {"name":value} in canonical form.
func (c Caveat) MarshalJSON() ([]byte, error) {
	return c.AppendJSON(make([]byte, 0, len(c.Name)+len(c.Value)+5))
}

// AppendJSON appends what MarshalJSON returns to b: for callers that join
// caveats into a larger text, without a slice of its own for each. On
// error it returns b as it was.
func (c Caveat) AppendJSON(b []byte) ([]byte, error) {
	val := []byte(c.Value)
	if !jsontext.IsCanonical(val) {
		var err error
		if val, err = CanonicalizeJSON(val); err != nil {
			return b, fmt.Errorf("caveat %q: %w", c.Name, err)
		}
	}
	b = append(b, '{')
	b = jsontext.AppendString(b, strings.ToValidUTF8(c.Name, "\uFFFD"))
	b = append(b, ':')
	b = append(b, val...)
	return append(b, '}'), nil
}

// UnmarshalJSON reads a single-key object into c, keeping the value in
// canonical form. Any other shape is an error.
func (c *Caveat) UnmarshalJSON(data []byte) error {
	// A caveat already in canonical form, as clients send it, is its own
	// name and value: one pass, no tree. FuzzCaveatUnmarshal holds this
	// equal to the general path below.
	if name, val, ok := canonicalCaveat(data); ok {
		c.Name, c.Value = name, val
		return nil
	}
	v, err := jsontext.Parse(data)
	if err != nil {
		return fmt.Errorf("caveat: %w", err)
	}
	m, ok := v.(map[string]any)
	if !ok || len(m) != 1 {
		return errors.New("caveat: want an object with exactly one key")
	}
	for k, val := range m {
		b, err := canonical(val)
		if err != nil {
			return fmt.Errorf("caveat %q: %w", k, err)
		}
		c.Name, c.Value = k, b
	}
	return nil
}

// canonicalCaveat reads data when it is a canonical object (§10) of exactly
// one member, and returns the member's name and a copy of its value.
func canonicalCaveat(data []byte) (string, json.RawMessage, bool) {
	if len(data) < 2 || data[0] != '{' || !jsontext.IsCanonical(data) {
		return "", nil, false
	}
	r := &jsontext.Canon{B: data, I: 1}
	name, err := r.Str(len(data))
	if err != nil || r.Expect(':') != nil {
		return "", nil, false
	}
	start := r.I
	if r.Skip(jsontext.Limits{Depth: maxDepth, List: 1 << 30, Str: 1 << 30}, 1) != nil || r.I != len(data)-1 {
		return "", nil, false // more than one member
	}
	return name, bytes.Clone(data[start:r.I]), true
}

// matchPattern reports whether capability matches a can pattern (§6.3 with
// errata 1): "*" matches all; a pattern ending in "*" matches every
// capability that starts with the text before it ("calendar.*" matches
// "calendar.find"); any other pattern matches only itself.
func matchPattern(pattern, capability string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(capability, prefix)
	}
	return pattern == capability
}
