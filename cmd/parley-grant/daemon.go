package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/duration"
	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/spf13/cobra"
)

// socketFlag is the daemon socket named with --socket; empty means
// PARLEY_KEYD_SOCKET, then the system default.
var socketFlag string

// daemonUserFlag names, with --daemon-user, the users that may serve the
// socket; empty means PARLEY_KEYD_USER, then parley-keyd.
var daemonUserFlag string

// startTimeout is how long, with --start-timeout, the daemon has to answer
// a new connection (see client.Options.Answer).
var startTimeout = duration.Value{Duration: defaultStartTimeout}

// defaultStartTimeout covers a daemon that socket activation starts: an
// encrypted key's scrypt work, a key service's first signature.
const defaultStartTimeout = 15 * time.Second

// notStartingHint says where a daemon that does not answer says why.
const notStartingHint = "it is not starting: see why with: journalctl -u parley-keyd (or: sudo parley-keyd status); a daemon that is only slow gets longer with --start-timeout"

// addDaemonCommands adds the commands that talk to parley-keyd: the agent's
// (issue, consent, explain, status) and the human's (pending, approve, deny).
func addDaemonCommands(root *cobra.Command) {
	root.PersistentFlags().StringVar(&socketFlag, "socket", "", "parley-keyd socket (default $"+protocol.SocketEnv+", else the installed configuration's, else systemd's parley-keyd.socket, else "+protocol.DefaultSocket+")")
	root.PersistentFlags().StringVar(&daemonUserFlag, "daemon-user", "", "the user parley-keyd runs as; a socket served by anyone else but root or you is refused (default $"+protocol.DaemonUserEnv+", else "+protocol.DefaultDaemonUser+")")
	root.PersistentFlags().Var(&startTimeout, "start-timeout", "how long the daemon has to answer a connection's first request before it is taken as not starting")
	root.AddCommand(newIssueCmd(), newRunCmd(), newConsentCmd(), newExplainCmd(), newStatusCmd(),
		newPendingCmd(), newApproveCmd(), newDenyCmd(), newRememberedCmd(), newForgetCmd(), newAuditCmd(), newLockCmd(), newUnlockCmd())
	root.AddCommand(newApproverCmd())
	root.AddCommand(newMCPCmd(), newGendocsCmd())
}

// daemonCall dials the daemon for one command that asks it something:
// the client, a context that ends after timeout, and a func that releases
// both.
func daemonCall(timeout time.Duration) (*client.Client, context.Context, func(), error) {
	c, err := dialDaemon()
	if err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	return c, ctx, func() { cancel(); c.Close() }, nil
}

// dialDaemon connects to the daemon, turning the usual failures into a
// message that names the one command that fixes them. Before anything is
// sent, it checks that the socket is served by the daemon's user (see
// dial).
func dialDaemon() (*client.Client, error) {
	path := socketPath()
	c, err := dial(path)
	switch {
	case err == nil:
		return c, nil
	case errors.Is(err, client.ErrWrongServer):
		return nil, &exitError{code: exitNoDaemon, err: err, hint: wrongServerHint}
	case errors.Is(err, client.ErrNotRunning):
		return nil, &exitError{code: exitNoDaemon, err: err,
			hint: "start it with: sudo systemctl start parley-keyd.socket (without systemd: parley-keyd serve); or point --socket or " + protocol.SocketEnv + " at it"}
	case errors.Is(err, client.ErrPermission):
		return nil, &exitError{code: exitNoDaemon, err: err, hint: permissionHint(path)}
	case errors.Is(err, client.ErrNoAnswer):
		return nil, &exitError{code: exitNoDaemon, err: err, hint: notStartingHint}
	}
	return nil, &exitError{code: exitNoDaemon, err: fmt.Errorf("cannot reach parley-keyd at %s: %w", path, err)}
}

// dial connects to the socket at path, refusing one that is served by any
// user but root, this one, or the daemon's (--daemon-user,
// PARLEY_KEYD_USER, else parley-keyd): every command that sends a proof or
// an approval, the MCP binding and the desktop approver go through it.
func dial(path string) (*client.Client, error) {
	return client.DialWith(path, client.Options{ServerUsers: protocol.DaemonUsers(daemonUserFlag), Answer: startTimeout.Duration})
}

// wrongServerHint is what to do about a socket served by another user.
const wrongServerHint = "if parley-keyd runs as that user, say so with --daemon-user or " + protocol.DaemonUserEnv +
	"; otherwise another user has taken over the socket: tell an admin, and send it nothing"

// currentUser names the user this process runs as, for commands in hints.
func currentUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "$USER"
}

