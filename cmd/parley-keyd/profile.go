//go:build profile

package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// profileEnv names a file that parley-keyd serve writes a CPU profile of
// its whole run to (Go's pprof format), in a binary built with the build
// tag "profile": `make bench BENCHFLAGS=-pprof` builds one and sets it
// (docs/performance.md). Other builds have no profiler: runtime/pprof's
// code would cost every daemon resident memory (about 0.3 MiB), and no
// deployment needs it. Whoever can set the daemon's environment can make
// it write this file, and can already do more.
const profileEnv = "PARLEY_KEYD_CPUPROFILE"

// startProfile starts the CPU profile profileEnv asks for; the returned
// function stops it and closes the file.
func startProfile() (stop func(), err error) {
	path := os.Getenv(profileEnv)
	if path == "" {
		return func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", profileEnv, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", profileEnv, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
