// Command parley-keyd is the daemon that holds a Parley principal key and
// issues grants to agents over a Unix socket, by policy and with the human's
// approval. See README.md and docs/protocol.md.
//
// Exit codes: 0 success; 1 failure (status: a check failed); 2 usage error;
// 3 audit log verification failed; 4 the policy file is invalid; 5 the
// configuration file is invalid.
package main

import (
	"errors"
	"fmt"
	"os"

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
		Use:           "parley-keyd",
		Short:         "Hold a Parley principal key and issue grants to agents",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newInitCmd(), newPubkeyCmd(), newServeCmd(), newStatusCmd(), newKeyCmd(), newAuditCmd(), newPolicyCmd(), newDemoCmd(), newPairCmd(), newDevicesCmd(), newGendocsCmd())
	return root
}
