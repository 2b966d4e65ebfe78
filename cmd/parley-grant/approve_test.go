package main

import (
	"bufio"
	"strings"
	"testing"
)

// TestPageShowsEverythingBeforeTheCode pages a request of 30 lines on a
// screen of 10: every line is written, each page after an Enter, and the
// pager asks for exactly as many Enters as there are pages after the first.
func TestPageShowsEverythingBeforeTheCode(t *testing.T) {
	var text strings.Builder
	for i := range 30 {
		text.WriteString("  - calendar.thing-" + strings.Repeat("x", i) + "\n")
	}
	enters := strings.NewReader(strings.Repeat("\n", 10))
	in := bufio.NewReader(enters)
	var out strings.Builder
	if err := page(&out, in, text.String(), 10); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSuffix(text.String(), "\n"), "\n") {
		if !strings.Contains(out.String(), l+"\n") {
			t.Errorf("line %q not shown", l)
		}
	}
	if n := strings.Count(out.String(), "Enter for more"); n != 3 {
		t.Errorf("%d pauses for 30 lines at 8 a page, want 3", n)
	}
	if rest, _ := in.ReadString(0); rest != strings.Repeat("\n", 10-3) {
		t.Errorf("%d Enters left unread, want 7", len(rest))
	}
	// A terminal that closes before the last page stops the approval.
	if err := page(&out, bufio.NewReader(strings.NewReader("")), text.String(), 10); err == nil {
		t.Error("paging on a closed terminal went on")
	}
}
