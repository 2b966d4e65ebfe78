package lens

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// This file renders Parley replies as Lens (§9.2). Every rendering is
// deterministic: lines joined by \n, no trailing newline, values in the lean
// notation of lensvalue.go.
//
// Text that a service wrote (summaries, targets, messages, ids) is inserted
// as it is, as §9.2 prescribes, so Lens is exact but not safe to show a human
// on a terminal. Human displays use DisplayProposal and DisplayReply
// (display.go), which neutralize each such field on its own line.
//
// Where the spec leaves a case open, these renderings choose, and the choice
// is the same for every reply kind:
//   - a field that is absent or null is "not present";
//   - a text field that holds a number or boolean renders as its lean scalar,
//     an object or array as its compact JSON, and an absent one as nothing;
//   - a time or duration that is not a number renders as text; a money value
//     whose amount is not an integer below 2^53 renders as compact JSON;
//   - a proposal without a summary shows its [id] alone; an effect whose op
//     is not one of the six of §5.1 gets the symbol ?.

// LensReply renders a reply frame as Lens (§9.2): BRIEF, PROPOSALS, CLARIFY,
// RECEIPT, ANSWER, ERROR or EVENT, followed by one More line per entry of the
// frame's more (§8). It ignores a lens field that the service sent: the
// rendering is always computed here. It returns an error for input that
// LensValue refuses, for a frame that is not an object, and for a missing or
// unknown kind.
//
// LensReply is what a model reads. It places service-written text as it is,
// so a human display uses DisplayReply instead.
func Reply(raw []byte) (string, error) {
	return lensRenderReply(raw, nil)
}

// LensProposal renders one proposal as the PROPOSALS rendering of §9.2 shows
// it when N = 1, without the "1 proposal:" header line:
//
//	[{id}] {summary}
//	  {effect line}…
//	  cost: {money|free} · risk: {risk} · undo: {duration|never} · expires: {time}
//	  data:
//	    {lean notation}
//
// It returns an error when p is not a JSON object. Like LensReply it places
// service-written text as it is; a human display uses DisplayProposal.
func Proposal(p json.RawMessage) (string, error) {
	return lensRenderProposal(p, nil)
}

// EffectLine renders one effect of a proposal or receipt as the effect line of
// §9.2: SYM op target[.field][: from → to][ — detail], where SYM is + create,
// ~ update, - delete, > send, $ charge and * other. An op outside those six
// gets the symbol ?, so that it cannot pass for one of them. from and to
// render as lean scalars, a missing side as -. It returns an error when raw is
// not a JSON object.
func EffectLine(raw json.RawMessage) (string, error) {
	n, err := lensDecode(raw)
	if err != nil {
		return "", err
	}
	if n.kind != lnObject {
		return "", errors.New("lens: an effect must be a JSON object")
	}
	var w lensWriter
	w.line(0)
	w.effect(&n)
	return w.b.String(), nil
}

func lensRenderReply(raw []byte, hook func(string) string) (string, error) {
	n, err := lensDecode(raw)
	if err != nil {
		return "", err
	}
	w := lensWriter{hook: hook}
	if err := w.reply(&n); err != nil {
		return "", err
	}
	return w.b.String(), nil
}

func lensRenderProposal(p []byte, hook func(string) string) (string, error) {
	n, err := lensDecode(p)
	if err != nil {
		return "", err
	}
	if n.kind != lnObject {
		return "", errors.New("lens: a proposal must be a JSON object")
	}
	w := lensWriter{hook: hook}
	attrs := w.attributes(&n)
	w.proposal(&n, attrs[:])
	return w.b.String(), nil
}

func (w *lensWriter) reply(f *lensNode) error {
	if f.kind != lnObject {
		return errors.New("lens: a reply frame must be a JSON object")
	}
	kind := f.get("kind")
	if kind == nil || kind.kind != lnString {
		return errors.New("lens: the reply frame has no kind")
	}
	switch kind.str {
	case "BRIEF":
		w.brief(f)
	case "PROPOSALS":
		w.proposals(f)
	case "CLARIFY":
		w.clarify(f)
	case "RECEIPT":
		w.receipt(f)
	case "ANSWER":
		data := f.get("data")
		if data == nil {
			data = &lensNode{kind: lnNull}
		}
		w.value(data)
	case "ERROR":
		w.errorReply(f)
	case "EVENT":
		w.event(f)
	default:
		return fmt.Errorf("lens: unknown reply kind %q", kind.str)
	}
	w.more(f.get("more"))
	return nil
}

