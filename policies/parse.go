package policies

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/duration"
)

// Bounds on a policy file. The file is written by the principal or an
// admin, but a daemon must not be made to spend unbounded work on it, and
// the fuzzer feeds it anything.
const (
	maxFileSize = 1 << 20
	maxEntries  = 1000 // agents, rules, consent rules, each
	maxList     = 1000 // items in one list
	maxString   = 1024 // bytes in one string
)

// Parse parses and checks a policy file. It is strict: an unknown key, a
// value of the wrong type, an unknown agent name in a rule, a limit that
// does not parse or a rule that mixes keys of different actions is an
// error. Every error is a *ParseError naming filename and a line. Parse does
// no I/O; filename is only used in messages.
func Parse(data []byte, filename string) (*Policy, error) {
	if len(data) > maxFileSize {
		return nil, &ParseError{File: filename, Line: newLines(data[:maxFileSize]).at(maxFileSize), Msg: fmt.Sprintf("file larger than %d bytes", maxFileSize)}
	}
	root, err := readTree(data, filename)
	if err != nil {
		return nil, err
	}
	d := &decoder{file: filename}
	p := &Policy{file: filename}
	if err := d.known(root, "the top level", "version", "agent", "rule", "consent"); err != nil {
		return nil, err
	}
	if v, ok := root.vals["version"]; ok {
		if v.kind != unstable.Integer || v.num != 1 {
			return nil, d.errorf(v.line, "version must be 1, the only version this daemon reads")
		}
	}
	agents, err := d.tables(root, "agent")
	if err != nil {
		return nil, err
	}
	for _, t := range agents {
		a, err := d.agent(t, p)
		if err != nil {
			return nil, err
		}
		p.agents = append(p.agents, a)
	}
	rules, err := d.tables(root, "rule")
	if err != nil {
		return nil, err
	}
	for i, t := range rules {
		r, err := d.rule(t, i, p)
		if err != nil {
			return nil, err
		}
		p.rules = append(p.rules, r)
	}
	consents, err := d.tables(root, "consent")
	if err != nil {
		return nil, err
	}
	for i, t := range consents {
		c, err := d.consent(t, i, p)
		if err != nil {
			return nil, err
		}
		p.consents = append(p.consents, c)
	}
	return p, nil
}

type decoder struct {
	file string
}

func (d *decoder) errorf(line int, format string, args ...any) error {
	if line < 1 {
		line = 1
	}
	return &ParseError{File: d.file, Line: line, Msg: fmt.Sprintf(format, args...)}
}

// known refuses any key of t not in names (fail closed: a misspelt limit
// must not silently mean "no limit").
func (d *decoder) known(t *node, where string, names ...string) error {
	for _, k := range t.keys {
		if !has(names, k) {
			return d.errorf(t.vals[k].line, "unknown key %q in %s (known keys: %s)", k, where, strings.Join(names, ", "))
		}
	}
	return nil
}

// tables returns the tables of the array of tables under key.
func (d *decoder) tables(root *node, key string) ([]*node, error) {
	v, ok := root.vals[key]
	if !ok {
		return nil, nil
	}
	if v.kind != unstable.Array {
		return nil, d.errorf(v.line, "%s must be written as [[%s]] tables, not %s", key, key, kindName(v))
	}
	if len(v.items) > maxEntries {
		return nil, d.errorf(v.items[maxEntries].line, "more than %d [[%s]] entries", maxEntries, key)
	}
	for _, t := range v.items {
		if t.kind != unstable.Table {
			return nil, d.errorf(t.line, "each %s must be a table, not %s", key, kindName(t))
		}
	}
	return v.items, nil
}

// str returns the string under key, "" with ok false when absent.
func (d *decoder) str(t *node, key string) (string, int, bool, error) {
	v, ok := t.vals[key]
	if !ok {
		return "", t.line, false, nil
	}
	if v.kind != unstable.String {
		return "", v.line, false, d.errorf(v.line, "%s must be a string, not %s", key, kindName(v))
	}
	if len(v.str) > maxString {
		return "", v.line, false, d.errorf(v.line, "%s is longer than %d bytes", key, maxString)
	}
	return v.str, v.line, true, nil
}

