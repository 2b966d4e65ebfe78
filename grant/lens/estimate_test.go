package lens

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestEstimateConformance runs every case of conformance/estimate.json (§8).
func TestEstimateConformance(t *testing.T) {
	data, err := os.ReadFile("testdata/conformance/estimate.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Text string `json:"text"`
		Est  int    `json:"est"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 11 {
		t.Fatalf("estimate.json has %d cases, want at least 11", len(cases))
	}
	nbsp := false
	for _, c := range cases {
		nbsp = nbsp || strings.Contains(c.Text, "\u00a0")
		if got := Estimate(c.Text); got != c.Est {
			t.Errorf("Estimate(%q) = %d, want %d", c.Text, got, c.Est)
		}
	}
	if !nbsp {
		t.Error("estimate.json lost its U+00A0: copy it byte for byte")
	}
}

// estimateRef is §8's expression, the reference for Estimate. Go's regexp
// takes the leftmost match and, among alternatives, the first, as
// ECMAScript does, and reads invalid UTF-8 one byte at a time as U+FFFD.
var estimateRef = regexp.MustCompile(`[A-Za-z]+|[0-9]{1,3}|\n {2,}|[^ \t\n\r\f\vA-Za-z0-9]`)

func TestEstimate(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", 0},
		{"1234567", 3},
		{"abc123def", 3},
		{"\n", 0},
		{"\n ", 0},
		{"\n  ", 1},
		{"\n\n  x", 2},
		{" \t\r\f\v", 0},
		{"a\u00a0b", 3},
		{"\u3000", 1},
		{"\xff\xfe", 2},
		{"é", 1},
		{"e\u0301", 2},
		{"…", 1},
	}
	for _, tt := range tests {
		if got := Estimate(tt.in); got != tt.want {
			t.Errorf("Estimate(%q) = %d, want %d", tt.in, got, tt.want)
		}
		if ref := len(estimateRef.FindAllStringIndex(tt.in, -1)); ref != tt.want {
			t.Errorf("reference est(%q) = %d, want %d: the table is wrong", tt.in, ref, tt.want)
		}
	}
}

// FuzzEstimate checks the hand scanner against the expression of §8.
func FuzzEstimate(f *testing.F) {
	for _, s := range []string{"x: 12345\n  - y", "p_KEs5H7dM · 2026-09-24T15:00Z", "  lead\n    deep\n z", "東京🎉", "\xff\n \n  "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := Estimate(s), len(estimateRef.FindAllStringIndex(s, -1)); got != want {
			t.Fatalf("Estimate(%q) = %d, want %d", s, got, want)
		}
	})
}

func BenchmarkEstimate(b *testing.B) {
	data, err := os.ReadFile("testdata/conformance/lens.json")
	if err != nil {
		b.Fatal(err)
	}
	text := string(data)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		Estimate(text)
	}
}
