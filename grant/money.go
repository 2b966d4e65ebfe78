package grant

import (
	"fmt"
	"strconv"
	"strings"
)

// Money is an amount in a currency's minor units (cents for USD), as in the
// spec's cost, per and spend objects (§5.1, §6.3).
type Money struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// String returns m as a human reads it and as Lens shows money (§9.2): the
// amount divided by 100 with exactly two decimals, a leading - when
// negative, a space and the currency ("12.50 USD", "-0.05 EUR"); a
// zero-decimal currency without decimals ("500 JPY").
func (m Money) String() string {
	var b strings.Builder
	u := uint64(m.Amount)
	if m.Amount < 0 {
		b.WriteByte('-')
		u = -u // two's complement: right for math.MinInt64 too
	}
	if zeroDecimal[m.Currency] {
		b.WriteString(strconv.FormatUint(u, 10))
	} else {
		b.WriteString(strconv.FormatUint(u/100, 10))
		b.WriteByte('.')
		c := u % 100
		b.WriteByte(byte('0' + c/10))
		b.WriteByte(byte('0' + c%10))
	}
	b.WriteByte(' ')
	b.WriteString(m.Currency)
	return b.String()
}

var _ fmt.Stringer = Money{}

// zeroDecimal lists the currencies whose minor unit is the major unit (§9.2).
var zeroDecimal = map[string]bool{
	"JPY": true, "KRW": true, "VND": true, "CLP": true,
	"ISK": true, "UGX": true, "XAF": true, "XOF": true,
}

// maxMajor bounds parsed amounts so that minor units stay well inside the
// integer range that canonical JSON allows (§10).
const maxMajor = 1_000_000_000_000

// ParseMoney parses a human amount such as "20.00USD", "20USD", "0.5EUR" or
// "500JPY" into minor units. The currency is three upper-case letters. A
// currency with decimals takes at most two; a zero-decimal currency takes none.
// Negative amounts are refused: a limit is never negative.
func ParseMoney(s string) (Money, error) {
	orig := s
	s = strings.TrimSpace(s)
	if len(s) < 4 {
		return Money{}, fmt.Errorf("money %q: want an amount and a currency, such as 20.00USD", orig)
	}
	cur := strings.TrimSpace(s[len(s)-3:])
	num := strings.TrimSpace(s[:len(s)-3])
	if len(cur) != 3 || strings.ToUpper(cur) != cur || strings.Trim(cur, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
		return Money{}, fmt.Errorf("money %q: currency must be three capital letters, such as USD", orig)
	}
	whole, frac, hasDot := strings.Cut(num, ".")
	if whole == "" || strings.Trim(whole, "0123456789") != "" || strings.Trim(frac, "0123456789") != "" {
		return Money{}, fmt.Errorf("money %q: amount must be digits with an optional decimal point", orig)
	}
	if hasDot && frac == "" {
		return Money{}, fmt.Errorf("money %q: nothing after the decimal point", orig)
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > maxMajor {
		return Money{}, fmt.Errorf("money %q: amount too large", orig)
	}
	if zeroDecimal[cur] {
		if hasDot {
			return Money{}, fmt.Errorf("money %q: %s has no minor unit, write a whole number", orig, cur)
		}
		return Money{Amount: w, Currency: cur}, nil
	}
	if len(frac) > 2 {
		return Money{}, fmt.Errorf("money %q: %s takes at most two decimals", orig, cur)
	}
	for len(frac) < 2 {
		frac += "0"
	}
	f, _ := strconv.ParseInt(frac, 10, 64)
	return Money{Amount: w*100 + f, Currency: cur}, nil
}