// strs returns the list of strings under key; a single string is taken as a
// list of one. It is nil when the key is absent, and an empty list is an
// error: leaving the key out is how a policy says "all".
func (d *decoder) strs(t *node, key string, check func(string) error) ([]string, error) {
	v, ok := t.vals[key]
	if !ok {
		return nil, nil
	}
	items := []*node{v}
	if v.kind == unstable.Array {
		items = v.items
		if len(items) == 0 {
			return nil, d.errorf(v.line, "%s is an empty list; leave the key out to mean all, or write a deny rule", key)
		}
		if len(items) > maxList {
			return nil, d.errorf(v.line, "%s has more than %d entries", key, maxList)
		}
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		if it.kind != unstable.String {
			return nil, d.errorf(it.line, "%s must be a list of strings, and %s is not a string", key, kindName(it))
		}
		if len(it.str) > maxString {
			return nil, d.errorf(it.line, "an entry of %s is longer than %d bytes", key, maxString)
		}
		if err := check(it.str); err != nil {
			return nil, d.errorf(it.line, "%s: %v", key, err)
		}
		if has(out, it.str) {
			return nil, d.errorf(it.line, "%s lists %q twice", key, it.str)
		}
		out = append(out, it.str)
	}
	return out, nil
}

// ids returns a list of uint32 under key (a single integer is a list of one).
func (d *decoder) ids(t *node, key string) ([]uint32, error) {
	v, ok := t.vals[key]
	if !ok {
		return nil, nil
	}
	items := []*node{v}
	if v.kind == unstable.Array {
		items = v.items
		if len(items) == 0 {
			return nil, d.errorf(v.line, "%s is an empty list; leave the key out instead", key)
		}
		if len(items) > maxList {
			return nil, d.errorf(v.line, "%s has more than %d entries", key, maxList)
		}
	}
	var out []uint32
	for _, it := range items {
		if it.kind != unstable.Integer {
			return nil, d.errorf(it.line, "%s must be a list of integers, and %s is not an integer", key, kindName(it))
		}
		if it.num < 0 || it.num > math.MaxUint32 {
			return nil, d.errorf(it.line, "%s: %d is not a valid id", key, it.num)
		}
		out = append(out, uint32(it.num))
	}
	return out, nil
}

func (d *decoder) boolean(t *node, key string) (bool, error) {
	v, ok := t.vals[key]
	if !ok {
		return false, nil
	}
	if v.kind != unstable.Bool {
		return false, d.errorf(v.line, "%s must be true or false, not %s", key, kindName(v))
	}
	return v.flag, nil
}

func (d *decoder) integer(t *node, key string, lo, hi, def int) (int, error) {
	v, ok := t.vals[key]
	if !ok {
		return def, nil
	}
	if v.kind != unstable.Integer {
		return 0, d.errorf(v.line, "%s must be an integer, not %s", key, kindName(v))
	}
	if v.num < int64(lo) || v.num > int64(hi) {
		return 0, d.errorf(v.line, "%s must be between %d and %d", key, lo, hi)
	}
	return int(v.num), nil
}

// duration reads a lifetime such as "15m", "1h", "2h30m" or "7d" as whole
// seconds in (0, Ceiling]; 0 when absent.
func (d *decoder) duration(t *node, key string) (int64, error) {
	s, line, ok, err := d.str(t, key)
	if err != nil || !ok {
		return 0, err
	}
	secs, err := parseLifetime(s)
	if err != nil {
		return 0, d.errorf(line, "%s: %v", key, err)
	}
	return secs, nil
}

func parseLifetime(s string) (int64, error) {
	dur, err := duration.Seconds(s)
	switch {
	case err != nil:
		return 0, err
	case dur > Ceiling*time.Second:
		return 0, fmt.Errorf("%q is longer than the ceiling of %s", s, fmtDur(Ceiling))
	}
	return int64(dur / time.Second), nil
}

