package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/grant/lens"
	"github.com/parley-keyd/parley-keyd/notify/desktop"

	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/spf13/cobra"
)

func newApproverCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "approver",
		Short: "Show requests waiting for you as desktop notifications (run it in your desktop session)",
		Long: `approver runs in your desktop session (the parley-grant-approver user unit
starts it) and shows every request routed to the desktop as a notification.
Its buttons are three codes and Deny: choose the code that the requesting
terminal shows. A wrong code denies the request. Dismissing the notification
leaves the request waiting for the other channels; a request decided
anywhere else loses its notification.

When your user may also act as an agent, approvals from here are weak: the
notifications say so, and requests that need a strong channel are not shown.

approver keeps running while the daemon restarts, and stops when the
session bus goes away or on Ctrl-C.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := interruptible()
			defer stop()
			return runApprover(ctx)
		},
	}
}

func approverLogf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "parley-grant: "+format+"\n", args...)
}

func runApprover(ctx context.Context) error {
	desk, err := desktop.Dial("")
	if err != nil {
		return fail(err, "run it inside your desktop session, where DBUS_SESSION_BUS_ADDRESS is set and a notification server runs")
	}
	defer desk.Close()
	// QR images of phone links live in a folder only this user can read.
	qrDir, err := os.MkdirTemp(os.Getenv("XDG_RUNTIME_DIR"), "parley-approver-")
	if err != nil {
		return fail(fmt.Errorf("make a folder for QR images: %w", err), "")
	}
	defer os.RemoveAll(qrDir)

	path := socketPath()
	backoff := time.Second
	waiting := false // said that the daemon is not running
	for {
		c, err := dial(path)
		if err != nil {
			if !errors.Is(err, client.ErrNotRunning) && !errors.Is(err, client.ErrNoAnswer) {
				return dialDaemonError(err)
			}
			// The daemon may start after the session, or be
			// restarting: wait for it rather than give up.
			if !waiting {
				approverLogf("%v; waiting for it", err)
				waiting = true
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		waiting = false
		began := time.Now()
		err = watchOnce(ctx, c, desk, qrDir)
		c.Close()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			return err
		}
		// A connection that ends at once (the daemon at its connection
		// limit, say) must not make this a busy loop.
		if time.Since(began) > time.Minute {
			backoff = time.Second
		}
		approverLogf("the connection to parley-keyd ended; reconnecting in %s", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

// watchOnce shows requests from one connection to the daemon until it ends.
// It returns nil when the daemon went away (reconnect) and an error when
// approving from here cannot work (stop).
func watchOnce(ctx context.Context, c *client.Client, desk *desktop.Desktop, qrDir string) error {
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	man, err := c.Hello(hctx)
	cancel()
	if err != nil {
		return fatalDaemonError(err)
	}
	if man.Caller.Weak {
		approverLogf("approvals from user %s are weak: an agent may run as this user too, so requests that need a strong channel are not shown here", man.Caller.User)
	}
	a := desktop.NewApprover(c, desk, desktop.ApproverOptions{Weak: man.Caller.Weak, QRDir: qrDir, Logf: approverLogf})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	runErr := make(chan error, 1)
	go func() {
		runErr <- a.Run(runCtx)
		stop() // the session bus went away: stop watching too
	}()
	approverLogf("showing requests for user %s from %s", man.Caller.User, socketPath())
	keep := checkpointKeeper(man.Principal, a)
	werr := c.Watch(runCtx, client.Feed{Pending: a.Pending, Ended: a.Ended, Checkpoint: keep, AuditDamage: damageAlarm(a),
		Malformed: func(msg string, err error) {
			approverLogf("a %s event from the daemon could not be read: %v", msg, err)
		}})
	stop()
	if rerr := <-runErr; rerr != nil && !errors.Is(rerr, context.Canceled) {
		return fail(rerr, "the desktop session ended; the user unit starts the approver again with the next session")
	}
	if werr != nil && ctx.Err() == nil {
		return fatalDaemonError(werr)
	}
	return nil
}

// fatalDaemonError returns err when the daemon refused this user (no point
// in reconnecting), or nil for a lost connection (reconnect).
func fatalDaemonError(err error) error {
	var e *protocol.Error
	if errors.As(err, &e) && (e.Code == protocol.CodeUnauthorized || e.Code == protocol.CodeForbidden) {
		ee := daemonError(err).(*exitError)
		if ee.hint == "" {
			ee.hint = "an admin adds your user to access.approver_users in the daemon's configuration"
		}
		return ee
	}
	return nil
}

// dialDaemonError explains a connection failure other than "not running".
func dialDaemonError(err error) error {
	if errors.Is(err, client.ErrWrongServer) {
		return &exitError{code: exitNoDaemon, err: err, hint: wrongServerHint}
	}
	if errors.Is(err, client.ErrPermission) {
		return &exitError{code: exitNoDaemon, err: err,
			hint: "an admin adds you to the socket's group or to access.approver_users"}
	}
	return &exitError{code: exitNoDaemon, err: fmt.Errorf("cannot reach parley-keyd: %w", err)}
}

// checkpointKeeper returns what the approver does with each checkpoint of
// the daemon's audit log: it keeps the latest in the user's state folder,
// out of the daemon's reach, after checking its signature under the
// principal key and that it follows the one kept. A checkpoint that does not
// (an older one, another hash at the same seq, another log) means the log
// was cut, rolled back or rewritten: the human is alarmed, and the file keeps
// the checkpoint that shows it (docs/audit.md, witnesses).
func checkpointKeeper(principal string, a *desktop.Approver) func(*checkpoint.Checkpoint) {
	pub, err := grant.ParsePublicKey(principal)
	if err != nil {
		approverLogf("the daemon's principal key %q cannot be read (%v); its audit checkpoints are not kept", principal, err)
		return nil
	}
	path, err := checkpointPath(principal)
	if err != nil {
		approverLogf("no place to keep the audit log's checkpoints: %v", err)
		return nil
	}
	k := checkpoint.Keeper{Path: path}
	return func(cp *checkpoint.Checkpoint) {
		if err := k.Keep(cp, pub); err != nil {
			approverLogf("ALERT: %v (the checkpoint kept is in %s)", err, path)
			a.Alarm(fmt.Sprintf("The daemon's audit log contradicts the checkpoint this desktop kept of it: %v. "+
				"Tell the admin, and keep %s: parley-keyd audit verify --checkpoint %s shows what changed.", err, path, path))
			return
		}
	}
}

// damageAlarm returns what the approver does when the daemon's scrub finds
// damage in its audit log: a critical notification that stays until
// dismissed, since nothing is issued until an admin acknowledges it.
func damageAlarm(a *desktop.Approver) func(protocol.AuditDamage) {
	return func(d protocol.AuditDamage) {
		if d.Cleared {
			approverLogf("the daemon's audit log damage was acknowledged by an admin; issuance resumed")
			return
		}
		msg := lens.SafeText(d.Message, 600)
		approverLogf("ALERT: %s", msg)
		a.Alarm(fmt.Sprintf("The daemon's audit log failed verification [%s]: %s. "+
			"Tell the admin: parley-keyd audit verify shows the damage.", lens.SafeText(d.Reason, 40), msg))
	}
}

// checkpointPath is where the approver keeps the latest checkpoint of the
// audit log of the daemon whose principal is principal:
// $XDG_STATE_HOME/parley-keyd (default ~/.local/state/parley-keyd), one
// file per principal.
func checkpointPath(principal string) (string, error) {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(home, ".local", "state")
	}
	dir = filepath.Join(dir, "parley-keyd")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(principal))
	return filepath.Join(dir, "audit-checkpoint-"+hex.EncodeToString(sum[:6])+".json"), nil
}
