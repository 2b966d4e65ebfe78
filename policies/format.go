package policies

import (
	"strconv"
	"strings"

	"github.com/parley-keyd/parley-keyd/grant"
)

// riskRank orders the risk levels of §5.1 (low < medium < high); -1 for
// anything else.
func riskRank(level string) int {
	switch level {
	case "low":
		return 0
	case "medium":
		return 1
	case "high":
		return 2
	}
	return -1
}

// fmtDur writes a number of seconds the way a policy file does: "1h",
// "15m", "1h30m", "2d".
func fmtDur(secs int64) string {
	if secs <= 0 {
		return "0s"
	}
	var b strings.Builder
	for _, u := range []struct {
		n    int64
		unit string
	}{{86400, "d"}, {3600, "h"}, {60, "m"}, {1, "s"}} {
		if secs >= u.n {
			b.WriteString(strconv.FormatInt(secs/u.n, 10))
			b.WriteString(u.unit)
			secs %= u.n
		}
	}
	return b.String()
}

// fmtMoney writes an amount in minor units as "20.00 USD" or "500 JPY".
func fmtMoney(m grant.Money) string { return m.String() }

// list writes names for a sentence: `"a", "b" and "c"`.
func list[T ~string](xs []T) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = strconv.Quote(string(x))
	}
	switch len(q) {
	case 0:
		return "nothing"
	case 1:
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " and " + q[len(q)-1]
}
