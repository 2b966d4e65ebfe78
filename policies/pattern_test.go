package policies

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestContains(t *testing.T) {
	tests := []struct {
		name string
		p, q string
		want bool
	}{
		{"ok/star-contains-exact", "*", "calendar.find", true},
		{"ok/star-contains-prefix", "*", "calendar.*", true},
		{"ok/star-contains-star", "*", "*", true},
		{"ok/prefix-contains-exact", "calendar.*", "calendar.find", true},
		{"ok/prefix-contains-itself", "calendar.*", "calendar.*", true},
		{"ok/prefix-contains-longer-prefix", "calendar.*", "calendar.events.*", true},
		{"ok/prefix-contains-bare-prefix-name", "calendar.*", "calendar.", true},
		{"ok/exact-contains-itself", "calendar.find", "calendar.find", true},
		{"ok/dotless-prefix-contains-lookalike", "cal*", "calendar.find", true},
		{"fail/exact-not-contains-prefix", "calendar.find", "calendar.*", false},
		{"fail/exact-not-contains-star", "calendar.find", "*", false},
		{"fail/prefix-not-contains-star", "calendar.*", "*", false},
		{"fail/prefix-not-contains-shorter-prefix", "calendar.*", "cal*", false},
		{"fail/prefix-not-contains-name-without-dot", "calendar.*", "calendar", false},
		{"fail/prefix-not-contains-other", "calendar.*", "mail.send", false},
		{"fail/exact-not-contains-other", "calendar.find", "calendar.finder", false},
		{"fail/exact-not-contains-extension", "calendar", "calendar.find", false},
		{"fail/prefix-case-sensitive", "Calendar.*", "calendar.find", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := contains(tt.p, tt.q); got != tt.want {
				t.Errorf("contains(%q, %q) = %v, want %v", tt.p, tt.q, got, tt.want)
			}
			// Containment agrees with matching for exact names.
			if tt.q[len(tt.q)-1] != '*' && contains(tt.p, tt.q) != match(tt.p, tt.q) {
				t.Errorf("contains and match disagree on %q, %q", tt.p, tt.q)
			}
		})
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		name string
		p, c string
		want bool
	}{
		{"ok/exact", "calendar.find", "calendar.find", true},
		{"ok/prefix", "calendar.*", "calendar.find", true},
		{"ok/prefix-anything-after", "calendar.*", "calendar.", true},
		{"ok/star", "*", "x", true},
		{"fail/exact-differs", "calendar", "calendar.find", false},
		{"fail/prefix-needs-dot", "calendar.*", "calendar", false},
		{"fail/prefix-other", "calendar.*", "calendars.find", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := match(tt.p, tt.c); got != tt.want {
				t.Errorf("match(%q, %q) = %v, want %v", tt.p, tt.c, got, tt.want)
			}
		})
	}
}

func TestIntersectPatterns(t *testing.T) {
	tests := []struct {
		name           string
		want, allowed  []string
		result         []string
		covered, overl bool
	}{
		{"ok/nil-nil", nil, nil, nil, true, true},
		{"ok/nil-want-takes-allowed", nil, []string{"a.*", "b"}, []string{"a.*", "b"}, false, true},
		{"ok/nil-allowed-keeps-want", []string{"a.*"}, nil, []string{"a.*"}, true, true},
		{"ok/narrow-inside-broad", []string{"calendar.find"}, []string{"calendar.*"}, []string{"calendar.find"}, true, true},
		{"ok/broad-cut-to-narrow", []string{"calendar.*"}, []string{"calendar.find", "calendar.list"}, []string{"calendar.find", "calendar.list"}, false, true},
		{"ok/prefix-cut-to-longer-prefix", []string{"cal*"}, []string{"calendar.*"}, []string{"calendar.*"}, false, true},
		{"ok/partly-covered", []string{"a.x", "b.x"}, []string{"a.*"}, []string{"a.x"}, false, true},
		{"ok/duplicates-dropped", []string{"a.x", "a.*"}, []string{"a.*", "*"}, []string{"a.*"}, true, true},
		{"fail/disjoint", []string{"mail.*"}, []string{"calendar.*"}, nil, false, false},
		{"fail/exact-disjoint", []string{"a"}, []string{"b"}, nil, false, false},
		{"fail/star-not-covered-by-prefix", []string{"*"}, []string{"a.*"}, []string{"a.*"}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := intersectPatterns(tt.want, tt.allowed)
			if !cmp.Equal(got, tt.result) {
				t.Errorf("intersectPatterns(%q, %q) = %q, want %q", tt.want, tt.allowed, got, tt.result)
			}
			if c := coveredBy(tt.want, tt.allowed); c != tt.covered {
				t.Errorf("coveredBy = %v, want %v", c, tt.covered)
			}
			if o := overlapPatterns(tt.want, tt.allowed); o != tt.overl {
				t.Errorf("overlapPatterns = %v, want %v", o, tt.overl)
			}
			// Every pattern of the intersection lies in both lists.
			for _, r := range got {
				if !coveredBy([]string{r}, tt.want) || !coveredBy([]string{r}, tt.allowed) {
					t.Errorf("%q is not inside both lists", r)
				}
			}
		})
	}
}

func TestNames(t *testing.T) {
	tests := []struct {
		name           string
		want, allowed  []string
		sub, overl     bool
		intersectNames []string
	}{
		{"ok/nil-nil", nil, nil, true, true, nil},
		{"fail/nil-want-is-every-service", nil, []string{"a"}, false, true, []string{"a"}},
		{"ok/nil-allowed", []string{"a"}, nil, true, true, []string{"a"}},
		{"ok/subset", []string{"a"}, []string{"a", "b"}, true, true, []string{"a"}},
		{"fail/partly", []string{"a", "c"}, []string{"a", "b"}, false, true, []string{"a"}},
		{"fail/disjoint", []string{"c"}, []string{"a", "b"}, false, false, []string{}},
		{"fail/empty-allows-nothing", []string{"a"}, []string{}, false, false, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := subset(tt.want, tt.allowed); got != tt.sub {
				t.Errorf("subset = %v, want %v", got, tt.sub)
			}
			if got := overlapNames(tt.want, tt.allowed); got != tt.overl {
				t.Errorf("overlapNames = %v, want %v", got, tt.overl)
			}
			if got := intersectNames(tt.want, tt.allowed); !cmp.Equal(got, tt.intersectNames) {
				t.Errorf("intersectNames = %q, want %q", got, tt.intersectNames)
			}
		})
	}
}
