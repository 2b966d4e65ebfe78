package lens

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"unicode/utf8"
)

// lensTestForbidden reports whether r must never reach a human display. The
// list is spelled out here, apart from lensHidden, so that a change there
// can't quietly weaken the test.
func lensTestForbidden(r rune, lines bool) bool {
	switch {
	case r == '\n':
		return !lines
	case r < 0x20, r == 0x7f, // C0 controls (ESC starts ANSI sequences), DEL
		r >= 0x80 && r <= 0x9f,                // C1 controls (0x9B is a one-byte CSI)
		r >= 0x202a && r <= 0x202e,            // bidi embeddings and overrides
		r >= 0x2066 && r <= 0x2069,            // bidi isolates
		r == 0x200e, r == 0x200f, r == 0x061c, // bidi marks
		r >= 0x200b && r <= 0x200d, r == 0x2060, r == 0xfeff, // zero width
		r == 0x2028, r == 0x2029, // line and paragraph separators
		r >= 0xe0000 && r <= 0xe007f, // tags
		r == 0x00ad, r == 0x034f, r == 0x115f, r == 0x1160, r == 0x3164, r == 0xffa0,
		r >= 0xd800 && r <= 0xdfff:
		return true
	}
	return false
}

// lensTestSafe reports whether s is valid UTF-8 free of forbidden runes.
func lensTestSafe(s string, lines bool) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if lensTestForbidden(r, lines) {
			return false
		}
	}
	return true
}

func TestSafeText(t *testing.T) {
	long := strings.Repeat("é", 1<<20) // 2 MB of bytes, 1 Mi runes
	tests := []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"ok/plain", "Move meeting to Thu 15:00", 0, "Move meeting to Thu 15:00"},
		{"ok/unicode-kept", "café 東京 🎉 naïve", 0, "café 東京 🎉 naïve"},
		{"ok/combining-kept", "e\u0301\u0302", 0, "e\u0301\u0302"},
		{"ok/nbsp-kept", "a\u00a0b", 0, "a\u00a0b"},
		{"ok/fffd-kept", "a\ufffdb", 0, "a\ufffdb"},
		{"ok/ansi-clear-screen", "\x1b[2J", 0, "⟨U+001B⟩[2J"},
		{"ok/osc-title", "\x1b]0;title\x07", 0, "⟨U+001B⟩]0;title⟨U+0007⟩"},
		{"ok/c1-csi", "\u009b31m", 0, "⟨U+009B⟩31m"},
		{"ok/newline", "a\nb", 0, "a⟨U+000A⟩b"},
		{"ok/carriage-return", "pay 1\rpay 9", 0, "pay 1⟨U+000D⟩pay 9"},
		{"ok/tab", "a\tb", 0, "a⟨U+0009⟩b"},
		{"ok/del", "a\x7fb", 0, "a⟨U+007F⟩b"},
		{"ok/nul", "a\x00b", 0, "a⟨U+0000⟩b"},
		{"ok/trojan-source", "access = \"user\u202e \u2066// admin\u2069 \u2066\"", 0,
			"access = \"user⟨U+202E⟩ ⟨U+2066⟩// admin⟨U+2069⟩ ⟨U+2066⟩\""},
		{"ok/bidi-marks", "\u200e\u200f\u061c", 0, "⟨U+200E⟩⟨U+200F⟩⟨U+061C⟩"},
		{"ok/zero-width", "p\u200ba\u200cy\u200d\u2060\ufeff", 0, "p⟨U+200B⟩a⟨U+200C⟩y⟨U+200D⟩⟨U+2060⟩⟨U+FEFF⟩"},
		{"ok/separators", "a\u2028b\u2029c", 0, "a⟨U+2028⟩b⟨U+2029⟩c"},
		{"ok/tags", "\U000E0001\U000E0041\U000E007F", 0, "⟨U+E0001⟩⟨U+E0041⟩⟨U+E007F⟩"},
		{"ok/soft-hyphen", "pay\u00adpal", 0, "pay⟨U+00AD⟩pal"},
		{"ok/hangul-filler", "\u3164", 0, "⟨U+3164⟩"},
		{"ok/private-use", "\ue000", 0, "⟨U+E000⟩"},
		{"ok/unassigned-plane", "\U0010fffd", 0, "⟨U+10FFFD⟩"},
		{"ok/invalid-utf8", "a\xffb\xc3", 0, "a⟨0xFF⟩b⟨0xC3⟩"},
		{"ok/encoded-surrogate", "\xed\xa0\x80", 0, "⟨0xED⟩⟨0xA0⟩⟨0x80⟩"},
		{"ok/fits-exactly", "abcde", 5, "abcde"},
		{"ok/cut", "abcdefgh", 5, "abcde… [cut, 3 more characters]"},
		{"ok/cut-one", "abcdef", 5, "abcde… [cut, 1 more character]"},
		{"ok/cut-by-runes", "ééééé", 3, "ééé… [cut, 2 more characters]"},
		{"ok/cut-never-splits-escape", "ab\x1bcd", 5, "ab… [cut, 3 more characters]"},
		{"ok/escape-counts-its-length", "\x1b", 8, "⟨U+001B⟩"},
		{"ok/cut-counts-invalid-bytes", "abc\xff\xfe", 3, "abc… [cut, 2 more characters]"},
		{"ok/megabyte", long, 10, strings.Repeat("é", 10) + "… [cut, 1048566 more characters]"},
		{"ok/no-limit", "abc", -1, "abc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SafeText(tt.in, tt.max)
			if got != tt.want {
				if len(got) > 200 {
					got = got[:200] + "..."
				}
				t.Errorf("SafeText(%.40q, %d) = %q, want %.200q", tt.in, tt.max, got, tt.want)
			}
		})
	}
}

