// Package lensfmt holds the time formatting of Lens (§9.2), which both
// grant (to describe an exp or nbf caveat) and grant/lens (to render a
// reply) write, so that the two can never disagree.
package lensfmt

import (
	"strconv"
	"strings"
)

// Time renders unix seconds as a UTC time the way Lens shows times
// (§9.2): YYYY-MM-DDTHH:MMZ, with :SS inserted when the seconds are not zero
// ("2026-09-21T14:23:20Z", "2026-09-21T15:15Z"). Years outside 0000–9999 are
// written as ECMAScript's Date.prototype.toISOString writes them: a sign and
// at least six digits ("+010000-01-01T00:00Z").
func Time(unix int64) string {
	days, secs := unix/86400, unix%86400
	if secs < 0 {
		days--
		secs += 86400
	}
	y, m, d := civil(days)
	var b strings.Builder
	switch {
	case y >= 0 && y <= 9999:
		pad(&b, y, 4)
	case y < 0:
		b.WriteByte('-')
		pad(&b, -y, 6)
	default:
		b.WriteByte('+')
		pad(&b, y, 6)
	}
	b.WriteByte('-')
	pad(&b, m, 2)
	b.WriteByte('-')
	pad(&b, d, 2)
	b.WriteByte('T')
	pad(&b, secs/3600, 2)
	b.WriteByte(':')
	pad(&b, secs/60%60, 2)
	if s := secs % 60; s != 0 {
		b.WriteByte(':')
		pad(&b, s, 2)
	}
	b.WriteByte('Z')
	return b.String()
}

// civil converts days since 1970-01-01 to a proleptic Gregorian date
// (the civil-from-days algorithm of H. Hinnant). It works for every day that
// an int64 of seconds can name, where time.Time would overflow.
func civil(days int64) (year, month, day int64) {
	z := days + 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era--
	}
	doe := z - era*146097                                  // [0, 146096]
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365 // [0, 399]
	doy := doe - (365*yoe + yoe/4 - yoe/100)               // [0, 365]
	mp := (5*doy + 2) / 153                                // [0, 11]
	day = doy - (153*mp+2)/5 + 1
	month = mp + 3
	if month > 12 {
		month -= 12
	}
	year = yoe + era*400
	if month <= 2 {
		year++
	}
	return year, month, day
}

// pad writes a non-negative n with at least width digits.
func pad(b *strings.Builder, n int64, width int) {
	s := strconv.FormatInt(n, 10)
	for i := len(s); i < width; i++ {
		b.WriteByte('0')
	}
	b.WriteString(s)
}
