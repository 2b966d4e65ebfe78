package main

import (
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testpeer"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
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
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"rc":       cmdRC,
			"mkaudit":  cmdMkaudit,
			"dropline": cmdDropline,
		},
	})
}

// cmdRC runs a program and checks its exit code: rc CODE PROG [ARGS...].
// Its stdout and stderr are then checked like those of exec.
func cmdRC(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: rc CODE PROG [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("rc: bad code %q", args[0])
	}
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		got = ee.ExitCode()
	case err != nil:
		ts.Fatalf("rc: %v", err)
	}
	if got != want {
		ts.Fatalf("exit code %d, want %d", got, want)
	}
}

// cmdMkaudit writes an audit log of N records, as the daemon writes them,
// with checkpoints signed by a fixed key whose public half it writes to
// FILE.pub: mkaudit FILE N.
func cmdMkaudit(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: mkaudit FILE N")
	}
	n, err := strconv.Atoi(args[1])
	ts.Check(err)
	seed := sha256.Sum256([]byte("parley-keyd exit code script key"))
	key := ed25519.NewKeyFromSeed(seed[:])
	ts.Check(os.WriteFile(ts.MkAbs(args[0]+".pub"), []byte(audit.FormatKey(key.Public().(ed25519.PublicKey))+"\n"), 0o644))
	l, err := audit.Options{Signer: key}.Open(ts.MkAbs(args[0]))
	ts.Check(err)
	for i := range n {
		_, err := l.Append(audit.Record{Kind: audit.KindPolicyReload, Decision: "loaded", Message: fmt.Sprintf("record %d", i)})
		ts.Check(err)
	}
	ts.Check(l.Close())
}

// cmdDropline removes line N (from 1) of a file: dropline FILE N.
func cmdDropline(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: dropline FILE N")
	}
	n, err := strconv.Atoi(args[1])
	ts.Check(err)
	lines := strings.SplitAfter(ts.ReadFile(args[0]), "\n")
	if n < 1 || n > len(lines) {
		ts.Fatalf("dropline: %s has no line %d", args[0], n)
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), []byte(strings.Join(slices.Delete(lines, n-1, n), "")), 0o600))
}
