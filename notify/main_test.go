package notify

import (
	"os"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
)

// TestMain removes the copy of the test binary that tests running as other
// OS users make (testpeer.Binary).
func TestMain(m *testing.M) {
	code := m.Run()
	testpeer.Cleanup()
	os.Exit(code)
}
