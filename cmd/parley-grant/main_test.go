package main

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/testpeer"
	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets the test binary run as the real parley-grant binary inside
// scripts: testscript puts it on PATH under that name. After the tests it
// removes the OS users they created (testpeer.Cleanup).
func TestMain(m *testing.M) {
	testscript.Main(cleanupM{m}, map[string]func(){
		"parley-grant": func() { os.Exit(run()) },
	})
}

// cleanupM runs the tests, then testpeer.Cleanup: testscript.Main exits
// the process itself, so the cleanup goes inside the run it calls.
type cleanupM struct{ m *testing.M }

func (c cleanupM) Run() int {
	defer testpeer.Cleanup()
	return c.m.Run()
}

var update = flag.Bool("update", false, "rewrite the cmp files of testdata/script from the actual output")

// TestScripts runs the CLI scripts in testdata/script against the real
// binary, with HOME in the script's work folder and no key path from the
// caller's environment.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		UpdateScripts:       *update,
		Setup: func(env *testscript.Env) error {
			env.Setenv("HOME", env.WorkDir+"/home")
			env.Setenv("XDG_CONFIG_HOME", "")
			env.Setenv("PARLEY_AGENT_KEY", "")
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"rc":       cmdRC,
			"mkroot":   cmdMkroot,
			"envfile":  cmdEnvfile,
			"bigfile":  cmdBigfile,
			"filemode": cmdFilemode,
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

// cmdMkroot issues a root grant and puts it in an environment variable:
// mkroot VAR SEED HOLDER IAT NONCE CAVEATS, where SEED is the principal's
// seed in b64url and CAVEATS a JSON list of caveats. It stands in for the
// daemon, which is the only other place that holds a principal key.
func cmdMkroot(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 6 {
		ts.Fatalf("usage: mkroot VAR SEED HOLDER IAT NONCE CAVEATS")
	}
	principal, err := grant.KeyFromSeed(args[1])
	ts.Check(err)
	holder, err := grant.ParsePublicKey(args[2])
	ts.Check(err)
	iat, err := strconv.ParseInt(args[3], 10, 64)
	ts.Check(err)
	var cavs []grant.Caveat
	ts.Check(json.Unmarshal([]byte(args[5]), &cavs))
	tok, err := grant.Issue(principal, ed25519.PublicKey(holder), cavs, iat, args[4])
	ts.Check(err)
	ts.Setenv(args[0], tok.Encode())
}

// cmdEnvfile sets an environment variable to a file's content without
// surrounding white space: envfile VAR FILE.
func cmdEnvfile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: envfile VAR FILE")
	}
	ts.Setenv(args[0], strings.TrimSpace(ts.ReadFile(args[1])))
}

// cmdBigfile writes a file of a given size: bigfile FILE SIZE PREFIX. It
// starts with PREFIX and goes on with 'A'.
func cmdBigfile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: bigfile FILE SIZE PREFIX")
	}
	n, err := strconv.Atoi(args[1])
	ts.Check(err)
	b := []byte(args[2] + strings.Repeat("A", n-len(args[2])))
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), b, 0o600))
}

// cmdFilemode checks a file's permission bits: filemode FILE MODE (octal).
func cmdFilemode(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: filemode FILE MODE")
	}
	want, err := strconv.ParseUint(args[1], 8, 32)
	ts.Check(err)
	fi, err := os.Stat(ts.MkAbs(args[0]))
	ts.Check(err)
	got := uint64(fi.Mode().Perm())
	if (got == want) == neg {
		ts.Fatalf("%s has mode %s, want %s%s", args[0], fmt.Sprintf("%#o", got), map[bool]string{true: "not ", false: ""}[neg], args[1])
	}
}
