package good

import "testing"

func TestPass(t *testing.T) { t.Log("chatter that a passing test keeps to itself") }

func TestNeedsUnicorn(t *testing.T) { t.Skip("needs a unicorn (the peer it lacked)") }

func TestShells(t *testing.T) {
	t.Run("bash", func(t *testing.T) {})
	t.Run("fish", func(t *testing.T) { t.Skip("needs fish") })
}
