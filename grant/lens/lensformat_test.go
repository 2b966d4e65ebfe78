package lens

import (
	"math"
	"testing"
	"time"
)

func TestFormatMoney(t *testing.T) {
	tests := []struct {
		name     string
		amount   int64
		currency string
		want     string
	}{
		{"ok/cents", 1250, "USD", "12.50 USD"},
		{"ok/zero", 0, "USD", "0.00 USD"},
		{"ok/one-cent", 1, "EUR", "0.01 EUR"},
		{"ok/negative-cents", -5, "EUR", "-0.05 EUR"},
		{"ok/negative-whole", -1200, "GBP", "-12.00 GBP"},
		{"ok/yen", 500, "JPY", "500 JPY"},
		{"ok/negative-yen", -500, "JPY", "-500 JPY"},
		{"ok/every-zero-decimal", 7, "XOF", "7 XOF"},
		{"ok/krw", 123456789, "KRW", "123456789 KRW"},
		{"ok/lower-case-is-not-zero-decimal", 500, "jpy", "5.00 jpy"},
		{"ok/max", math.MaxInt64, "USD", "92233720368547758.07 USD"},
		{"ok/min", math.MinInt64, "USD", "-92233720368547758.08 USD"},
		{"ok/min-zero-decimal", math.MinInt64, "VND", "-9223372036854775808 VND"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := FormatMoney(tt.amount, tt.currency); got != tt.want {
				t.Errorf("FormatMoney(%d, %q) = %q, want %q", tt.amount, tt.currency, got, tt.want)
			}
		})
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0d"}, // the largest unit that divides 0 is d (§9.2 taken literally)
		{1, "1s"},
		{45, "45s"},
		{59, "59s"},
		{60, "1m"},
		{90, "90s"},
		{3600, "1h"},
		{5400, "90m"},
		{86399, "86399s"},
		{86400, "1d"},
		{90000, "25h"},
		{172800, "2d"},
		{-3600, "-1h"},
		{-90, "-90s"},
		{math.MaxInt64, "9223372036854775807s"},
	}
	for _, tt := range tests {
		if got := FormatDuration(tt.in); got != tt.want {
			t.Errorf("FormatDuration(%d) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestLensDuration pins durations that are not int64 integers, computed in
// float64 as ECMAScript computes them.
func TestLensDuration(t *testing.T) {
	tests := []struct {
		in   float64
		want string
	}{
		{3600, "1h"},
		{1.5, "1.5s"},
		{-0.5, "-0.5s"},
		{86400 * 1e12, "1000000000000d"},
		{1e300, "1.6666666666666668e+298m"}, // as V8: 1e300 % 60 is 0
	}
	for _, tt := range tests {
		if got := lensDuration(tt.in); got != tt.want {
			t.Errorf("lensDuration(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestFormatTime(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "1970-01-01T00:00Z"},
		{1790000600, "2026-09-21T14:23:20Z"},
		{1790003700, "2026-09-21T15:15Z"},
		{-1, "1969-12-31T23:59:59Z"},
		{-86400, "1969-12-31T00:00Z"},
		{951782400, "2000-02-29T00:00Z"},
		{4107542400, "2100-03-01T00:00Z"},
		{253402300799, "9999-12-31T23:59:59Z"},
		{253402300800, "+010000-01-01T00:00Z"},
		{-62167219200, "0000-01-01T00:00Z"},
		{-62167219201, "-000001-12-31T23:59:59Z"},
		{8640000000000, "+275760-09-13T00:00Z"},
	}
	for _, tt := range tests {
		if got := FormatTime(tt.in); got != tt.want {
			t.Errorf("FormatTime(%d) = %q, want %q", tt.in, got, tt.want)
		}
	}
	for _, extreme := range []int64{math.MaxInt64, math.MinInt64} {
		if got := FormatTime(extreme); len(got) < 17 {
			t.Errorf("FormatTime(%d) = %q", extreme, got)
		}
	}
}

// FuzzFormatTime compares FormatTime with package time over years 0–9999.
func FuzzFormatTime(f *testing.F) {
	for _, v := range []int64{0, -1, 1790000600, 951782400, 253402300799, -62167219200} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, unix int64) {
		got := FormatTime(unix)
		if unix < -62167219200 || unix > 253402300799 {
			return
		}
		tm := time.Unix(unix, 0).UTC()
		layout := "2006-01-02T15:04Z"
		if tm.Second() != 0 {
			layout = "2006-01-02T15:04:05Z"
		}
		if want := tm.Format(layout); got != want {
			t.Fatalf("FormatTime(%d) = %q, want %q", unix, got, want)
		}
	})
}
