// Command parley-grant is the command line for Parley grants (§6): agents use
// it to get, narrow, check and present grants, and humans to approve what
// agents ask the parley-keyd daemon for.
//
// The commands that need no daemon are keygen, pubkey, inspect, verify,
// attenuate, proof, hash and lens; the others talk to parley-keyd over its
// Unix socket. docs/cli.md describes every command.
//
// # Output
//
// Stdout carries only the result: a key, a token, a hash, Lens text, or
// JSON with --json. Messages go to stderr as "parley-grant: …", followed by
// a "hint: …" line when the user can do something about them.
//
// # Exit codes
//
// The codes are stable; scripts may depend on them.
//
//	0  success (verify: the request is authorized)
//	1  failure: bad input, a file that cannot be read or written, …
//	2  usage: an unknown command or flag, a missing or malformed argument
//	3  unauthorized: a grant or proof that is invalid, or not from a trusted
//	   principal, or not held by the proof key; inspect: a signature chain
//	   that does not hold
//	4  forbidden: a valid grant that does not cover the request; inspect: a
//	   caveat that is unknown or malformed, so the grant authorizes nothing
//	5  consent_required: a COMMIT that needs the principal's consent
//	6  denied: the human denied the request, or the confirmation code was wrong
//	7  timed out: no decision in time
//	8  the daemon is not running or cannot be reached
//	9  rate limited by the daemon
//	10 locked: an approver locked the daemon, which refuses every request
//	   until one unlocks it
//
// With --json, a command that fails also prints its error as JSON on
// stdout, {"error": {"code", "message", "hint"}}, unless it has printed
// its JSON result already (a verify verdict, an inspect report, an explain
// that refuses). The code is the daemon's wire code when the daemon
// refused (docs/protocol.md), else the name of the exit code: failure,
// usage, unauthorized, forbidden, consent_required, denied, timeout,
// no_daemon, limit, locked.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/internal/buildinfo"
	"github.com/spf13/cobra"
)

// Exit codes, documented in the package comment and in docs/cli.md. Never
// renumber one.
const (
	exitOK              = 0
	exitFail            = 1
	exitUsage           = 2
	exitUnauthorized    = 3
	exitForbidden       = 4
	exitConsentRequired = 5
	exitDenied          = 6
	exitTimeout         = 7
	exitNoDaemon        = 8
	exitRateLimited     = 9
	exitLocked          = 10
)

func main() { os.Exit(run()) }

// run executes the command line in os.Args and returns the exit code. It
// never lets a panic reach the user as a stack trace.
func run() (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "parley-grant: internal error: %v\n", r)
			fmt.Fprintln(os.Stderr, "hint: this is a bug; please report it with the command that caused it")
			code = exitFail
		}
	}()
	root := newRootCmd()
	root.SetArgs(os.Args[1:])
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	code = report(os.Stderr, err)
	if wantsJSON(cmd) && !wroteJSON {
		printJSONError(os.Stdout, err)
	}
	return code
}

// report writes err to stderr, with its hint, and returns its exit code.
func report(stderr io.Writer, err error) int {
	ee := asExitError(err)
	if !ee.quiet {
		fmt.Fprintf(stderr, "parley-grant: %s\n", oneLine(ee.Error()))
		if ee.hint != "" {
			fmt.Fprintf(stderr, "hint: %s\n", oneLine(ee.hint))
		}
	}
	return ee.code
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "parley-grant",
		Short: "Create, narrow, check and present Parley grants",
		Long: `parley-grant works with Parley grants (§6 of the Parley Protocol v1).

Without a daemon it makes agent keys (keygen, pubkey), reads and checks
grants (inspect, verify), narrows a grant for a sub-agent (attenuate), signs
proofs of possession (proof), and computes proposal hashes and Lens text
(hash, lens). The other commands talk to the parley-keyd daemon.

Stdout carries only the result; messages go to stderr. Exit codes:
0 ok, 1 failure, 2 usage, 3 unauthorized, 4 forbidden, 5 consent required,
6 denied, 7 timed out, 8 daemon unreachable, 9 rate limited, 10 locked.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       protocol.DaemonVersion,
	}
	root.SetVersionTemplate(buildinfo.Text("parley-grant", protocol.DaemonVersion))
	root.RunE = func(cmd *cobra.Command, args []string) error {
		return usagef("run parley-grant --help for the commands", "no command given")
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usage(err, "run "+c.CommandPath()+" --help for its flags")
	})
	root.AddCommand(
		newKeygenCmd(),
		newPubkeyCmd(),
		newInspectCmd(),
		newVerifyCmd(),
		newAttenuateCmd(),
		newProofCmd(),
		newHashCmd(),
		newLensCmd(),
	)
	addDaemonCommands(root)
	return root
}
