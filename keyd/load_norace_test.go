//go:build !race

package keyd

// loadRequests is how many requests each of the load test's 200 clients
// makes. The race detector makes every request several times slower, so a
// build with it runs fewer (load_race_test.go).
const (
	loadRequests  = 500
	loadOversized = 2 // frames over protocol.MaxFrame per client
	// loadPeakHeap bounds the heap in use during the run. A run peaks
	// around 60 MiB; a leak of 2 KiB per request would pass the bound.
	loadPeakHeap = 256 << 20
)
