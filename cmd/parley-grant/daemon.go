package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/parley-keyd/parley-keyd/keyd"
	"github.com/spf13/cobra"
)

// socketFlag is the daemon socket named with --socket; empty means
// PARLEY_KEYD_SOCKET, then the system default.
var socketFlag string

// addDaemonCommands adds the commands that talk to parley-keyd: the agent's
// (issue, consent, explain, status) and the human's (pending, approve, deny).
func addDaemonCommands(root *cobra.Command) {
	root.PersistentFlags().StringVar(&socketFlag, "socket", "", "parley-keyd socket (default $"+keyd.SocketEnv+", else "+keyd.DefaultSocket+")")
	root.AddCommand(newIssueCmd(), newConsentCmd(), newExplainCmd(), newStatusCmd(),
		newPendingCmd(), newApproveCmd(), newDenyCmd())
	root.AddCommand(newApproverCmd())
	root.AddCommand(newMCPCmd(), newGendocsCmd())
}

// dialDaemon connects to the daemon, turning the usual failures into a
// message that names the one command that fixes them.
func dialDaemon() (*keyd.Client, error) {
	path := keyd.SocketPath(socketFlag)
	c, err := keyd.Dial(path)
	switch {
	case err == nil:
		return c, nil
	case errors.Is(err, keyd.ErrNotRunning):
		return nil, &exitError{code: exitNoDaemon, err: err,
			hint: "start it with: parley-keyd serve (or: systemctl start parley-keyd.socket); or point --socket or " + keyd.SocketEnv + " at it"}
	case errors.Is(err, keyd.ErrPermission):
		return nil, &exitError{code: exitNoDaemon, err: err,
			hint: "an admin adds you to the socket's group: usermod -aG parley-agents " + currentUser()}
	}
	return nil, &exitError{code: exitNoDaemon, err: fmt.Errorf("cannot reach parley-keyd at %s: %w", path, err)}
}

func currentUser() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "$USER"
}

// daemonError maps the daemon's refusal codes to exit codes and hints.
func daemonError(err error) error {
	var e *keyd.Error
	if !errors.As(err, &e) {
		if errors.Is(err, context.Canceled) {
			return &exitError{code: exitFail, err: errors.New("interrupted; the request was withdrawn")}
		}
		return err
	}
	ee := &exitError{code: exitFail, err: errors.New(e.Message), hint: e.Fix}
	switch e.Code {
	case keyd.CodeUnauthorized:
		ee.code = exitUnauthorized
	case keyd.CodeForbidden:
		ee.code = exitForbidden
		if e.Rule != "" {
			ee.err = fmt.Errorf("refused by policy rule %q: %s", e.Rule, e.Message)
		} else {
			ee.err = fmt.Errorf("refused: %s", e.Message)
		}
	case keyd.CodeDenied:
		ee.code = exitDenied
		if ee.hint == "" {
			ee.hint = "the human said no; ask for less, or talk to them first"
		}
	case keyd.CodeTimeout:
		ee.code = exitTimeout
		ee.err = fmt.Errorf("approval timed out: %s", e.Message)
		ee.hint = "ask again, and have the human run: parley-grant pending, then parley-grant approve ID"
	case keyd.CodeLimit:
		ee.code = exitRateLimited
		if e.Retry > 0 && ee.hint == "" {
			ee.hint = fmt.Sprintf("try again in %d s", e.Retry)
		}
	}
	return ee
}

// interruptible returns a context that ends on SIGINT or SIGTERM, so that
// Ctrl-C while waiting for approval withdraws the request.
func interruptible() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// showWaiting prints the match code while a request waits for a human.
func showWaiting(e keyd.Event) {
	strong := ""
	if e.Strong {
		strong = " (a strong channel is required)"
	}
	fmt.Fprintf(os.Stderr, "parley-grant: waiting for approval of %s on %v%s\n", e.Request, e.Channels, strong)
	fmt.Fprintf(os.Stderr, "parley-grant: match code: %s  (the approver must enter this code)\n", e.Code)
}
