package duration

import (
	"strings"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	tests := []struct {
		name, in string
		want     time.Duration
		err      string
	}{
		{"ok/seconds", "90s", 90 * time.Second, ""},
		{"ok/minutes", "10m", 10 * time.Minute, ""},
		{"ok/hour", "1h", time.Hour, ""},
		{"ok/days", "7d", 7 * 24 * time.Hour, ""},
		{"ok/compound", "1d12h30m5s", 36*time.Hour + 30*time.Minute + 5*time.Second, ""},
		{"ok/leading-zero", "05m", 5 * time.Minute, ""},
		{"ok/hundred-years", "36500d", 36500 * 24 * time.Hour, ""},
		{"fail/empty", "", 0, "empty duration"},
		{"fail/no-unit", "90", 0, "has no unit"},
		{"fail/trailing-number", "1h30", 0, `"30" has no unit`},
		{"fail/unknown-unit", "10x", 0, `unknown unit "x"`},
		{"ok/milliseconds", "300ms", 300 * time.Millisecond, ""},
		{"ok/seconds-and-milliseconds", "1s500ms", 1500 * time.Millisecond, ""},
		{"fail/microseconds", "10us", 0, `unknown unit "us"`},
		{"fail/ms-before-s", "500ms1s", 0, "largest to smallest"},
		{"fail/upper-case", "1H", 0, `unknown unit "H"`},
		{"fail/fraction", "1.5h", 0, "whole numbers only"},
		{"fail/negative", "-1h", 0, "must be positive"},
		{"fail/sign", "+1h", 0, "want a number then a unit"},
		{"fail/zero", "0s", 0, "more than zero"},
		{"fail/order", "30m1h", 0, "largest to smallest"},
		{"fail/repeated-unit", "1h1h", 0, "largest to smallest"},
		{"fail/too-long", "36501d", 0, "too long"},
		{"fail/overflow", "99999999999999999999s", 0, "too long"},
		{"fail/overflow-units", "9223372036d", 0, "too long"},
		{"fail/space", "1h 30m", 0, `unknown unit "h "`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.in)
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("Parse(%q): %v", tt.in, err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("Parse(%q): error %v, want one with %q", tt.in, err, tt.err)
			}
			if got != tt.want {
				t.Errorf("Parse(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

// TestFormat checks that Format writes what Parse reads back.
func TestFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{
		36 * time.Hour:                      "1d12h",
		90 * time.Minute:                    "1h30m",
		time.Second:                         "1s",
		7*24*time.Hour + 5*time.Second:      "7d5s",
		0:                                   "0s",
		1500 * time.Millisecond:             "1s500ms",
		time.Millisecond + time.Microsecond: "1ms",
	} {
		if got := Format(d); got != want {
			t.Errorf("Format(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestSeconds checks that what counts in seconds takes no less.
func TestSeconds(t *testing.T) {
	if d, err := Seconds("1d12h"); err != nil || d != 36*time.Hour {
		t.Errorf("Seconds(1d12h) = %v, %v", d, err)
	}
	if _, err := Seconds("1500ms"); err == nil || !strings.Contains(err.Error(), "whole seconds") {
		t.Errorf("Seconds(1500ms): %v", err)
	}
	if _, err := Seconds("1.5h"); err == nil || !strings.Contains(err.Error(), "whole numbers") {
		t.Errorf("Seconds(1.5h): %v", err)
	}
}

// TestValue checks the flag and configuration forms.
func TestValue(t *testing.T) {
	var v Value
	if err := v.Set("1d12h"); err != nil || v.Duration != 36*time.Hour || v.String() != "1d12h" || v.Type() != "duration" {
		t.Errorf("Set: %v, %v %q", err, v.Duration, v.String())
	}
	if err := v.UnmarshalText([]byte("1.5h")); err == nil || v.Duration != 36*time.Hour {
		t.Errorf("UnmarshalText(1.5h): %v, and the value became %v", err, v.Duration)
	}
	b, err := v.MarshalText()
	if err != nil || string(b) != "1d12h" {
		t.Errorf("MarshalText: %q, %v", b, err)
	}
}

// FuzzParse checks that Parse never panics, refuses what is not positive
// or too long, and that what it takes Format writes back to the same.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"90s", "1d12h30m5s", "36500d", "1.5h", "-1h", "1h1h", "99999999999999999999s", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := Parse(s)
		if err != nil {
			return
		}
		if d <= 0 || d > Max || d%time.Millisecond != 0 {
			t.Fatalf("Parse(%q) = %v", s, d)
		}
		if back, err := Parse(Format(d)); err != nil || back != d {
			t.Fatalf("Parse(Format(%v)) = %v, %v", d, back, err)
		}
	})
}