func (d *decoder) money(t *node, key string) (*grant.Money, error) {
	s, line, ok, err := d.str(t, key)
	if err != nil || !ok {
		return nil, err
	}
	m, err := grant.ParseMoney(s)
	if err != nil {
		return nil, d.errorf(line, "%s: %v", key, err)
	}
	return &m, nil
}

func (d *decoder) risk(t *node, key string) (string, error) {
	s, line, ok, err := d.str(t, key)
	if err != nil || !ok {
		return "", err
	}
	if riskRank(s) < 0 {
		return "", d.errorf(line, "%s must be low, medium or high, not %q", key, s)
	}
	return s, nil
}

func (d *decoder) channels(t *node) ([]Channel, error) {
	list, err := d.strs(t, "channels", func(s string) error {
		if !has(allChannels, Channel(s)) {
			return fmt.Errorf("unknown channel %q (want terminal, desktop or phone)", s)
		}
		return nil
	})
	if err != nil || list == nil {
		return nil, err
	}
	var out []Channel
	for _, c := range allChannels { // a fixed order, whatever the file's
		if has(list, string(c)) {
			out = append(out, c)
		}
	}
	return out, nil
}

// name reads the required or optional name of an entry.
func (d *decoder) name(t *node, what string, fallback string) (string, int, error) {
	s, line, ok, err := d.str(t, "name")
	if err != nil {
		return "", 0, err
	}
	if !ok {
		if fallback == "" {
			return "", t.line, d.errorf(t.line, "this [[%s]] has no name", what)
		}
		return fallback, t.line, nil
	}
	if err := checkName(s); err != nil {
		return "", 0, d.errorf(line, "%s name: %v", what, err)
	}
	return s, line, nil
}

func checkName(s string) error {
	if s == "" || len(s) > 64 {
		return fmt.Errorf("%q must be 1 to 64 characters", s)
	}
	for i, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || i > 0 && (r == '.' || r == '_' || r == '-')
		if !ok {
			return fmt.Errorf("%q may hold only letters, digits and . _ - (not first)", s)
		}
	}
	return nil
}

// printable refuses empty strings, spaces and control characters in ids
// that end up in grants or are compared byte for byte.
func printable(s string) error {
	if s == "" {
		return fmt.Errorf("empty string")
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f || r == 0x85 || r == 0xa0 || r >= 0x2000 && r <= 0x200f || r >= 0x2028 && r <= 0x202f || r == 0xfeff {
			return fmt.Errorf("%q holds a space or control character", s)
		}
	}
	return nil
}

func checkPattern(s string) error {
	if err := printable(s); err != nil {
		return err
	}
	if !grant.ValidPattern(s) {
		return fmt.Errorf("%q is not a pattern: an exact name, or a prefix followed by one final *", s)
	}
	return nil
}

func checkVerb(s string) error {
	// The Parley verbs (§4) a grant's verbs caveat may list: grant's list.
	if !slices.Contains(grant.ParleyVerbs(), s) {
		if slices.Contains(grant.ParleyVerbs(), strings.ToUpper(s)) {
			return fmt.Errorf("verbs are upper case: write %q", strings.ToUpper(s))
		}
		return fmt.Errorf("unknown verb %q (want %s)", s, strings.Join(grant.ParleyVerbs(), ", "))
	}
	return nil
}

// checkKey accepts a holder key exactly as grant.ParsePublicKey does, so a
// policy can name no key that the daemon would refuse as a holder: in
// particular no small-order key, whose grants anyone could use (issue 10
// item 1).
func checkKey(s string) error {
	if !strings.HasPrefix(s, "ed25519:") {
		return fmt.Errorf("%q must start with \"ed25519:\"", s)
	}
	if _, err := grant.ParsePublicKey(s); err != nil {
		return fmt.Errorf("%q is not an ed25519: key of 43 base64url characters that names a usable key: %w", s, err)
	}
	return nil
}

func checkExe(s string) error {
	if err := checkPattern(s); err != nil {
		return err
	}
	if !strings.HasPrefix(s, "/") {
		return fmt.Errorf("%q must be an absolute path", s)
	}
	return nil
}

