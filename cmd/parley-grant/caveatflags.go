package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/duration"
	"github.com/spf13/cobra"
)

// caveatFlags holds the command-line form of the caveats of §6.3, shared by
// every command that asks for a grant or narrows one (attenuate, issue,
// explain).
type caveatFlags struct {
	svc      []string
	verbs    []string
	can      []string
	exp      string
	nbf      string
	per      string
	spend    string
	risk     string
	only     string
	withOnly bool
}

// argName is the name of a caveat argument in a message. The command line
// shows it as its flag (--exp), the MCP binding as the tool argument of the
// same name (exp): each binding renders the same typed message its own way,
// rather than rewriting the other's text.
type argName string

// argStyle renders an argName for one binding.
type argStyle func(argName) string

var (
	// flagStyle names arguments as the command line's flags.
	flagStyle argStyle = func(n argName) string { return "--" + string(n) }
	// toolStyle names arguments as the MCP tools' arguments.
	toolStyle argStyle = func(n argName) string { return string(n) }
)

// argText is a sentence about caveat arguments: a format whose argName
// operands are rendered by the binding that shows it.
type argText struct {
	format string
	args   []any
}

func argf(format string, args ...any) argText { return argText{format, args} }

// render returns the sentence with its argument names in style.
func (a argText) render(style argStyle) string {
	args := make([]any, len(a.args))
	for i, v := range a.args {
		if n, ok := v.(argName); ok {
			v = style(n)
		}
		args[i] = v
	}
	return fmt.Errorf(a.format, args...).Error()
}

// argError is a caveat argument that cannot be used: the same error for
// the command line (exit code 2, as --exp) and for the MCP tools
// (invalid_params, as exp).
type argError struct {
	text argText
	hint string
}

func (e *argError) Error() string { return e.text.render(flagStyle) }

// Unwrap returns the cause the message wraps with %w, if any.
func (e *argError) Unwrap() error {
	return errors.Unwrap(fmt.Errorf(e.text.format, e.text.args...))
}

// badArg returns an argError as a usage error of the command line; the
// MCP binding finds the argError inside (errors.As).
func badArg(hint, format string, args ...any) error {
	return usage(&argError{text: argf(format, args...), hint: hint}, hint)
}

// register adds the caveat flags to cmd, with the completion of their
// values. withOnly adds --only, which only makes sense where a grant for one
// proposal can be asked for.
func (f *caveatFlags) register(cmd *cobra.Command, withOnly bool) {
	fs := cmd.Flags()
	fs.StringSliceVar(&f.svc, "svc", nil, "only at these services (repeatable, or comma-separated): the svc caveat")
	fs.StringSliceVar(&f.verbs, "verbs", nil, "only these verbs, such as ASK,INTENT,COMMIT: the verbs caveat")
	fs.StringSliceVar(&f.can, "can", nil, "only capabilities matching these patterns, such as 'calendar.*' (repeatable): the can caveat")
	fs.StringVar(&f.exp, "exp", "", "expire after a duration (90s, 10m, 1h, 7d) or at a time (RFC 3339 or unix seconds)")
	fs.StringVar(&f.nbf, "nbf", "", "not valid before a duration from now or a time (RFC 3339 or unix seconds)")
	fs.StringVar(&f.per, "per", "", "each COMMIT costs at most this much, such as 20.00USD or 500JPY")
	fs.StringVar(&f.spend, "spend", "", "all COMMITs under this grant cost at most this much in total, such as 100.00USD")
	fs.StringVar(&f.risk, "risk", "", "COMMIT only proposals of at most this risk: low, medium or high")
	if withOnly {
		f.withOnly = true
		fs.StringVar(&f.only, "only", "", "COMMIT only the proposal with this hash (see parley-grant hash)")
	}
	cmd.RegisterFlagCompletionFunc("verbs", completeVerbs)
	cmd.RegisterFlagCompletionFunc("risk", completeRisk)
}