// text writes a field that holds text a service wrote.
func (w *lensWriter) text(n *lensNode) {
	if !n.present() {
		return
	}
	switch n.kind {
	case lnString:
		w.raw(n.str)
	case lnArray, lnObject:
		w.compact(n)
	default:
		w.scalar(n)
	}
}

// time writes a field that holds unix seconds (§9.2).
func (w *lensWriter) time(n *lensNode) {
	if n.present() && n.kind == lnNumber && n.num == math.Trunc(n.num) && math.Abs(n.num) < 1<<53 {
		w.b.WriteString(FormatTime(int64(n.num)))
		return
	}
	w.text(n)
}

// duration writes a field that holds seconds (§9.2).
func (w *lensWriter) duration(n *lensNode) {
	if n.present() && n.kind == lnNumber && !math.IsInf(n.num, 0) {
		w.b.WriteString(lensDuration(n.num))
		return
	}
	w.text(n)
}

// money writes a cost object {"amount": int, "currency": s} (§9.2).
func (w *lensWriter) money(n *lensNode) {
	amount, currency := n.get("amount"), n.get("currency")
	if amount == nil || amount.kind != lnNumber || amount.num != math.Trunc(amount.num) ||
		math.Abs(amount.num) >= 1<<53 || currency == nil || currency.kind != lnString {
		w.compact(n)
		return
	}
	c := lensPlain(currency.str)
	if w.hook != nil {
		c = w.hook(c)
	}
	w.b.WriteString(FormatMoney(int64(amount.num), c))
}

// sub renders f into a string with w's text rewriting, apart from w.
func (w *lensWriter) sub(f func(*lensWriter)) string {
	s := lensWriter{hook: w.hook, started: true}
	f(&s)
	return s.b.String()
}

// more writes one More line per entry of a reply's more (§9.2).
func (w *lensWriter) more(more *lensNode) {
	if !more.present() || more.kind != lnArray {
		return
	}
	for i := range more.arr {
		m := &more.arr[i]
		w.line(0)
		w.b.WriteString("… ")
		w.text(m.get("remaining"))
		w.b.WriteString(" more at ")
		w.text(m.get("path"))
		w.b.WriteString(" — EXPAND ")
		w.text(m.get("handle"))
		w.b.WriteString(" (~")
		w.text(m.get("est"))
		w.b.WriteString(" tokens)")
	}
}

// brief writes a BRIEF reply (§9.2).
func (w *lensWriter) brief(f *lensNode) {
	svc := f.get("service")
	w.line(0)
	w.b.WriteString("# ")
	w.text(svc.get("name"))
	w.b.WriteString(" (")
	w.text(svc.get("id"))
	w.b.WriteByte(')')
	if s := svc.get("summary"); s.present() {
		w.line(0)
		w.text(s)
	}
	caps := f.get("capabilities")
	if !caps.present() || caps.kind != lnArray {
		return
	}
	for i := range caps.arr {
		c := &caps.arr[i]
		w.line(0)
		w.text(c.get("kind"))
		w.b.WriteByte(' ')
		w.text(c.get("name"))
		w.b.WriteByte('(')
		if p := c.get("params"); p.present() {
			if p.kind == lnObject {
				w.params(p)
			} else {
				w.schema(p)
			}
		}
		w.b.WriteByte(')')
		if s := c.get("summary"); s.present() {
			w.b.WriteString(" — ")
			w.text(s)
		}
		if r := c.get("risk"); r.present() {
			w.b.WriteString(" [risk:")
			w.text(r)
			w.b.WriteByte(']')
		}
	}
}

// params writes the members of a compact parameter schema (§4.1.1) as
// "name: type, …".
func (w *lensWriter) params(p *lensNode) {
	for i := range p.obj {
		if i > 0 {
			w.b.WriteString(", ")
		}
		w.raw(p.obj[i].key)
		w.b.WriteString(": ")
		w.schema(&p.obj[i].val)
	}
}

// schema writes one type of a compact parameter schema: a type string as it
// is, a nested object as {k: type, …}, an array as [type, …] (§4.1.1, §9.2).
func (w *lensWriter) schema(t *lensNode) {
	switch t.kind {
	case lnString:
		w.raw(t.str)
	case lnObject:
		w.b.WriteByte('{')
		w.params(t)
		w.b.WriteByte('}')
	case lnArray:
		w.b.WriteByte('[')
		for i := range t.arr {
			if i > 0 {
				w.b.WriteString(", ")
			}
			w.schema(&t.arr[i])
		}
		w.b.WriteByte(']')
	default:
		w.scalar(t)
	}
}

