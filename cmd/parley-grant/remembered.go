package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/parley-keyd/parley-keyd/grant/lens"
	"github.com/parley-keyd/parley-keyd/internal/duration"
	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/spf13/cobra"
)

// rememberChoice returns the one of the request's remember choices that
// asked names (by length: "120m" is "2h"), or a usage error that lists the
// choices, or says that the request offers none. An approval is never sent
// with a length the approver was not offered.
func rememberChoice(v protocol.PendingView, asked string) (string, error) {
	d, err := duration.Parse(asked)
	if err != nil {
		return "", usagef(rememberHint(v), "--remember %q is not a duration: %v", asked, err)
	}
	for _, c := range v.Remember {
		if cd, err := duration.Parse(c); err == nil && cd == d {
			return c, nil
		}
	}
	if len(v.Remember) == 0 {
		return "", usagef(rememberHint(v), "request %s may not be remembered (%s)", v.ID, notRememberedWhy(v))
	}
	return "", usagef(rememberHint(v), "request %s may be remembered for %s only, not %s", v.ID, strings.Join(v.Remember, ", "), asked)
}

// rememberHint says what the approver can do instead.
func rememberHint(v protocol.PendingView) string {
	if len(v.Remember) == 0 {
		return "approve it once, without --remember: parley-grant approve " + v.ID
	}
	return "choose one of them, such as --remember " + v.Remember[len(v.Remember)-1] + ", or approve it once without --remember"
}

// notRememberedWhy is why a request offers no remember choice, as far as
// the view says.
func notRememberedWhy(v protocol.PendingView) string {
	switch {
	case v.Kind == "consent":
		return "a consent is approved once, for its one proposal"
	case v.Rule != "":
		return fmt.Sprintf("policy rule %q does not allow remembering", lens.SafeText(v.Rule, 100))
	}
	return "its policy rule does not allow remembering"
}

func newRememberedCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "remembered",
		Short: "List remembered approvals: approvers see all, agents their own",
		Long: `remembered lists the approvals a human asked the daemon to keep making
(parley-grant approve ID --remember 2h): under each, the same agent and user
get grants within the approved request at once, each living only a short
slice. For each: its id, the agent and user, what was approved, when it ends,
who approved it and on which channel, and how many grants were issued under it.
An approver sees all of them, an agent only its own. End one with:
parley-grant forget ID`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, done, err := daemonCall(10 * time.Second)
			if err != nil {
				return err
			}
			defer done()
			list, err := c.Remembered(ctx)
			if err != nil {
				return daemonError(err)
			}
			if asJSON {
				if list == nil {
					list = []protocol.RememberedView{}
				}
				return printJSON(list)
			}
			if len(list) == 0 {
				fmt.Fprintln(os.Stderr, "parley-grant: no approvals are remembered")
				return nil
			}
			now := time.Now()
			for i, v := range list {
				if i > 0 {
					fmt.Println()
				}
				printRemembered(os.Stdout, v, now)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the remembered approvals as JSON")
	return cmd
}

// printRemembered shows one remembered approval. Every string in it came
// from the daemon, and some first from an agent: each goes through
// SafeText or SafeLines, so none can steer the terminal.
func printRemembered(w io.Writer, v protocol.RememberedView, now time.Time) {
	who := fmt.Sprintf("uid %d", v.UID)
	if v.User != "" {
		who = fmt.Sprintf("user %s (uid %d)", lens.SafeText(v.User, 64), v.UID)
	}
	left := time.Unix(v.Until, 0).Sub(now).Truncate(time.Second)
	until := time.Unix(v.Until, 0).Format("2006-01-02 15:04:05")
	if left > 0 {
		until += " (" + duration.Format(left) + " left)"
	} else {
		until += " (ended)"
	}
	fmt.Fprintf(w, "%s — agent %s, %s, until %s\n", lens.SafeText(v.ID, 64), lens.SafeText(v.Agent, 100), who, until)
	rule := ""
	if v.Rule != "" {
		rule = fmt.Sprintf(" under rule %s", lens.SafeText(v.Rule, 100))
	}
	fmt.Fprintf(w, "Approved by %s on the %s at %s%s; %s issued under it.\n", lens.SafeText(v.ApprovedBy, 100), lens.SafeText(v.Channel, 32),
		time.Unix(v.Started, 0).Format("15:04:05"), rule, fmt.Sprintf("%d %s", v.Issued, plural(v.Issued, "grant", "grants")))
	if v.Text != "" {
		fmt.Fprint(w, lens.SafeLines(v.Text, 0))
		if !strings.HasSuffix(v.Text, "\n") {
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintf(w, "End it with: parley-grant forget %s\n", lens.SafeText(v.ID, 64))
}

func newForgetCmd() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "forget ID [--reason TEXT]",
		Short: "End a remembered approval at once",
		Long: `forget ends a remembered approval (see parley-grant remembered): once it
returns, no grant is issued under it, and the agent's next request is decided
as if it had never been remembered. Grants issued before live on until their
short expiry. An approver may end any; an agent only its own. The reason goes
into the audit log.`,
		Args:              exactArgs(1, "ID"),
		ValidArgsFunction: completeRemembered,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, done, err := daemonCall(30 * time.Second)
			if err != nil {
				return err
			}
			defer done()
			if err := c.Forget(ctx, args[0], reason); err != nil {
				err = daemonError(err)
				if ee := asExitError(err); ee.wire == string(protocol.CodeNotFound) && ee.hint == "" {
					ee.hint = "list the remembered approvals you may end with: parley-grant remembered"
				}
				return err
			}
			fmt.Fprintf(os.Stderr, "parley-grant: forgot %s: no grant is issued under it any more\n", lens.SafeText(args[0], 64))
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log")
	return cmd
}

// completeRemembered offers the ids of the remembered approvals this user
// may see, with each one's agent and end, as completeRequest offers
// waiting requests: nothing when the daemon is away or slow.
func completeRemembered(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	return completeIDs(args, toComplete, func(ctx context.Context, c *client.Client) ([]string, error) {
		list, err := c.Remembered(ctx)
		var lines []string
		for _, v := range list {
			lines = append(lines, completionLine(v.ID, lens.SafeText(v.Agent, 40)+" until "+time.Unix(v.Until, 0).Format("15:04"), toComplete)...)
		}
		return lines, err
	})
}
