package lens

import (
	"math"
	"strconv"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/grant/internal/lensfmt"
)

// FormatMoney renders an amount in minor units and its currency as Lens shows
// money (§9.2): the amount divided by 100 with exactly two decimals, a leading
// - when negative, a space and the currency: "12.50 USD", "-0.05 EUR". A
// zero-decimal currency (ZeroDecimal: JPY, KRW, VND, CLP, ISK, UGX, XAF, XOF)
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
func FormatTime(unix int64) string { return lensfmt.Time(unix) }
