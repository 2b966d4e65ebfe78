package main

import (
	"flag"
	"os"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/clitest"
	"github.com/parley-keyd/parley-keyd/internal/testpeer"
	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets the test binary run as the real parley-keyd inside scripts
// (testscript puts it on PATH under that name), and removes what the tests
// built or copied.
func TestMain(m *testing.M) {
	testscript.Main(cleanupM{m, func() { clitest.Cleanup(); testpeer.Cleanup() }}, map[string]func(){
		"parley-keyd": func() { os.Exit(run(os.Args[1:])) },
	})
}

// cleanupM runs the tests, then removes what they built or copied.
type cleanupM struct {
	m       *testing.M
	cleanup func()
}

func (c cleanupM) Run() int {
	defer c.cleanup()
	return c.m.Run()
}

var update = flag.Bool("update", false, "rewrite the cmp files of testdata/script from the actual output")

// TestScripts runs the admin's command lines in testdata/script against the
// real binaries, with the state folder, the configuration folder and the
// socket in the script's work folder (internal/clitest), as the model of
// age's cmd/age/testdata: real files, a real daemon, exact output.
func TestScripts(t *testing.T) {
	bin, err := clitest.Build("parley-grant")
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		UpdateScripts:       *update,
		Setup:               func(env *testscript.Env) error { return clitest.Setup(env, bin) },
		Cmds:                clitest.Cmds(),
		Condition:           clitest.Condition,
	})
}
