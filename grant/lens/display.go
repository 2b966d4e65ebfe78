package lens

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/parley-keyd/parley-keyd/grant"
)

// This file neutralizes text that came from an agent or a service before a
// human sees it. An agent or service controls every byte of a summary, a
// target or a message; shown as it is, such text can move the terminal
// cursor, retitle the window or clear the screen (ANSI CSI and OSC escape
// sequences), make text read in a different order than it is stored (bidi
// overrides: the "Trojan Source" attack), hide characters (zero-width and
// tag characters) or forge extra lines (line breaks, carriage returns). It
// can also be long enough to push the important part off the screen.

// SafeText returns s fit for display on one line of a terminal, a desktop
// notification or a web page. Every rune that is not a graphic character or
// an ordinary space is replaced by a visible escape: ⟨U+202E⟩ for the code
// point U+202E, ⟨0xFF⟩ for a byte that is not valid UTF-8. That covers
// C0 controls including \t, \n, \r and ESC (so no ANSI CSI or OSC sequence
// can start: its introducer is shown, the rest is plain text), DEL, C1
// controls U+0080–U+009F, bidi embeddings, overrides, isolates and marks
// (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C), zero-width
// characters (U+200B–U+200D, U+2060, U+FEFF), the line and paragraph
// separators U+2028 and U+2029, tag characters U+E0000–U+E007F, every other
// format character, private-use, unassigned and surrogate code points, and
// the invisible fillers U+034F, U+115F, U+1160, U+3164 and U+FFA0. Letters,
// combining marks, symbols and emoji without joiners pass unchanged.
//
// When max > 0 and the result would be longer than max runes, SafeText keeps
// the longest prefix of at most max runes that does not split an escape and
// appends the mark "… [cut, N more characters]", N counting the runes of s
// (each invalid byte as one) that are not shown. max ≤ 0 means no limit.
func SafeText(s string, max int) string { return lensSafe(s, max, false) }

// SafeLines is SafeText for multi-line text: it keeps \n line breaks and
// neutralizes everything else exactly as SafeText does, including \r. A
// caller that shows a rendering with SafeLines must make sure that no
// untrusted field in it could hold a \n of its own; DisplayProposal and
// DisplayReply do that.
func SafeLines(s string, max int) string { return lensSafe(s, max, true) }

// DisplayProposal renders a proposal for a human exactly as LensProposal
// lays it out, with every piece of text the service wrote (id, summary, op,
// target, field, detail, currency, risk, strings and keys of from, to and
// data) passed through SafeText(piece, maxField) before it is placed. So an
// untrusted field can neither break its line nor forge another, and the
// lines of the rendering are the rendering's own. maxField ≤ 0 means no
// limit. The caller shows the result as it is; the daemon shows it only
// for a proposal whose hash it has checked (§6.6).
func DisplayProposal(p json.RawMessage, maxField int) (string, error) {
	out, err := lensRenderProposal(p, lensSafeField(maxField))
	if err != nil {
		return "", err
	}
	// Belt and braces: every field is already neutralized above.
	return SafeLines(out, 0), nil
}

// Display is DisplayProposal of the part of p that its hash covers (§5.1:
// everything but "hash" and "data"), rendered from the bytes p's hash was
// computed over (p.Hashed), so that what the human is shown is what
// the hash and the policy saw. "data" is left out because it is not
// covered: an agent could put words of its own there ("this is a refund").
// It returns an error for a Proposal that grant.ParseProposal did not
// return.
func Display(p *grant.Proposal, maxField int) (string, error) {
	hashed, _ := p.Hashed()
	if hashed == nil {
		return "", errors.New("display: the proposal was not read by ParseProposal")
	}
	// The hashed bytes are canonical (§10): members in code point order,
	// valid UTF-8, integers only, so reading them again gives the values
	// ParseProposal parsed, in the order canonical JSON holds them.
	return DisplayProposal(hashed, maxField)
}

// DisplayReply is DisplayProposal for a whole reply frame: LensReply's
// layout with every piece of service-written text passed through
// SafeText(piece, maxField).
func DisplayReply(raw []byte, maxField int) (string, error) {
	out, err := lensRenderReply(raw, lensSafeField(maxField))
	if err != nil {
		return "", err
	}
	return SafeLines(out, 0), nil
}

func lensSafeField(max int) func(string) string {
	return func(s string) string { return SafeText(s, max) }
}

// lensHidden reports whether SafeText escapes r: anything that is not a
// graphic character (letter, mark, number, punctuation, symbol, space
// separator), and a few graphic characters that render as nothing.
func lensHidden(r rune) bool {
	if r < utf8.RuneSelf {
		return r < 0x20 || r == 0x7f
	}
	switch r {
	case 0x034f, // combining grapheme joiner
		0x115f, 0x1160, 0x3164, 0xffa0: // Hangul fillers
		return true
	}
	if r >= 0xe0000 && r <= 0xe007f { // tags, assigned or not
		return true
	}
	return !unicode.IsGraphic(r)
}

func lensSafe(s string, max int, lines bool) string {
	// Most text is plain: return it untouched when nothing needs escaping
	// and it fits.
	clean := true
	runes := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if lensHidden(rune(c)) && !(lines && c == '\n') {
				clean = false
				break
			}
			i++
		} else {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 || lensHidden(r) {
				clean = false
				break
			}
			i += size
		}
		runes++
		if max > 0 && runes > max {
			clean = false
			break
		}
	}
	if clean {
		return s
	}

	var b strings.Builder
	b.Grow(min(len(s), 4096) + 16)
	n := 0 // runes written
	var esc [16]byte
	for i := 0; i < len(s); {
		c := s[i]
		var piece []byte // an escape, or nil for the input rune as it is
		size := 1
		if c < utf8.RuneSelf {
			if lensHidden(rune(c)) && !(lines && c == '\n') {
				piece = lensEscape(esc[:0], rune(c), false)
			}
		} else {
			var r rune
			r, size = utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				piece = lensEscape(esc[:0], rune(c), true)
			} else if lensHidden(r) {
				piece = lensEscape(esc[:0], r, false)
			}
		}
		cost := 1
		if piece != nil {
			cost = utf8.RuneCount(piece)
		}
		if max > 0 && n+cost > max {
			rest := utf8.RuneCountInString(s[i:])
			b.WriteString("… [cut, ")
			b.WriteString(strconv.Itoa(rest))
			if rest == 1 {
				b.WriteString(" more character]")
			} else {
				b.WriteString(" more characters]")
			}
			break
		}
		if piece != nil {
			b.Write(piece)
		} else {
			b.WriteString(s[i : i+size])
		}
		n += cost
		i += size
	}
	return b.String()
}

// lensEscape appends the visible escape of r: ⟨U+XXXX⟩, or ⟨0xXX⟩ for a
// byte that is not valid UTF-8.
func lensEscape(dst []byte, r rune, badByte bool) []byte {
	const hex = "0123456789ABCDEF"
	dst = append(dst, "⟨"...)
	if badByte {
		dst = append(dst, '0', 'x', hex[r>>4&0xf], hex[r&0xf])
	} else {
		dst = append(dst, 'U', '+')
		digits := 4
		for v := r >> 16; v > 0; v >>= 4 {
			digits++
		}
		for d := digits - 1; d >= 0; d-- {
			dst = append(dst, hex[r>>(4*d)&0xf])
		}
	}
	return append(dst, "⟩"...)
}
