package grant

import "testing"

func TestParseMoney(t *testing.T) {
	tests := []struct {
		name, in string
		want     Money
	}{
		{"ok/two-decimals", "20.00USD", Money{2000, "USD"}},
		{"ok/whole", "20USD", Money{2000, "USD"}},
		{"ok/one-decimal", "0.5EUR", Money{50, "EUR"}},
		{"ok/zero-decimal-currency", "500JPY", Money{500, "JPY"}},
		{"ok/space-before-currency", "12.50 USD", Money{1250, "USD"}},
		{"ok/zero", "0USD", Money{0, "USD"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseMoney(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("ParseMoney(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
	for _, in := range []string{
		"", "USD", "20", "20usd", "20US", "20.001USD", "20.USD", ".5USD", "-1USD", "1,000USD",
		"5.0JPY", "1e3USD", "99999999999999999999USD", "1000000000001USD", "20 U S D",
	} {
		t.Run("fail/"+in, func(t *testing.T) {
			if got, err := ParseMoney(in); err == nil {
				t.Errorf("ParseMoney(%q) = %+v, want an error", in, got)
			}
		})
	}
}

func TestMoneyString(t *testing.T) {
	for _, tt := range []struct {
		m    Money
		want string
	}{
		{Money{1250, "USD"}, "12.50 USD"},
		{Money{500, "JPY"}, "500 JPY"},
		{Money{5, "EUR"}, "0.05 EUR"},
	} {
		if got := tt.m.String(); got != tt.want {
			t.Errorf("%+v.String() = %q, want %q", tt.m, got, tt.want)
		}
	}
}
