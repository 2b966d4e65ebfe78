package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/parley-keyd/parley-keyd/notify/desktop"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func newApproveCmd() *cobra.Command {
	var code, remember string
	cmd := &cobra.Command{
		Use:   "approve ID [--code NN] [--remember 2h]",
		Short: "Approve a waiting request after confirming its match code",
		Long: `approve shows the request as the daemon rendered it, then asks for the match
code that the requesting terminal shows. A wrong code denies the request: if
the codes differ, another request may be racing the one you expect.

With --remember (one of the lengths the request offers, as "parley-grant
pending" lists them), the daemon keeps approving this same request for that
long: the same agent and user get grants within exactly what you approved at
once, each living a few minutes. See them with parley-grant remembered, end
one at any time with parley-grant forget ID.`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeRequest,
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			c, ctx, done, err := daemonCall(5 * time.Minute)
			if err != nil {
				return err
			}
			defer done()
			list, err := c.Pending(ctx)
			if err != nil {
				return daemonError(err)
			}
			i := slices.IndexFunc(list, func(v protocol.PendingView) bool { return v.ID == id })
			if i < 0 {
				return &exitError{code: exitFail, err: fmt.Errorf("no pending request %q", id), hint: "list waiting requests with: parley-grant pending"}
			}
			v := list[i]
			if remember != "" {
				// Checked before the request is shown or a code asked
				// for: nothing is approved with a length not offered.
				if remember, err = rememberChoice(v, remember); err != nil {
					return err
				}
			}
			if !slices.Contains(v.Channels, "terminal") {
				// The daemon would refuse it (forbidden): say where
				// it may be approved before asking for any code.
				hint := "approve it on " + channelWords(v.Channels)
				if v.Link != "" {
					hint = "open " + v.Link + " on your paired phone (as a QR code: parley-grant pending --qr " + v.ID + ")"
				}
				return failCode(exitForbidden, fmt.Errorf("request %s may be approved only on %s, not in a terminal", v.ID, channelWords(v.Channels)), hint)
			}
			// The whole request is shown before the code is asked for
			// (DESIGN.md property 8): on a terminal a screenful at a
			// time, each page after the human pressed Enter.
			var shown strings.Builder
			fmt.Fprintln(&shown)
			printPendingTo(&shown, v)
			in := bufio.NewReader(os.Stdin)
			if rows := terminalRows(); rows > 0 && code == "" {
				if err := page(os.Stderr, in, shown.String(), rows); err != nil {
					return err
				}
			} else {
				fmt.Fprint(os.Stderr, shown.String())
			}
			if code == "" {
				if !term.IsTerminal(int(os.Stdin.Fd())) {
					return usage(errors.New("no terminal to ask for the match code"), "pass it with --code NN")
				}
				fmt.Fprint(os.Stderr, "Match code shown where the agent asked: ")
				line, err := in.ReadString('\n')
				if err != nil {
					return fmt.Errorf("reading the code: %w", err)
				}
				code = strings.TrimSpace(line)
			}
			if err := c.ApproveWith(ctx, id, code, "terminal", client.ApproveOptions{Remember: remember}); err != nil {
				return daemonError(err)
			}
			if remember != "" {
				fmt.Fprintf(os.Stderr, "parley-grant: approved %s, remembered for %s: the same request from the same agent and user is approved at once until then\n", id, desktop.RememberWords(remember))
				fmt.Fprintln(os.Stderr, "parley-grant: see it with: parley-grant remembered   end it with: parley-grant forget ID")
				return nil
			}
			fmt.Fprintf(os.Stderr, "parley-grant: approved %s\n", id)
			return nil
		},
	}
	cmd.Flags().StringVar(&code, "code", "", "the match code (else asked on the terminal)")
	cmd.Flags().StringVar(&remember, "remember", "", "keep approving this same request for this long: one of the lengths it offers (see parley-grant pending)")
	return cmd
}

func newDenyCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "deny ID",
		Short:             "Deny a waiting request",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeRequest,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, done, err := daemonCall(30 * time.Second)
			if err != nil {
				return err
			}
			defer done()
			if err := c.Deny(ctx, args[0], "terminal"); err != nil {
				return daemonError(err)
			}
			fmt.Fprintf(os.Stderr, "parley-grant: denied %s\n", args[0])
			return nil
		},
	}
}

// terminalRows returns the height of the terminal on stderr and stdin, or 0
// when either is not a terminal.
func terminalRows() int {
	if !term.IsTerminal(int(os.Stdin.Fd())) || !term.IsTerminal(int(os.Stderr.Fd())) {
		return 0
	}
	_, rows, err := term.GetSize(int(os.Stderr.Fd()))
	if err != nil {
		return 0
	}
	return rows
}

// page writes text to w a screen of rows lines at a time, waiting for a line
// from in (Enter) between screens, so that a request longer than the screen
// is read whole before its code is asked for.
func page(w io.Writer, in *bufio.Reader, text string, rows int) error {
	per := max(rows-2, 3)
	lines := strings.SplitAfter(text, "\n")
	for start := 0; start < len(lines); start += per {
		end := min(start+per, len(lines))
		fmt.Fprint(w, strings.Join(lines[start:end], ""))
		if end < len(lines) {
			fmt.Fprintf(w, "-- lines %d–%d of %d; Enter for more --", start+1, end, len(lines)-1)
			if _, err := in.ReadString('\n'); err != nil {
				return fmt.Errorf("reading the terminal: %w", err)
			}
		}
	}
	return nil
}
