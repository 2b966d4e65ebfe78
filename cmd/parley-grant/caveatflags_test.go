package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/parley-keyd/parley-keyd/grant"
)

func TestParseTime(t *testing.T) {
	now := time.Unix(1790000000, 0)
	tests := []struct {
		name, in string
		want     int64
		err      string
	}{
		{"ok/duration", "1h", 1790003600, ""},
		{"ok/duration-days", "7d", 1790604800, ""},
		{"ok/unix", "1790000600", 1790000600, ""},
		{"ok/unix-zero", "0", 0, ""},
		{"ok/rfc3339-utc", "2026-09-21T14:23:20Z", 1790000600, ""},
		{"ok/rfc3339-offset", "2026-09-21T16:23:20+02:00", 1790000600, ""},
		{"ok/rfc3339-fraction-truncated", "2026-09-21T14:23:20.9Z", 1790000600, ""},
		{"ok/space-trimmed", " 1h ", 1790003600, ""},
		{"fail/empty", "", 0, "empty time"},
		{"fail/date-only", "2026-09-21", 0, "not a duration, an RFC 3339 time or unix seconds"},
		{"fail/no-zone", "2026-09-21T14:23:20", 0, "not a duration"},
		{"fail/word", "tomorrow", 0, "not a duration"},
		{"fail/bad-duration", "10x", 0, `unknown unit "x"`},
		{"fail/unix-too-large", "99999999999999", 0, "out of range"},
		{"fail/before-1970", "1969-12-31T23:59:59Z", 0, "out of range"},
		{"fail/negative-unix", "-5", 0, "not a duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseTime(tt.in, now)
			checkErr(t, err, tt.err)
			if err == nil && got.Unix() != tt.want {
				t.Errorf("parseTime(%q) = %d, want %d", tt.in, got.Unix(), tt.want)
			}
		})
	}
}

func TestParseUnix(t *testing.T) {
	tests := []struct {
		name, in string
		want     int64
		err      string
	}{
		{"ok/unix", "1790000000", 1790000000, ""},
		{"ok/rfc3339", "2026-09-21T14:13:20Z", 1790000000, ""},
		{"fail/duration", "1h", 0, `--now "1h": not a time`},
		{"fail/empty", "", 0, "not a time"},
		{"fail/too-large", "253402300800", 0, "not a time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseUnix("now", tt.in)
			checkErr(t, err, tt.err)
			if got != tt.want {
				t.Errorf("parseUnix(%q) = %d, want %d", tt.in, got, tt.want)
			}
		})
	}
}