func (d *decoder) agent(t *node, p *Policy) (*agent, error) {
	if err := d.known(t, "[[agent]]", "name", "any", "user", "uid", "group", "gid", "exe", "unit", "key", "rate", "pending",
		"max_services", "max_patterns", "max_effects"); err != nil {
		return nil, err
	}
	name, line, err := d.name(t, "agent", "")
	if err != nil {
		return nil, err
	}
	if name == "*" {
		return nil, d.errorf(line, "agent name * is reserved for rules that apply to all agents")
	}
	for _, o := range p.agents {
		if o.name == name {
			return nil, d.errorf(line, "agent %q is already defined at line %d", name, o.line)
		}
	}
	a := &agent{name: name, line: t.line}
	if a.any, err = d.boolean(t, "any"); err != nil {
		return nil, err
	}
	if a.users, err = d.strs(t, "user", printable); err != nil {
		return nil, err
	}
	if a.uids, err = d.ids(t, "uid"); err != nil {
		return nil, err
	}
	if a.groups, err = d.strs(t, "group", printable); err != nil {
		return nil, err
	}
	if a.gids, err = d.ids(t, "gid"); err != nil {
		return nil, err
	}
	if a.exes, err = d.strs(t, "exe", checkExe); err != nil {
		return nil, err
	}
	if a.units, err = d.strs(t, "unit", checkPattern); err != nil {
		return nil, err
	}
	if a.keys, err = d.strs(t, "key", checkKey); err != nil {
		return nil, err
	}
	if a.rate, err = d.integer(t, "rate", 1, 100000, DefaultRate); err != nil {
		return nil, err
	}
	if a.pending, err = d.integer(t, "pending", 0, 1000, DefaultPending); err != nil {
		return nil, err
	}
	if a.bounds.Services, err = d.integer(t, "max_services", 1, MaxListBound, DefaultMaxServices); err != nil {
		return nil, err
	}
	if a.bounds.Patterns, err = d.integer(t, "max_patterns", 1, MaxListBound, DefaultMaxPatterns); err != nil {
		return nil, err
	}
	if a.bounds.Effects, err = d.integer(t, "max_effects", 1, MaxListBound, DefaultMaxEffects); err != nil {
		return nil, err
	}
	matchers := a.users != nil || a.uids != nil || a.groups != nil || a.gids != nil || a.exes != nil || a.units != nil || a.keys != nil
	switch {
	case a.any && matchers:
		return nil, d.errorf(t.vals["any"].line, "agent %q: any = true matches every caller; remove it or the other matchers", name)
	case !a.any && !matchers:
		// An agent with no matcher would match everyone by accident.
		return nil, d.errorf(t.line, "agent %q names no user, uid, group, gid, exe, unit or key; write any = true to match every caller", name)
	}
	// Attack: any user the daemon lets connect can start a program at a
	// chosen path, or in a systemd unit of a chosen name (systemd-run
	// --user), so exe and unit alone identify nobody. They may only narrow
	// an identity the kernel or a proven key vouches for.
	strong := a.users != nil || a.uids != nil || a.groups != nil || a.gids != nil || a.keys != nil
	if (a.exes != nil || a.units != nil) && !strong {
		key := "exe"
		if a.exes == nil {
			key = "unit"
		}
		return nil, d.errorf(t.vals[key].line, "agent %q: %s can be chosen by any local user, so it only narrows an agent; add user, uid, group, gid or key", name, key)
	}
	return a, nil
}

func (d *decoder) agentList(t *node, p *Policy, what string) ([]string, error) {
	v, ok := t.vals["agents"]
	if !ok {
		return nil, d.errorf(t.line, "this %s names no agents; write agents = [\"*\"] for all", what)
	}
	list, err := d.strs(t, "agents", func(s string) error {
		if s == "*" {
			return nil
		}
		for _, a := range p.agents {
			if a.name == s {
				return nil
			}
		}
		return fmt.Errorf("no [[agent]] is named %q", s)
	})
	if err != nil {
		return nil, err
	}
	if len(list) > 1 && has(list, "*") {
		return nil, d.errorf(v.line, "agents: * already means every agent; list it alone")
	}
	return list, nil
}

