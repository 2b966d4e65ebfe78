//go:build race

package keyd

// Under the race detector, TestLoadMixed runs 40 requests per client instead
// of 500: the same mix and the same checks in a time CI can afford.
const (
	loadRequests  = 40
	loadOversized = 1
	// The race detector's runtime keeps more garbage (sync.Pool mostly
	// empty): a run peaks around 140 MiB.
	loadPeakHeap = 384 << 20
)