// lensAttr is one rendered proposal attribute ("cost: free"); ok is false
// when the proposal lacks it.
type lensAttr struct {
	s  string
	ok bool
}

// attributes renders the attributes of a proposal in the fixed order of
// §9.2: cost, risk, undo, expires. cost and undo are always there ("free",
// "never" when null); risk and expires only when the proposal has them.
func (w *lensWriter) attributes(p *lensNode) [4]lensAttr {
	var a [4]lensAttr
	a[0] = lensAttr{ok: true, s: w.sub(func(s *lensWriter) {
		s.b.WriteString("cost: ")
		if c := p.get("cost"); c.present() {
			s.money(c)
		} else {
			s.b.WriteString("free")
		}
	})}
	if r := p.get("risk"); r.present() {
		a[1] = lensAttr{ok: true, s: w.sub(func(s *lensWriter) {
			s.b.WriteString("risk: ")
			s.text(r)
		})}
	}
	a[2] = lensAttr{ok: true, s: w.sub(func(s *lensWriter) {
		s.b.WriteString("undo: ")
		u := p.get("undo")
		switch {
		case !u.present():
			s.b.WriteString("never")
		case u.get("window").present():
			s.duration(u.get("window"))
		default:
			s.compact(u)
		}
	})}
	if e := p.get("expires"); e.present() {
		a[3] = lensAttr{ok: true, s: w.sub(func(s *lensWriter) {
			s.b.WriteString("expires: ")
			s.time(e)
		})}
	}
	return a
}

// proposals writes a PROPOSALS reply (§9.2). With two or more proposals, an
// attribute rendered identically in all of them moves to the header.
func (w *lensWriter) proposals(f *lensNode) {
	var list []lensNode
	if ps := f.get("proposals"); ps.present() && ps.kind == lnArray {
		list = ps.arr
	}
	attrs := make([][4]lensAttr, len(list))
	for i := range list {
		attrs[i] = w.attributes(&list[i])
	}
	var shared [4]bool
	if len(list) >= 2 {
		for j := range shared {
			shared[j] = true
			for i := range attrs {
				if !attrs[i][j].ok || attrs[i][j].s != attrs[0][j].s {
					shared[j] = false
					break
				}
			}
		}
	}
	w.line(0)
	w.b.WriteString(strconv.Itoa(len(list)))
	if len(list) == 1 {
		w.b.WriteString(" proposal")
	} else {
		w.b.WriteString(" proposals")
	}
	sep := " — "
	for j, s := range shared {
		if s {
			w.b.WriteString(sep)
			w.b.WriteString(attrs[0][j].s)
			sep = " · "
		}
	}
	w.b.WriteByte(':')
	for i := range list {
		own := attrs[i]
		for j, s := range shared {
			if s {
				own[j].ok = false
			}
		}
		w.proposal(&list[i], own[:])
	}
}

// proposal writes one proposal block of PROPOSALS with the given own
// attributes (§9.2).
func (w *lensWriter) proposal(p *lensNode, own []lensAttr) {
	w.line(0)
	if p.kind != lnObject {
		w.compact(p)
		return
	}
	w.b.WriteByte('[')
	w.text(p.get("id"))
	w.b.WriteByte(']')
	if s := p.get("summary"); s.present() {
		w.b.WriteByte(' ')
		w.text(s)
	}
	w.effects(p.get("effects"))
	sep := ""
	for _, a := range own {
		if !a.ok {
			continue
		}
		if sep == "" {
			w.line(1)
			sep = " · "
		} else {
			w.b.WriteString(sep)
		}
		w.b.WriteString(a.s)
	}
	if d := p.get("data"); d.present() {
		w.line(1)
		w.entry("data", d, 1)
	}
}

// effects writes one effect line per effect at indent 1.
func (w *lensWriter) effects(e *lensNode) {
	if !e.present() || e.kind != lnArray {
		return
	}
	for i := range e.arr {
		w.line(1)
		w.effect(&e.arr[i])
	}
}

// lensEffectSymbols maps an effect op to its symbol (§9.2).
var lensEffectSymbols = map[string]string{
	"create": "+", "update": "~", "delete": "-", "send": ">", "charge": "$", "other": "*",
}