func (d *decoder) rule(t *node, i int, p *Policy) (*rule, error) {
	if err := d.known(t, "[[rule]]", "name", "agents", "action", "svc", "verbs", "can",
		"max_exp", "default_exp", "per", "spend", "risk", "channels", "strong", "on_exceed", "remember", "remember_exp"); err != nil {
		return nil, err
	}
	name, line, err := d.name(t, "rule", fmt.Sprintf("rule-%d", i+1))
	if err != nil {
		return nil, err
	}
	for _, o := range p.rules {
		if o.name == name {
			return nil, d.errorf(line, "rule %q is already defined at line %d", name, o.line)
		}
	}
	r := &rule{name: name, line: t.line}
	act, aline, ok, err := d.str(t, "action")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, d.errorf(t.line, "rule %q has no action: write action = \"auto\", \"ask\" or \"deny\"", name)
	}
	switch Action(act) {
	case Auto, Ask, Deny:
		r.action = Action(act)
	default:
		return nil, d.errorf(aline, "rule %q: action must be auto, ask or deny, not %q", name, act)
	}
	if r.agents, err = d.agentList(t, p, "rule"); err != nil {
		return nil, err
	}
	if r.scope.svc, err = d.strs(t, "svc", printable); err != nil {
		return nil, err
	}
	if r.scope.verbs, err = d.strs(t, "verbs", checkVerb); err != nil {
		return nil, err
	}
	if r.scope.can, err = d.strs(t, "can", checkPattern); err != nil {
		return nil, err
	}
	if r.action == Deny {
		// A deny rule refuses by scope alone; limits would suggest it
		// allows something below them, which it does not.
		for _, k := range []string{"max_exp", "default_exp", "per", "spend", "risk", "channels", "strong", "on_exceed", "remember", "remember_exp"} {
			if v, ok := t.vals[k]; ok {
				return nil, d.errorf(v.line, "rule %q: a deny rule takes no %s; it refuses every request that reaches into its svc, verbs and can", name, k)
			}
		}
		return r, nil
	}
	if r.action == Auto {
		for _, k := range []string{"channels", "strong", "remember", "remember_exp"} {
			if v, ok := t.vals[k]; ok {
				return nil, d.errorf(v.line, "rule %q: %s is only for action = \"ask\"", name, k)
			}
		}
	}
	if r.maxExp, err = d.duration(t, "max_exp"); err != nil {
		return nil, err
	}
	if r.defaultExp, err = d.duration(t, "default_exp"); err != nil {
		return nil, err
	}
	if r.maxExp != 0 && r.defaultExp > r.maxExp {
		return nil, d.errorf(t.vals["default_exp"].line, "rule %q: default_exp %s is longer than max_exp %s", name, fmtDur(r.defaultExp), fmtDur(r.maxExp))
	}
	if r.per, err = d.money(t, "per"); err != nil {
		return nil, err
	}
	if r.spend, err = d.money(t, "spend"); err != nil {
		return nil, err
	}
	if r.risk, err = d.risk(t, "risk"); err != nil {
		return nil, err
	}
	if r.channels, err = d.channels(t); err != nil {
		return nil, err
	}
	if r.strong, err = d.boolean(t, "strong"); err != nil {
		return nil, err
	}
	ex, eline, ok, err := d.str(t, "on_exceed")
	if err != nil {
		return nil, err
	}
	switch {
	case !ok || ex == "next":
	case ex == "clamp":
		r.clamp = true
	default:
		return nil, d.errorf(eline, "rule %q: on_exceed must be \"next\" or \"clamp\", not %q", name, ex)
	}
	if err := d.remember(t, r); err != nil {
		return nil, err
	}
	return r, nil
}