// caveats returns the caveats the flags ask for, in the order svc, verbs,
// can, nbf, exp, per, spend, risk, only. Relative times count from now.
// Every caveat it returns passes grant.Caveat.Check. Its errors are usage
// errors holding an *argError, which names the argument.
func (f *caveatFlags) caveats(now time.Time) ([]grant.Caveat, error) {
	var out []grant.Caveat
	if f.svc != nil {
		ids, err := listFlag("svc", f.svc)
		if err != nil {
			return nil, err
		}
		out = append(out, grant.Svc(ids...))
	}
	if f.verbs != nil {
		vs, err := parseVerbs(f.verbs)
		if err != nil {
			return nil, err
		}
		out = append(out, grant.Verbs(vs...))
	}
	if f.can != nil {
		pats, err := listFlag("can", f.can)
		if err != nil {
			return nil, err
		}
		for _, p := range pats {
			if !grant.ValidPattern(p) {
				return nil, badArg("a pattern is a name, or a prefix followed by * such as 'calendar.*'",
					"%s %q: * may only end a pattern", argName("can"), p)
			}
		}
		out = append(out, grant.Can(pats...))
	}
	var nbf, exp int64
	if f.nbf != "" {
		t, err := parseTime(f.nbf, now)
		if err != nil {
			return nil, badArg(timeHint, "%s: %w", argName("nbf"), err)
		}
		nbf = t.Unix()
		out = append(out, grant.Nbf(nbf))
	}
	if f.exp != "" {
		t, err := parseTime(f.exp, now)
		if err != nil {
			return nil, badArg(timeHint, "%s: %w", argName("exp"), err)
		}
		exp = t.Unix()
		if exp <= now.Unix() {
			return nil, badArg("give a time in the future, or a duration such as 1h",
				"%s %s is not in the future", argName("exp"), timeWords(exp))
		}
		if f.nbf != "" && nbf >= exp {
			return nil, badArg("", "%s %s is not before %s %s: the grant would never be valid",
				argName("nbf"), timeWords(nbf), argName("exp"), timeWords(exp))
		}
		out = append(out, grant.Exp(exp))
	}
	if f.per != "" {
		m, err := grant.ParseMoney(f.per)
		if err != nil {
			return nil, badArg(moneyHint, "%s: %w", argName("per"), err)
		}
		out = append(out, grant.Per(m))
	}
	if f.spend != "" {
		m, err := grant.ParseMoney(f.spend)
		if err != nil {
			return nil, badArg(moneyHint, "%s: %w", argName("spend"), err)
		}
		out = append(out, grant.Spend(m))
	}
	if f.risk != "" {
		level := strings.ToLower(strings.TrimSpace(f.risk))
		if grant.Risk(level).Check() != nil {
			return nil, badArg("", "%s %q: want low, medium or high", argName("risk"), f.risk)
		}
		out = append(out, grant.Risk(level))
	}
	if f.only != "" {
		if !isHash(f.only) {
			return nil, badArg("compute a proposal's hash with: parley-grant hash FILE",
				"%s %q: not a proposal hash (43 characters of b64url)", argName("only"), f.only)
		}
		out = append(out, grant.Only(f.only))
	}
	for _, c := range out {
		// The flags above build only well-formed caveats, but a list
		// may still be over a cap of the token format.
		if err := c.Check(); err != nil {
			return nil, badArg("", "%s: %w", argName(c.Name), err)
		}
	}
	return out, nil
}

const (
	timeHint  = "give a duration such as 90s, 10m, 1h or 7d, an RFC 3339 time such as 2026-09-24T15:00:00Z, or unix seconds"
	moneyHint = "give an amount and a currency such as 20.00USD, or 500JPY for a currency without decimals"
)

// listFlag returns the non-empty, de-duplicated entries of a list flag.
func listFlag(name string, vals []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, v := range vals {
		v = strings.TrimSpace(v)
		if v == "" {
			return nil, badArg("", "%s: an empty entry", argName(name))
		}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		return nil, badArg("", "%s: no entries", argName(name))
	}
	return out, nil
}

// parseVerbs returns the verbs of a --verbs flag in upper case, refusing
// any that cannot carry a grant.
func parseVerbs(vals []string) ([]string, error) {
	vs, err := listFlag("verbs", vals)
	if err != nil {
		return nil, err
	}
	out := vs[:0]
	seen := map[string]bool{}
	for _, v := range vs {
		u, err := parseVerb(v)
		if err != nil {
			return nil, badArg("", "%s: %w", argName("verbs"), err)
		}
		if !seen[u] {
			seen[u] = true
			out = append(out, u)
		}
	}
	return out, nil
}