// permissionHint says what gives this user access to the socket at path:
// membership of the socket's group, and where the group may not write to it
// either, a socket mode that lets it. Group membership takes effect at the
// next login, which newcomers trip over, so the hint says so.
func permissionHint(path string) string {
	who := currentUser()
	group, gid, mode := "parley-agents", uint32(1), os.FileMode(0o660)
	ownGroup := false
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			gid = st.Gid
			group = strconv.FormatUint(uint64(gid), 10)
			if g, err := user.LookupGroupId(group); err == nil {
				group = g.Name
			}
			if u, err := user.LookupId(strconv.FormatUint(uint64(st.Uid), 10)); err == nil && st.Uid != 0 && u.Gid == strconv.FormatUint(uint64(gid), 10) {
				ownGroup = true
			}
		}
	}
	join := fmt.Sprintf("sudo usermod -aG %s %s, then log in again (or run: newgrp %s)", group, who, group)
	switch {
	case ownGroup:
		// Never suggest joining the daemon's own group: it can read the
		// daemon's configuration.
		return fmt.Sprintf("the socket's group is the daemon's own group %s, which can read its configuration: an admin sets socket_group = \"parley-agents\" in parley-keyd's config.toml (SocketGroup= in parley-keyd.socket under systemd), restarts it, and runs: sudo usermod -aG parley-agents %s, then you log in again", group, who)
	case gid == 0:
		// Never suggest joining root's group: the socket needs a group of
		// its own.
		return "the socket's group is root: an admin gives it the group parley-agents (SocketGroup= in parley-keyd.socket) and runs: " +
			"sudo usermod -aG parley-agents " + who + ", then you log in again"
	case mode&0o020 == 0:
		return fmt.Sprintf("the socket is mode %04o, so only its owner may connect: an admin sets socket_mode = \"0660\" in parley-keyd's config.toml, restarts it, and runs: %s", mode, join)
	}
	return "ask an admin to run: " + join
}

// daemonError maps the daemon's refusal codes to exit codes and hints.
func daemonError(err error) error {
	var e *protocol.Error
	if !errors.As(err, &e) {
		if errors.Is(err, client.ErrNoAnswer) {
			return &exitError{code: exitNoDaemon, err: err, hint: notStartingHint}
		}
		if errors.Is(err, context.Canceled) {
			return &exitError{code: exitFail, err: errors.New("interrupted; the request was withdrawn")}
		}
		return err
	}
	ee := &exitError{code: exitFail, err: errors.New(e.Message), hint: e.Fix, wire: string(e.Code)}
	switch e.Code {
	case protocol.CodeLocked:
		ee.code = exitLocked
		if ee.hint == "" {
			// A waiting request withdrawn by the lock carries no fix.
			ee.hint = "stop and tell the human; only an approver can lift the lock, with: parley-grant unlock"
		}
	case protocol.CodeUnauthorized:
		ee.code = exitUnauthorized
	case protocol.CodeForbidden:
		ee.code = exitForbidden
		switch {
		case e.Rule != "" && strings.Contains(e.Message, strconv.Quote(e.Rule)):
			// The sentence names the rule already.
			ee.err = fmt.Errorf("refused by policy: %s", e.Message)
		case e.Rule != "":
			ee.err = fmt.Errorf("refused by policy rule %q: %s", e.Rule, e.Message)
		default:
			ee.err = fmt.Errorf("refused: %s", e.Message)
		}
	case protocol.CodeDenied:
		ee.code = exitDenied
		if ee.hint == "" {
			ee.hint = "the human said no; ask for less, or talk to them first"
		}
	case protocol.CodeTimeout:
		ee.code = exitTimeout
		ee.err = fmt.Errorf("approval timed out: %s", e.Message)
		ee.hint = "ask again, and have the human run: parley-grant pending, then parley-grant approve ID"
	case protocol.CodeLimit:
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

// agentRequest is the common start of issue and explain: the agent key, the
// caveats the flags ask for, and a connection to the daemon.
func agentRequest(cf *caveatFlags, keyPath, command string) (ed25519.PrivateKey, []grant.Caveat, *client.Client, error) {
	key, err := loadAgentKey(keyPath)
	if err != nil {
		return nil, nil, nil, err
	}
	// Checked before anything is sent; for issue made again once the
	// daemon has answered the HELLO its proof needs: an expiry given as a
	// duration counts from the request, not from the start of a wait for
	// a daemon that was starting.
	if _, err := cf.caveats(time.Now()); err != nil {
		return nil, nil, nil, usage(err, "run parley-grant "+command+" --help for the caveat flags")
	}
	c, err := dialDaemon()
	if err != nil {
		return nil, nil, nil, err
	}
	if command == "issue" {
		if _, err := c.Principal(context.Background()); err != nil {
			c.Close()
			return nil, nil, nil, daemonError(err)
		}
	}
	cavs, err := cf.caveats(time.Now())
	if err != nil {
		c.Close()
		return nil, nil, nil, usage(err, "run parley-grant "+command+" --help for the caveat flags")
	}
	return key, cavs, c, nil
}
