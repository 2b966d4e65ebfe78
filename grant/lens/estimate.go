package lens

import "unicode/utf8"

// Estimate returns est(text) of §8: the number of non-overlapping, leftmost
// matches of
//
//	[A-Za-z]+|[0-9]{1,3}|\n {2,}|[^ \t\n\r\f\vA-Za-z0-9]
//
// over the code points of text. That is one per run of ASCII letters, one per
// group of up to three digits, one per newline followed by two or more spaces,
// and one per other code point except space, \t, \n, \r, \f and \v. A byte
// that is not valid UTF-8 counts as one code point of its own (as U+FFFD).
//
// Estimate is a hand-written scanner equivalent to that expression; the tests
// check it against the expression itself.
func Estimate(text string) int {
	n := 0
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c >= utf8.RuneSelf:
			// Every non-ASCII code point matches the last alternative.
			_, size := utf8.DecodeRuneInString(text[i:])
			i += size
			n++
		case c|0x20 >= 'a' && c|0x20 <= 'z':
			i++
			for i < len(text) && text[i]|0x20 >= 'a' && text[i]|0x20 <= 'z' {
				i++
			}
			n++
		case c >= '0' && c <= '9':
			i++
			for k := 1; k < 3 && i < len(text) && text[i] >= '0' && text[i] <= '9'; k++ {
				i++
			}
			n++
		case c == '\n':
			j := i + 1
			for j < len(text) && text[j] == ' ' {
				j++
			}
			if j-i-1 >= 2 {
				n++
				i = j
			} else {
				// A newline with fewer than two spaces after it matches
				// nothing; the spaces don't either.
				i++
			}
		case c == ' ', c == '\t', c == '\r', c == '\f', c == '\v':
			i++
		default:
			i++
			n++
		}
	}
	return n
}