func TestSafeLines(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"ok/keeps-newlines", "a\nb\n", 0, "a\nb\n"},
		{"ok/crlf", "a\r\nb", 0, "a⟨U+000D⟩\nb"},
		{"ok/escapes-rest", "\x1b[31mred\n\u202eevil", 0, "⟨U+001B⟩[31mred\n⟨U+202E⟩evil"},
		{"ok/newline-counts-one", "ab\ncd", 4, "ab\nc… [cut, 1 more character]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := SafeLines(tt.in, tt.max); got != tt.want {
				t.Errorf("SafeLines(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
			}
		})
	}
}

// FuzzSafeText checks the display contract on arbitrary bytes: valid UTF-8,
// no forbidden rune, at most max runes before the cut mark, and text that
// needed nothing returned unchanged.
func FuzzSafeText(f *testing.F) {
	for _, s := range []string{"\x1b]0;title\x07", "\x1b[2J", "a\u202eb", "\xff\xfe", "abc\ndef", "\U000E0041", "é\u0301"} {
		f.Add(s, 0)
		f.Add(s, 3)
	}
	f.Fuzz(func(t *testing.T, s string, max int) {
		max %= 64
		for _, lines := range []bool{false, true} {
			var got string
			if lines {
				got = SafeLines(s, max)
			} else {
				got = SafeText(s, max)
			}
			body, mark, cut := strings.Cut(got, "… [cut, ")
			if cut && strings.Contains(s, "… [cut, ") {
				// The input itself may hold the mark; find the last one.
				i := strings.LastIndex(got, "… [cut, ")
				body, mark = got[:i], got[i+len("… [cut, "):]
			}
			if !utf8.ValidString(got) {
				t.Fatalf("SafeText(%q, %d) = %q: invalid UTF-8", s, max, got)
			}
			for _, r := range got {
				if lensTestForbidden(r, lines) {
					t.Fatalf("SafeText(%q, %d, lines=%v) = %q: holds %U", s, max, lines, got, r)
				}
			}
			if max > 0 && utf8.RuneCountInString(body) > max {
				t.Fatalf("SafeText(%q, %d) = %q: %d runes before the mark", s, max, got, utf8.RuneCountInString(body))
			}
			if cut && !strings.HasSuffix(mark, " more characters]") && !strings.HasSuffix(mark, " more character]") {
				t.Fatalf("SafeText(%q, %d) = %q: malformed mark", s, max, got)
			}
			if max <= 0 && utf8.RuneCountInString(got) < utf8.RuneCountInString(s) {
				t.Fatalf("SafeText(%q, %d) = %q: lost text without a limit", s, max, got)
			}
		}
	})
}

