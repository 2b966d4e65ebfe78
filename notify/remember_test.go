package notify

import "testing"

func TestRememberWords(t *testing.T) {
	for in, want := range map[string]string{"15m": "15 min", "1h": "1 h", "2h": "2 h", "8h": "8 h", "24h": "1 d", "1h30m": "90 min", "90s": "1m30s", "soon": "soon"} {
		if got := RememberWords(in); got != want {
			t.Errorf("RememberWords(%q) = %q, want %q", in, got, want)
		}
	}
}
