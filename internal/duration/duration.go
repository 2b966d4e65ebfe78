// Package duration is the one reader of the durations that flags and
// configuration keys take, for both binaries and the policy: whole numbers
// with the units d (24 hours), h, m and s, largest first, each once, as
// "90s", "10m", "1h30m", "7d" or "1d12h". Go's own form ("1.5h", "300ms")
// is not taken: a day is a unit a grant's lifetime or a key's overlap is
// often counted in, and a fraction or a sub-second is never needed.
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

// Parse parses a positive duration written as whole numbers with
// the units d (24 hours), h, m and s, largest first: "90s", "10m", "1h",
// "7d", "1h30m".
func Parse(s string) (time.Duration, error) {
	orig := s
	if s == "" {
		return 0, errors.New("empty duration")
	}
	var total time.Duration
	last := -1 // index in units of the last unit seen, so they go largest first
	units := []struct {
		c rune
		d time.Duration
	}{{'d', 24 * time.Hour}, {'h', time.Hour}, {'m', time.Minute}, {'s', time.Second}}
	for s != "" {
		i := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		if i == 0 {
			return 0, fmt.Errorf("duration %q: want a number then a unit (d, h, m or s), such as 90s or 7d", orig)
		}
		if i == len(s) {
			return 0, fmt.Errorf("duration %q: %q has no unit (d, h, m or s)", orig, s)
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
			if end == i+1 && rune(s[i]) == unit.c {
				u = j
			}
		}
		if u < 0 {
			return 0, fmt.Errorf("duration %q: unknown unit %q (want d, h, m or s)", orig, s[i:end])
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
		s = s[i+1:]
	}
	if total <= 0 {
		return 0, fmt.Errorf("duration %q: must be more than zero", orig)
	}
	return total, nil
}

// Format writes d in the form Parse reads, largest unit first, with what
// is below a second left out: "1d12h", "90m" is "1h30m", 0 is "0s".
func Format(d time.Duration) string {
	d = d.Truncate(time.Second)
	if d <= 0 {
		return "0s"
	}
	var b []byte
	for _, u := range []struct {
		c byte
		d time.Duration
	}{{'d', 24 * time.Hour}, {'h', time.Hour}, {'m', time.Minute}, {'s', time.Second}} {
		if n := d / u.d; n > 0 {
			b = strconv.AppendInt(b, int64(n), 10)
			b = append(b, u.c)
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
