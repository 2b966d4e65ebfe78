package bad

import "testing"

func TestBroken(t *testing.T) {
	t.Log("context before the failure")
	t.Error("the value was 41, want 42")
}

func TestParent(t *testing.T) {
	t.Run("ok", func(t *testing.T) {})
	t.Run("wrong", func(t *testing.T) { t.Fatal("the subtest broke") })
}

func TestQuiet(t *testing.T) {}
