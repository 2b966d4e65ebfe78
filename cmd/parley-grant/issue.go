package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func newIssueCmd() *cobra.Command {
	var cf caveatFlags
	var keyPath string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "issue",
		Short: "Ask parley-keyd for a grant to your agent key",
		Long: `issue asks the daemon for a root grant signed by the principal key, held by
your agent key, narrowed by the caveat flags. The policy issues it at once,
asks the human, or refuses. While a human decides, the match code is shown
here on stderr; the approver must enter the same code. The token goes to
stdout.

Example:
  parley-grant issue --can 'calendar.*' --exp 1h`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			key, cavs, c, err := agentRequest(&cf, keyPath, "issue")
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := interruptible()
			defer cancel()
			wt := newCountdown()
			res, err := c.Grant(ctx, key, cavs, wt.show)
			wt.done()
			if err != nil {
				return daemonError(err)
			}
			if asJSON {
				return printJSON(res)
			}
			how := "by policy rule " + fmt.Sprintf("%q", res.Rule)
			switch res.Decision {
			case "ask":
				how = fmt.Sprintf("approved by %s over the %s (%s)", res.Approver, res.Channel, res.Strength)
			case "remembered":
				how = fmt.Sprintf("under remembered approval %s (until %s)", res.Remembered, time.Unix(res.Until, 0).UTC().Format(time.RFC3339))
			}
			fmt.Fprintf(os.Stderr, "parley-grant: issued grant %s, %s, expires %s\n", res.GrantID, how,
				time.Unix(res.Expires, 0).UTC().Format(time.RFC3339))
			if len(res.Narrowed) > 0 {
				fmt.Fprintf(os.Stderr, "parley-grant: narrowed: %s\n", strings.Join(res.Narrowed, "; "))
			}
			fmt.Println(res.Token)
			return nil
		},
	}
	cf.register(cmd, false)
	cmd.Flags().StringVar(&keyPath, "key", "", "agent key file (default $PARLEY_AGENT_KEY or ~/.config/parley/agent.key)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the whole reply as JSON")
	return cmd
}
