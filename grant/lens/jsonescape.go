package lens

import (
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// EscapeJSONText returns the JSON text b with every character that
// SafeText would escape written as a \u escape, and any byte that is
// not UTF-8 as \ufffd. encoding/json escapes C0 controls but leaves DEL,
// C1 controls, bidi overrides (U+202E), zero-width and tag characters as
// they are, and raw JSON (a proposal, an audit record) passes through it as
// sent: printed raw they would reach the terminal. Outside strings JSON
// text is ASCII, so every such character is inside a string, and the
// escape leaves its value unchanged: a program reading the output gets
// exactly what the daemon sent (a proposal still re-hashes to its hash).
func EscapeJSONText(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		c := b[i]
		if c == '\r' {
			// Only white space between tokens can be a raw CR (in a
			// string it is escaped, or the JSON is not valid): a space
			// means the same and cannot move the cursor.
			out = append(out, ' ')
			i++
			continue
		}
		if c < utf8.RuneSelf && c != 0x7f {
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			out = append(out, `\ufffd`...)
		case c == 0x7f || SafeText(string(b[i:i+n]), 0) != string(b[i:i+n]):
			if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
				out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
			} else {
				out = fmt.Appendf(out, `\u%04x`, r)
			}
		default:
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}