// remember reads an ask rule's remember and remember_exp (issue 24): how
// long a human may have the daemon keep approving a request, and how long
// each grant issued meanwhile lives. A remember_exp longer than max_exp or
// than remember is refused rather than cut: the file would say one thing
// and the daemon do another.
func (d *decoder) remember(t *node, r *rule) error {
	var err error
	if r.remember, err = d.duration(t, "remember"); err != nil {
		return err
	}
	if r.rememberExp, err = d.duration(t, "remember_exp"); err != nil {
		return err
	}
	if v, ok := t.vals["remember_exp"]; ok && r.remember == 0 {
		return d.errorf(v.line, "rule %q: remember_exp needs remember, the longest a human may have approvals remembered", r.name)
	}
	if r.remember == 0 {
		return nil
	}
	if r.rememberExp == 0 {
		r.rememberExp = DefaultRememberExp
		if r.maxExp != 0 {
			r.rememberExp = min(r.rememberExp, r.maxExp)
		}
		r.rememberExp = min(r.rememberExp, r.remember)
		return nil
	}
	line := t.vals["remember_exp"].line
	if r.maxExp != 0 && r.rememberExp > r.maxExp {
		return d.errorf(line, "rule %q: remember_exp %s is longer than max_exp %s; each grant under a remembered approval lives at most max_exp",
			r.name, fmtDur(r.rememberExp), fmtDur(r.maxExp))
	}
	if r.rememberExp > r.remember {
		return d.errorf(line, "rule %q: remember_exp %s is longer than remember %s", r.name, fmtDur(r.rememberExp), fmtDur(r.remember))
	}
	return nil
}

func (d *decoder) consent(t *node, i int, p *Policy) (*consentRule, error) {
	for _, k := range []string{"remember", "remember_exp"} {
		if v, ok := t.vals[k]; ok {
			return nil, d.errorf(v.line, "[[consent]]: %s is not allowed: a consent is one-shot, bound to one proposal (§6.6), and is never remembered", k)
		}
	}
	if err := d.known(t, "[[consent]]", "name", "agents", "action", "svc", "can",
		"deny_above_cost", "deny_above_risk", "strong_above_cost", "strong_above_risk", "strong", "channels", "max_exp"); err != nil {
		return nil, err
	}
	name, line, err := d.name(t, "consent", fmt.Sprintf("consent-%d", i+1))
	if err != nil {
		return nil, err
	}
	for _, o := range p.consents {
		if o.name == name {
			return nil, d.errorf(line, "consent rule %q is already defined at line %d", name, o.line)
		}
	}
	c := &consentRule{name: name, line: t.line, action: Ask}
	act, aline, ok, err := d.str(t, "action")
	if err != nil {
		return nil, err
	}
	switch {
	case !ok || Action(act) == Ask:
	case Action(act) == Deny:
		c.action = Deny
	case Action(act) == Auto:
		return nil, d.errorf(aline, "consent rule %q: consent is never issued without a human; use action = \"ask\" or \"deny\"", name)
	default:
		return nil, d.errorf(aline, "consent rule %q: action must be ask or deny, not %q", name, act)
	}
	if c.agents, err = d.agentList(t, p, "consent rule"); err != nil {
		return nil, err
	}
	if c.svc, err = d.strs(t, "svc", printable); err != nil {
		return nil, err
	}
	if c.can, err = d.strs(t, "can", checkPattern); err != nil {
		return nil, err
	}
	if c.action == Deny {
		for _, k := range []string{"deny_above_cost", "deny_above_risk", "strong_above_cost", "strong_above_risk", "strong", "channels", "max_exp"} {
			if v, ok := t.vals[k]; ok {
				return nil, d.errorf(v.line, "consent rule %q: a deny rule takes no %s", name, k)
			}
		}
		return c, nil
	}
	if c.denyAboveCost, err = d.money(t, "deny_above_cost"); err != nil {
		return nil, err
	}
	if c.denyAboveRisk, err = d.risk(t, "deny_above_risk"); err != nil {
		return nil, err
	}
	if c.strongAboveCost, err = d.money(t, "strong_above_cost"); err != nil {
		return nil, err
	}
	if c.strongAboveRisk, err = d.risk(t, "strong_above_risk"); err != nil {
		return nil, err
	}
	if c.strong, err = d.boolean(t, "strong"); err != nil {
		return nil, err
	}
	if c.channels, err = d.channels(t); err != nil {
		return nil, err
	}
	if c.maxExp, err = d.duration(t, "max_exp"); err != nil {
		return nil, err
	}
	return c, nil
}