// TestDisplayProposal checks that a hostile proposal cannot forge lines or
// smuggle escapes into what a human is shown, while an honest one displays
// exactly as its Lens.
func TestDisplayProposal(t *testing.T) {
	honest := `{"id":"p_1","summary":"Move \"1:1 with Ana\" to Thu 15:00","effects":[{"op":"update","target":"event/e42","field":"start","from":"2026-09-22T14:00:00Z","to":"2026-09-24T15:00:00Z"}],"cost":{"amount":1250,"currency":"USD"},"risk":"low","undo":{"window":3600},"expires":1790000600,"data":{"note":"café"}}`
	t.Run("ok/honest-equals-lens", func(t *testing.T) {
		lens, err := Proposal(json.RawMessage(honest))
		if err != nil {
			t.Fatal(err)
		}
		got, err := DisplayProposal(json.RawMessage(honest), 200)
		if err != nil {
			t.Fatal(err)
		}
		if got != lens {
			t.Errorf("DisplayProposal = %q, want the Lens %q", got, lens)
		}
	})

	hostile := `{"id":"p\u001b[2J","summary":"Buy a book\n  cost: free · risk: low\n\u202eevil","effects":[` +
		`{"op":"charge","target":"card\r$ charge nothing","detail":"\u001b]0;pwned\u0007"},` +
		`{"op":"send","target":"x","from":"\u2066a\u2069","to":"` + strings.Repeat("z", 500) + `"}],` +
		`"cost":{"amount":999900,"currency":"US\u200bD"},"risk":"high\u2028","undo":null,"expires":1790000600,` +
		`"data":{"k\u202e":["\u0085",{"a":"\udb40\udc41"}]}}`
	got, err := DisplayProposal(json.RawMessage(hostile), 40)
	if err != nil {
		t.Fatal(err)
	}
	if !lensTestSafe(got, true) {
		t.Fatalf("DisplayProposal output holds forbidden runes: %q", got)
	}
	want := []string{
		"[p⟨U+001B⟩[2J] Buy a book⟨U+000A⟩  cost: free · risk: l… [cut, 8 more characters]",
		"  $ charge card⟨U+000D⟩$ charge nothing — ⟨U+001B⟩]0;pwned⟨U+0007⟩",
		`  > send x: "⟨U+2066⟩a⟨U+2069⟩" → ` + strings.Repeat("z", 40) + "… [cut, 460 more characters]",
		"  cost: 9999.00 US⟨U+200B⟩D · risk: high⟨U+2028⟩ · undo: never · expires: 2026-09-21T14:23:20Z",
		`  data:`,
		`    "k⟨U+202E⟩"[2]:`,
		`      - "⟨U+0085⟩"`,
		`      - a: "⟨U+E0041⟩"`,
	}
	if diff := cmp.Diff(want, strings.Split(got, "\n")); diff != "" {
		t.Errorf("DisplayProposal lines (-want +got):\n%s", diff)
	}
}

func TestDisplayReply(t *testing.T) {
	in := `{"parley":1,"id":"s","re":"c","kind":"ERROR","code":"consent_required","message":"need\nyou","consent":{"hash":"h","summary":"\u001b[1mBuy"}}`
	got, err := DisplayReply([]byte(in), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := "✗ consent_required: need⟨U+000A⟩you\n  consent: principal must approve h (⟨U+001B⟩[1mBuy)"
	if got != want {
		t.Errorf("DisplayReply = %q, want %q", got, want)
	}
	if _, err := DisplayReply([]byte(`{"kind":"NOPE"}`), 0); err == nil {
		t.Error("DisplayReply accepted an unknown kind")
	}
	if _, err := DisplayProposal(json.RawMessage(`1`), 0); err == nil {
		t.Error("DisplayProposal accepted a number")
	}
}
