package main

import (
	"os"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testpeer"
	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets the test binary run as the real parley-keyd binary inside
// scripts (testscript puts it on PATH under that name), and after the tests
// removes the OS users they created (testpeer.Cleanup).
func TestMain(m *testing.M) {
	testscript.Main(cleanupM{m}, map[string]func(){
		"parley-keyd": func() { os.Exit(run(os.Args[1:])) },
	})
}

// cleanupM runs the tests, then testpeer.Cleanup: testscript.Main exits
// the process itself, so the cleanup goes inside the run it calls.
type cleanupM struct{ m *testing.M }

func (c cleanupM) Run() int {
	defer testpeer.Cleanup()
	return c.m.Run()
}

// TestScripts runs the CLI scripts in testdata/script against the real
// binary, with HOME in the script's work folder.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("HOME", env.WorkDir+"/home")
			env.Setenv("PARLEY_KEYD_STATE", env.WorkDir+"/state")
			return nil
		},
	})
}
