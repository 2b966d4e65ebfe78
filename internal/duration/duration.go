// Package duration is the one reader of the durations that flags and
// configuration keys take, for both binaries and the policy: whole numbers
// with the units d (24 hours), h, m, s and ms, largest first, each once, as
// "90s", "10m", "1h30m", "7d", "1d12h" or "300ms". Go's own form ("1.5h")
// is not taken, and Go's has no days: a day is a unit a grant's lifetime
// or a key's overlap is often counted in. What must be whole seconds (a
// grant's times, a policy's lifetimes) is read with Seconds.
package duration

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Max bounds durations so that now plus a duration stays far from
// overflow, and far from the integer limit of canonical JSON (§10).
const Max = 100 * 365 * 24 * time.Hour

// Parse parses a positive duration written as whole numbers with the
// units d (24 hours), h, m, s and ms, largest first, each once: "90s",
// "10m", "1h", "7d", "1h30m", "300ms".
func Parse(s string) (time.Duration, error) {
	orig := s
	if s == "" {
		return 0, errors.New("empty duration")
	}
	var total time.Duration
	last := -1 // index in units of the last unit seen, so they go largest first
	for s != "" {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == 0 && s[0] == '-' {
			return 0, fmt.Errorf("duration %q: must be positive, such as 90s or 7d", orig)
		}
		if i == 0 {
			return 0, fmt.Errorf("duration %q: want a number then a unit (%s), such as 90s or 7d", orig, unitNames)
		}
		if i == len(s) {
			return 0, fmt.Errorf("duration %q: %q has no unit (%s)", orig, s, unitNames)
		}
		n, err := strconv.ParseInt(s[:i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("duration %q: too long", orig)
		}
		if s[i] == '.' {
			return 0, fmt.Errorf("duration %q: whole numbers only, such as 90m rather than 1.5h", orig)
		}
		end := i + 1
		for end < len(s) && (s[end] < '0' || s[end] > '9') {
			end++
		}
		u := -1
		for j, unit := range units {
			if s[i:end] == unit.name {
				u = j
			}
		}
		if u < 0 {
			return 0, fmt.Errorf("duration %q: unknown unit %q (want %s)", orig, s[i:end], unitNames)
		}
		if u <= last {
			return 0, fmt.Errorf("duration %q: units must go from largest to smallest, each once", orig)
		}
		last = u
		if n > int64(Max/units[u].d) {
			return 0, fmt.Errorf("duration %q: too long", orig)
		}
		total += time.Duration(n) * units[u].d
		if total > Max {
			return 0, fmt.Errorf("duration %q: too long", orig)
		}
		s = s[end:]
	}
	if total <= 0 {
		return 0, fmt.Errorf("duration %q: must be more than zero", orig)
	}
	return total, nil
}

// units are the units Parse takes, largest first.
var units = []struct {
	name string
	d    time.Duration
}{{"d", 24 * time.Hour}, {"h", time.Hour}, {"m", time.Minute}, {"s", time.Second}, {"ms", time.Millisecond}}

const unitNames = "d, h, m, s or ms"

// Seconds is Parse for what counts in whole seconds, as a grant's times
// and a policy's lifetimes do.
func Seconds(s string) (time.Duration, error) {
	d, err := Parse(s)
	if err == nil && d%time.Second != 0 {
		return 0, fmt.Errorf("duration %q: whole seconds only, such as 1s rather than 1500ms", s)
	}
	return d, err
}

// Format writes d in the form Parse reads, largest unit first, with what
// is below a millisecond left out: "1d12h", "90m" is "1h30m", 0 is "0s".
func Format(d time.Duration) string {
	d = d.Truncate(time.Millisecond)
	if d <= 0 {
		return "0s"
	}
	var b []byte
	for _, u := range units {
		if n := d / u.d; n > 0 {
			b = strconv.AppendInt(b, int64(n), 10)
			b = append(b, u.name...)
			d -= n * u.d
		}
	}
	return string(b)
}

// Value is a duration as a flag (it is a pflag.Value and a flag.Value) and
// as a configuration key (TOML text), read with Parse.
type Value struct{ time.Duration }

// Set parses s with Parse.
func (v *Value) Set(s string) error {
	d, err := Parse(s)
	if err != nil {
		return err
	}
	v.Duration = d
	return nil
}

// String writes the duration as Format does.
func (v *Value) String() string {
	if v == nil {
		return "0s"
	}
	return Format(v.Duration)
}

// Type names the value in a flag's usage.
func (v *Value) Type() string { return "duration" }

// UnmarshalText parses a configuration key's value with Parse.
func (v *Value) UnmarshalText(b []byte) error { return v.Set(string(b)) }

// MarshalText writes the duration as Format does.
func (v Value) MarshalText() ([]byte, error) { return []byte(Format(v.Duration)), nil }