// parseVerb returns v in upper case when it is a verb that carries grants
// (grantVerbs: §3, §4).
func parseVerb(v string) (string, error) {
	u := strings.ToUpper(strings.TrimSpace(v))
	verbs := grantVerbs()
	if slices.Contains(verbs, u) {
		return u, nil
	}
	return "", fmt.Errorf("%q is not one of %s", v, strings.Join(verbs, ", "))
}

// isHash reports whether s has the form of a proposal hash: the b64url of
// 32 bytes (§5.1).
func isHash(s string) bool {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	return err == nil && len(b) == 32 && !strings.ContainsAny(s, "\r\n")
}

// parseTime parses a time as a duration from now ("1h", see
// parseDuration), an RFC 3339 time ("2026-09-24T15:00:00Z") or unix
// seconds ("1790000000"). The result is truncated to whole seconds.
func parseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return time.Time{}, errors.New("empty time")
	case isDigits(s):
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n > maxUnix {
			return time.Time{}, fmt.Errorf("unix time %q out of range", s)
		}
		return time.Unix(n, 0), nil
	case looksLikeDuration(s):
		d, err := duration.Seconds(s)
		if err != nil {
			return time.Time{}, err
		}
		return now.Add(d).Truncate(time.Second), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("time %q: not a duration, an RFC 3339 time or unix seconds", s)
	}
	if t.Unix() < 0 || t.Unix() > maxUnix {
		return time.Time{}, fmt.Errorf("time %q out of range", s)
	}
	return t.Truncate(time.Second), nil
}

// maxUnix is the largest time flags accept: the year 9999, which every
// RFC 3339 rendering can show.
const maxUnix = 253402300799

// parseUnix parses a --now or --ts flag: unix seconds, or an RFC 3339 time.
func parseUnix(name, s string) (int64, error) {
	if isDigits(s) {
		n, err := strconv.ParseInt(s, 10, 64)
		if err == nil && n <= maxUnix {
			return n, nil
		}
	} else if t, err := time.Parse(time.RFC3339, s); err == nil && t.Unix() >= 0 && t.Unix() <= maxUnix {
		return t.Unix(), nil
	}
	return 0, usagef("give unix seconds such as 1790000000, or an RFC 3339 time", "--%s %q: not a time", name, s)
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// looksLikeDuration reports whether s is written like a duration rather
// than a date: digits followed by a unit letter, with no date punctuation.
func looksLikeDuration(s string) bool {
	return !strings.ContainsAny(s, "-:T") && s[0] >= '0' && s[0] <= '9'
}

// timeWords renders unix seconds for a message: RFC 3339 in UTC.
func timeWords(unix int64) string {
	if unix < 0 || unix > maxUnix {
		return strconv.FormatInt(unix, 10)
	}
	return time.Unix(unix, 0).UTC().Format(time.RFC3339)
}

// relWords renders the time from now to unix as "in 1h 5m" or "5m ago",
// with at most two units, or "now".
func relWords(unix, now int64) string {
	d := unix - now
	switch {
	case d == 0:
		return "now"
	case d > 0:
		return "in " + spanWords(d)
	}
	if d == math.MinInt64 {
		d++
	}
	return spanWords(-d) + " ago"
}

// spanWords renders a positive number of seconds in its largest unit and
// the next one when that is not zero: "3d 4h", "1h" (for 3600 to 3659),
// "1m 30s".
func spanWords(s int64) string {
	units := []struct {
		name string
		n    int64
	}{{"d", 86400}, {"h", 3600}, {"m", 60}, {"s", 1}}
	for i, u := range units {
		if s < u.n && u.n > 1 {
			continue
		}
		out := strconv.FormatInt(s/u.n, 10) + u.name
		if i+1 < len(units) {
			next := units[i+1]
			if q := s % u.n / next.n; q > 0 {
				out += " " + strconv.FormatInt(q, 10) + next.name
			}
		}
		return out
	}
	return "0s"
}

// nowUsage is the help text of every --now flag.
const nowUsage = "the current time, in unix seconds or RFC 3339 (default: the clock; for tests and for checking a grant at another time)"

// resolveNow returns the time a --now flag names, or the clock's time when
// the flag is empty.
func resolveNow(flag string) (time.Time, error) {
	if flag == "" {
		return time.Now().Truncate(time.Second), nil
	}
	n, err := parseUnix("now", flag)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(n, 0), nil
}