// The money flags go through grant.ParseMoney; these cases pin the forms
// the CLI documents.
func TestMoneyFlags(t *testing.T) {
	tests := []struct {
		name, in string
		want     grant.Money
		err      string
	}{
		{"ok/cents", "20.00USD", grant.Money{Amount: 2000, Currency: "USD"}, ""},
		{"ok/whole", "20USD", grant.Money{Amount: 2000, Currency: "USD"}, ""},
		{"ok/one-decimal", "0.5EUR", grant.Money{Amount: 50, Currency: "EUR"}, ""},
		{"ok/zero-decimal", "500JPY", grant.Money{Amount: 500, Currency: "JPY"}, ""},
		{"ok/zero-decimal-krw", "1000KRW", grant.Money{Amount: 1000, Currency: "KRW"}, ""},
		{"fail/zero-decimal-with-decimals", "5.5JPY", grant.Money{}, "no minor unit"},
		{"fail/three-decimals", "1.999EUR", grant.Money{}, "at most two decimals"},
		{"fail/lower-case", "20usd", grant.Money{}, "three capital letters"},
		{"fail/no-currency", "20", grant.Money{}, "want an amount and a currency"},
		{"fail/negative", "-5USD", grant.Money{}, "digits"},
		{"fail/dot-only", "5.USD", grant.Money{}, "nothing after the decimal point"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := caveatFlags{per: tt.in}
			cavs, err := f.caveats(time.Unix(1790000000, 0))
			checkErr(t, err, tt.err)
			if err != nil {
				return
			}
			if diff := cmp.Diff([]grant.Caveat{grant.Per(tt.want)}, cavs); diff != "" {
				t.Errorf("caveats (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCaveats(t *testing.T) {
	now := time.Unix(1790000000, 0)
	hash := "3YBSE3lWje0kWnzf3PaGMr3CI3aoO1qdYRLxUkmOJVU"
	tests := []struct {
		name string
		f    caveatFlags
		want []grant.Caveat
		err  string
	}{
		{"ok/none", caveatFlags{}, nil, ""},
		{"ok/spec-order", caveatFlags{
			only: hash, risk: "Medium", spend: "100USD", per: "20.00USD", exp: "1h", nbf: "1790000060",
			can: []string{"cal.*"}, verbs: []string{"commit", "ASK", "COMMIT"}, svc: []string{"b.example", "a.example", "b.example"},
		}, []grant.Caveat{
			grant.Svc("b.example", "a.example"),
			grant.Verbs("COMMIT", "ASK"),
			grant.Can("cal.*"),
			grant.Nbf(1790000060),
			grant.Exp(1790003600),
			grant.Per(grant.Money{Amount: 2000, Currency: "USD"}),
			grant.Spend(grant.Money{Amount: 10000, Currency: "USD"}),
			grant.Risk("medium"),
			grant.Only(hash),
		}, ""},
		{"ok/star", caveatFlags{can: []string{"*"}}, []grant.Caveat{grant.Can("*")}, ""},
		{"fail/exp-now", caveatFlags{exp: "1790000000"}, nil, "is not in the future"},
		{"fail/nbf-after-exp", caveatFlags{exp: "1h", nbf: "2h"}, nil, "the grant would never be valid"},
		{"fail/nbf-equals-exp", caveatFlags{exp: "1h", nbf: "1h"}, nil, "the grant would never be valid"},
		{"fail/inner-star", caveatFlags{can: []string{"a*b"}}, nil, "* may only end a pattern"},
		{"fail/empty-entry", caveatFlags{svc: []string{"a", " "}}, nil, "--svc: an empty entry"},
		{"fail/empty-list", caveatFlags{can: []string{}}, nil, "--can: no entries"},
		{"fail/verb", caveatFlags{verbs: []string{"HELLO"}}, nil, `"HELLO" is not one of`},
		{"fail/risk", caveatFlags{risk: "extreme"}, nil, "want low, medium or high"},
		{"fail/only-short", caveatFlags{only: "abc"}, nil, "not a proposal hash"},
		{"fail/only-padded", caveatFlags{only: hash[:42] + "="}, nil, "not a proposal hash"},
		{"fail/spend", caveatFlags{spend: "lots"}, nil, "--spend: money"},
		{"fail/too-long-string", caveatFlags{svc: []string{strings.Repeat("a", 2000)}}, nil, "--svc: malformed svc caveat"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.f.caveats(now)
			checkErr(t, err, tt.err)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("caveats (-want +got):\n%s", diff)
			}
			if err != nil && exitCodeFor(err) != exitUsage {
				t.Errorf("exit code %d, want %d", exitCodeFor(err), exitUsage)
			}
		})
	}
}

func TestRelWords(t *testing.T) {
	tests := []struct {
		name string
		d    int64
		want string
	}{
		{"ok/now", 0, "now"},
		{"ok/seconds", 45, "in 45s"},
		{"ok/minute-seconds", 90, "in 1m 30s"},
		{"ok/hour-exact", 3600, "in 1h"},
		{"ok/hour-drops-seconds", 3601, "in 1h"},
		{"ok/hour-minutes", 3660, "in 1h 1m"},
		{"ok/days-hours", 3*86400 + 4*3600 + 59, "in 3d 4h"},
		{"ok/past", -100, "1m 40s ago"},
		{"ok/far-past", -86400 * 400, "400d ago"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := relWords(1790000000+tt.d, 1790000000); got != tt.want {
				t.Errorf("relWords(now%+d) = %q, want %q", tt.d, got, tt.want)
			}
		})
	}
}

func checkErr(t *testing.T, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want != "" && err == nil:
		t.Fatalf("no error, want one containing %q", want)
	case want != "" && !strings.Contains(err.Error(), want):
		t.Fatalf("error %q does not contain %q", err, want)
	}
}

// exitCodeFor returns the exit code that run gives err.
func exitCodeFor(err error) int { return asExitError(err).code }

// TestAuditWhen checks that audit's --since and --until take a duration
// ago as every duration flag does, days too.
func TestAuditWhen(t *testing.T) {
	now := time.Unix(1790000000, 0)
	for in, want := range map[string]int64{
		"1d":         1790000000 - 86400,
		"1d12h":      1790000000 - 36*3600,
		"2h":         1790000000 - 7200,
		"1700000000": 1700000000,
		"":           0,
	} {
		got, err := whenFlag("since", in, now)
		if err != nil || got != want {
			t.Errorf("whenFlag(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := whenFlag("since", "1.5h", now); err == nil {
		t.Error("whenFlag(1.5h) took a fraction")
	}
}