// effect writes an effect line (§9.2) on the current line.
func (w *lensWriter) effect(e *lensNode) {
	if e.kind != lnObject {
		w.b.WriteString("? ")
		w.compact(e)
		return
	}
	op := e.get("op")
	sym := "?"
	if op != nil && op.kind == lnString {
		if s, ok := lensEffectSymbols[op.str]; ok {
			sym = s
		}
	}
	w.b.WriteString(sym)
	w.b.WriteByte(' ')
	w.text(op)
	w.b.WriteByte(' ')
	w.text(e.get("target"))
	if f := e.get("field"); f.present() {
		w.b.WriteByte('.')
		w.text(f)
	}
	from, to := e.get("from"), e.get("to")
	if from.present() || to.present() {
		w.b.WriteString(": ")
		w.side(from)
		w.b.WriteString(" → ")
		w.side(to)
	}
	if d := e.get("detail"); d.present() {
		w.b.WriteString(" — ")
		w.text(d)
	}
}

// side writes the from or to of an effect: a lean scalar, - when missing.
func (w *lensWriter) side(n *lensNode) {
	if n == nil {
		w.b.WriteByte('-')
		return
	}
	w.scalar(n)
}

// clarify writes a CLARIFY reply (§9.2).
func (w *lensWriter) clarify(f *lensNode) {
	w.line(0)
	w.b.WriteString("? ")
	w.text(f.get("question"))
	opts := f.get("options")
	if !opts.present() || opts.kind != lnArray {
		return
	}
	for i := range opts.arr {
		w.line(1)
		w.b.WriteString(strconv.Itoa(i + 1))
		w.b.WriteString(". ")
		w.text(opts.arr[i].get("label"))
	}
}

// receipt writes a RECEIPT reply (§9.2). replay and auto are read from the
// reply frame, where §4.3.1 and §4.4 put them.
func (w *lensWriter) receipt(f *lensNode) {
	r := f.get("receipt")
	replay := lensTrue(f.get("replay"))
	w.line(0)
	if u := r.get("undoes"); u.present() {
		w.b.WriteString("↶ undid ")
		w.text(u)
		w.b.WriteString(": ")
		w.text(r.get("summary"))
		w.b.WriteString(" (receipt ")
		w.text(r.get("id"))
		w.b.WriteByte(')')
		if replay {
			w.b.WriteString(" (replay)")
		}
	} else {
		w.b.WriteString("✓ ")
		w.text(r.get("summary"))
		w.b.WriteString(" (receipt ")
		w.text(r.get("id"))
		w.b.WriteByte(')')
		if replay {
			w.b.WriteString(" (replay)")
		}
		w.b.WriteString(" · ")
		if u := r.get("undo"); u.present() {
			w.b.WriteString("undo until ")
			w.time(u.get("until"))
		} else {
			w.b.WriteString("irreversible")
		}
		if lensTrue(f.get("auto")) {
			w.effects(r.get("effects"))
		}
	}
	if res := r.get("result"); res.present() {
		w.line(1)
		w.entry("result", res, 1)
	}
}

func lensTrue(n *lensNode) bool { return n != nil && n.kind == lnBool && n.b }

// errorReply writes an ERROR reply (§9.2): only the lines whose fields are present.
func (w *lensWriter) errorReply(f *lensNode) {
	w.line(0)
	w.b.WriteString("✗ ")
	w.text(f.get("code"))
	w.b.WriteString(": ")
	w.text(f.get("message"))
	if fix := f.get("fix"); fix.present() && fix.kind == lnArray {
		for i := range fix.arr {
			x := &fix.arr[i]
			w.line(1)
			w.b.WriteString("fix: ")
			w.text(x.get("say"))
			if p := x.get("params"); p.present() {
				w.b.WriteString(" → params ")
				w.compact(p)
			}
		}
	}
	if need := f.get("need"); need.present() {
		w.line(1)
		w.b.WriteString("need: ")
		w.compact(need)
	}
	if c := f.get("consent"); c.present() {
		w.line(1)
		w.b.WriteString("consent: principal must approve ")
		w.text(c.get("hash"))
		w.b.WriteString(" (")
		w.text(c.get("summary"))
		w.b.WriteByte(')')
	}
	if r := f.get("retry"); r.present() {
		w.line(1)
		w.b.WriteString("retry in: ")
		w.duration(r)
	}
}

// event writes an EVENT reply (§9.2): the progress, when it is a number,
// as floor(progress×100 + 0.5) percent.
func (w *lensWriter) event(f *lensNode) {
	w.line(0)
	w.b.WriteString("… ")
	w.text(f.get("message"))
	if p := f.get("progress"); p.present() && p.kind == lnNumber {
		w.b.WriteString(" (")
		w.b.WriteString(lensNumber(math.Floor(p.num*100 + 0.5)))
		w.b.WriteString("%)")
	}
}
