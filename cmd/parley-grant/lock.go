package main

import (
	"fmt"
	"os"
	"time"

	"github.com/parley-keyd/parley-keyd/grant/lens"
	"github.com/spf13/cobra"
)

func newLockCmd() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "lock [--reason TEXT]",
		Short: "Stop button: make the daemon refuse every request until unlock",
		Long: `lock is for the moment you see an agent misbehave. The daemon refuses every
new request (issue, consent, explain) with "locked", withdraws every request
waiting for approval, and signs nothing until an approver runs
parley-grant unlock. The lock survives a restart of the daemon and is in
the audit log, with your name and the reason.

Any approver may lock. Only an approver who is not also an agent user may
unlock: an agent running as your own user must not be able to lift it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, done, err := daemonCall(30 * time.Second)
			if err != nil {
				return err
			}
			defer done()
			v, msg, err := c.Lock(ctx, reason)
			if err != nil {
				return daemonError(err)
			}
			switch {
			case msg == "already locked":
				infof("already locked by %s since %s", lens.SafeText(v.By, 100), time.Unix(v.At, 0).UTC().Format(time.RFC3339))
			case msg == "locked":
				infof("locked: every request is refused and every waiting one was withdrawn")
			default:
				fmt.Fprintf(os.Stderr, "parley-grant: %s\n", oneLine(msg))
			}
			fmt.Fprintln(os.Stderr, "hint: lift the lock with: parley-grant unlock")
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log and for agents' refusals")
	return cmd
}

func newUnlockCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "unlock",
		Short: "Lift the lock: the daemon serves requests again",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, done, err := daemonCall(30 * time.Second)
			if err != nil {
				return err
			}
			defer done()
			msg, err := c.Unlock(ctx)
			if err != nil {
				return daemonError(err)
			}
			infof("%s", msg)
			return nil
		},
	}
}
