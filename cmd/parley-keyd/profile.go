package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// profileEnv names a file that parley-keyd serve writes a CPU profile of
// its whole run to (Go's pprof format): for `make bench BENCHFLAGS=-pprof`,
// which sets it on the daemon it starts (docs/performance.md). Unset, as in
// every deployment, nothing is profiled. Whoever can set the daemon's
// environment can make it write this file, and can already do more.
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
