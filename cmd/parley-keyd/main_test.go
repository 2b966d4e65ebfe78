package main

import (
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testkit/clitest"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets the test binary run as the real parley-keyd inside scripts
// (testscript puts it on PATH under that name), and removes what the tests
// built, copied or created (clitest.Cleanup, testpeer.Cleanup).
func TestMain(m *testing.M) {
	testscript.Main(cleanupM{m, func() { clitest.Cleanup(); testpeer.Cleanup() }}, map[string]func(){
		"parley-keyd": func() { os.Exit(run(os.Args[1:])) },
	})
}

// cleanupM runs the tests, then the cleanup: testscript.Main exits the
// process itself, so the cleanup goes inside the run it calls.
type cleanupM struct {
	m       *testing.M
	cleanup func()
}

func (c cleanupM) Run() int {
	defer c.cleanup()
	return c.m.Run()
}

// TestScripts runs the admin's command lines in testdata/script against the
// real binaries, with the state folder, the configuration folder and the
// socket in the script's work folder (internal/testkit/clitest), as the model of
// age's cmd/age/testdata: real files, a real daemon, exact output.
func TestScripts(t *testing.T) {
	bin, err := clitest.Build("parley-grant")
	if err != nil {
		t.Fatal(err)
	}
	cmds := clitest.Cmds()
	cmds["mkaudit"] = cmdMkaudit
	cmds["dropline"] = cmdDropline
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		UpdateScripts:       *updateScripts, // -update, audit_test.go
		Setup:               func(env *testscript.Env) error { return clitest.Setup(env, bin) },
		Cmds:                cmds,
		Condition:           clitest.Condition,
	})
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
	ts.Check(os.WriteFile(ts.MkAbs(args[0]+".pub"), []byte(checkpoint.FormatKey(key.Public().(ed25519.PublicKey))+"\n"), 0o644))
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

// cmdRC is clitest's rc, for the scripts of testdata/audit.
var cmdRC = clitest.Cmds()["rc"]
