package main

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"flag"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/testkit/clitest"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets the test binary run as the real parley-grant binary inside
// scripts: testscript puts it on PATH under that name. parley-keyd, which
// the daemon-facing scripts need as well, is built by clitest. After the
// tests it removes what they built and the OS users they created.
func TestMain(m *testing.M) {
	testscript.Main(cleanupM{m, func() { clitest.Cleanup(); testpeer.Cleanup() }}, map[string]func(){
		"parley-grant": func() { os.Exit(run()) },
	})
}

// cleanupM runs the tests, then removes what they built.
type cleanupM struct {
	m       *testing.M
	cleanup func()
}

func (c cleanupM) Run() int {
	defer c.cleanup()
	return c.m.Run()
}

var update = flag.Bool("update", false, "rewrite the cmp files of testdata/script from the actual output")

// TestScripts runs the CLI scripts in testdata/script against the real
// binaries, with HOME, the daemon's state, configuration and socket in the
// script's work folder, and no key path from the caller's environment.
// Scripts that need a daemon start the real parley-keyd serve with "keyd
// start" (see internal/testkit/clitest).
func TestScripts(t *testing.T) {
	bin, err := clitest.Build("parley-keyd")
	if err != nil {
		t.Fatal(err)
	}
	cmds := clitest.Cmds()
	for name, cmd := range map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"mkroot":  cmdMkroot,
		"bigfile": cmdBigfile,
	} {
		cmds[name] = cmd
	}
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		UpdateScripts:       *update,
		Setup:               func(env *testscript.Env) error { return clitest.Setup(env, bin) },
		Cmds:                cmds,
		Condition:           clitest.Condition,
	})
}

// cmdMkroot issues a root grant and puts it in an environment variable:
// mkroot VAR SEED HOLDER IAT NONCE CAVEATS, where SEED is the principal's
// seed in b64url and CAVEATS a JSON list of caveats. It stands in for the
// daemon, which is the only other place that holds a principal key.
func cmdMkroot(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 6 {
		ts.Fatalf("usage: mkroot VAR SEED HOLDER IAT NONCE CAVEATS")
	}
	seed, err := base64.RawURLEncoding.Strict().DecodeString(args[1])
	ts.Check(err)
	if len(seed) != ed25519.SeedSize {
		ts.Fatalf("mkroot: the seed is not %d bytes", ed25519.SeedSize)
	}
	principal := ed25519.NewKeyFromSeed(seed)
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
