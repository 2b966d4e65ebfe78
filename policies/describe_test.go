package policies

import (
	"strings"
	"testing"
)

func TestDefaultDescribe(t *testing.T) {
	t.Log("\n" + Default().Describe())
	t.Log(strings.Join(Default().Warnings(), "\n"))
	t.Log("\n" + testPolicy(t).Describe())
	t.Log(strings.Join(testPolicy(t).Warnings(), "\n"))
}
