// Command parley-keyd is the daemon that holds a Parley principal key and
// issues grants to agents over a Unix socket, by policy and with the human's
// approval. See README.md and docs/protocol.md.
//
// # Exit codes
//
// The codes are stable; scripts and service managers may depend on them.
// docs/cli.md and the parley-keyd(8) page list them too.
//
//	0  success
//	1  failure: a file that cannot be read or written, a key or state folder
//	   with the wrong owner or mode, a daemon already running, …
//	2  usage: an unknown command or flag, a missing or malformed argument
//	3  audit verify: the audit log does not verify (a record removed,
//	   edited or reordered; the message names the line)
//	4  the policy file is invalid: policy check, and serve, which then
//	   does not start
//	5  the configuration file is invalid: serve does not start
//
// serve's help (and so parley-keyd-serve(8)) lists the statuses serve
// exits with; TestExitCodesDocumented keeps the lists whole.
//
// status exits 1 when one of its checks fails, 0 when none does.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/parley-keyd/parley-keyd/internal/buildinfo"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/spf13/cobra"
)

// Exit codes, documented above and stable.
const (
	exitOK     = 0
	exitFail   = 1
	exitUsage  = 2
	exitAudit  = 3
	exitPolicy = 4
	exitConfig = 5
)

// exitError carries a specific exit code, and optionally a hint line.
type exitError struct {
	code int
	err  error
	hint string
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func withHint(err error, hint string) error { return &exitError{code: exitFail, err: err, hint: hint} }

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	root := newRootCmd()
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(os.Stderr, "parley-keyd: %v\n", err)
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.hint != "" {
			fmt.Fprintf(os.Stderr, "hint: %s\n", ee.hint)
		}
		return ee.code
	}
	var ue usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitFail
}

type usageError struct{ error }

// usage returns err as a usage error (exit code 2) with a hint line.
func usage(err error, hint string) error { return &exitError{code: exitUsage, err: err, hint: hint} }

// defaultState is the daemon's state folder unless --state or
// PARLEY_KEYD_STATE says otherwise.
func defaultState() string {
	if s := os.Getenv("PARLEY_KEYD_STATE"); s != "" {
		return s
	}
	return "/var/lib/parley-keyd"
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "parley-keyd",
		Short: "Hold a Parley principal key and issue grants to agents",
		Long: `parley-keyd holds a person's Parley principal key and issues grants to AI
agents over a Unix socket, by policy and with a human's approval (serve). The
other commands set it up and look after it: init, pubkey, policy check, audit
verify and show, pair and devices for phones, and demo.

Its files are described in parley-keyd-config.toml(5) and
parley-keyd-policy.toml(5); agents and humans use parley-grant(1).

Exit codes: 0 ok, 1 failure, 2 usage, 3 the audit log does not verify
(audit verify), 4 the policy file is invalid (policy check, serve), 5 the
configuration file is invalid (serve). parley-keyd serve --help lists
serve's.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       protocol.DaemonVersion,
	}
	root.SetVersionTemplate(buildinfo.Text("parley-keyd", protocol.DaemonVersion))
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	root.Args = cobra.NoArgs
	root.RunE = func(cmd *cobra.Command, args []string) error {
		return &exitError{code: exitUsage, err: errors.New("no command given"), hint: "run parley-keyd --help for the commands"}
	}
	root.AddCommand(newInitCmd(), newPubkeyCmd(), newServeCmd(), newStatusCmd(), newKeyCmd(), newAuditCmd(), newPolicyCmd(), newDemoCmd(), newPairCmd(), newDevicesCmd(), newGendocsCmd())
	argsAreUsage(root)
	return root
}

// argsAreUsage makes every command's complaint about its arguments (an
// unknown command, a missing argument) a usage error, exit code 2, as its
// complaints about flags are.
func argsAreUsage(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return usageError{err}
			}
			return nil
		}
	}
	for _, s := range c.Commands() {
		argsAreUsage(s)
	}
}
