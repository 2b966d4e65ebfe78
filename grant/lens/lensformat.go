package lens

import (
	"math"
	"strconv"
	"strings"

	"github.com/parley-keyd/parley-keyd/grant"
)

// FormatMoney renders an amount in minor units and its currency as Lens shows
// money (§9.2): the amount divided by 100 with exactly two decimals, a leading
// - when negative, a space and the currency: "12.50 USD", "-0.05 EUR". A
// zero-decimal currency (JPY, KRW, VND, CLP, ISK, UGX, XAF, XOF)
// renders without decimals: "500 JPY". The currency is written as given.
func FormatMoney(amount int64, currency string) string {
	return grant.Money{Amount: amount, Currency: currency}.String()
}

// The units of a duration, largest first (§9.2).
var lensDurationUnits = [...]struct {
	secs int64
	name string
}{{86400, "d"}, {3600, "h"}, {60, "m"}}

// FormatDuration renders seconds in the largest of d, h, m and s that divides
// them exactly (§9.2): 3600 is "1h", 90 is "90s", 172800 is "2d". Taken
// literally, the rule renders 0 as "0d", and FormatDuration does so; a
// negative duration keeps its sign ("-1h").
func FormatDuration(seconds int64) string {
	for _, u := range lensDurationUnits {
		if seconds%u.secs == 0 {
			return strconv.FormatInt(seconds/u.secs, 10) + u.name
		}
	}
	return strconv.FormatInt(seconds, 10) + "s"
}

// lensDuration is FormatDuration for a JSON number, computed in float64 as an
// ECMAScript implementation computes it, so that a non-integral or huge
// duration renders the same everywhere ("1.5s").
func lensDuration(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return FormatDuration(int64(f))
	}
	for _, u := range lensDurationUnits {
		if math.Mod(f, float64(u.secs)) == 0 {
			return lensNumber(f/float64(u.secs)) + u.name
		}
	}
	return lensNumber(f) + "s"
}

// FormatTime renders unix seconds as a UTC time the way Lens shows times
// (§9.2): YYYY-MM-DDTHH:MMZ, with :SS inserted when the seconds are not zero
// ("2026-09-21T14:23:20Z", "2026-09-21T15:15Z"). Years outside 0000–9999 are
// written as ECMAScript's Date.prototype.toISOString writes them: a sign and
// at least six digits ("+010000-01-01T00:00Z").
func FormatTime(unix int64) string {
	days, secs := unix/86400, unix%86400
	if secs < 0 {
		days--
		secs += 86400
	}
	y, m, d := lensCivil(days)
	var b strings.Builder
	switch {
	case y >= 0 && y <= 9999:
		lensPad(&b, y, 4)
	case y < 0:
		b.WriteByte('-')
		lensPad(&b, -y, 6)
	default:
		b.WriteByte('+')
		lensPad(&b, y, 6)
	}
	b.WriteByte('-')
	lensPad(&b, m, 2)
	b.WriteByte('-')
	lensPad(&b, d, 2)
	b.WriteByte('T')
	lensPad(&b, secs/3600, 2)
	b.WriteByte(':')
	lensPad(&b, secs/60%60, 2)
	if s := secs % 60; s != 0 {
		b.WriteByte(':')
		lensPad(&b, s, 2)
	}
	b.WriteByte('Z')
	return b.String()
}

// lensCivil converts days since 1970-01-01 to a proleptic Gregorian date
// (the civil-from-days algorithm of H. Hinnant). It works for every day that
// an int64 of seconds can name, where time.Time would overflow.
func lensCivil(days int64) (year, month, day int64) {
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

// lensPad writes a non-negative n with at least width digits.
func lensPad(b *strings.Builder, n int64, width int) {
	s := strconv.FormatInt(n, 10)
	for i := len(s); i < width; i++ {
		b.WriteByte('0')
	}
	b.WriteString(s)
}
