package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/grant/lens"
	"github.com/spf13/cobra"
)

func newPendingCmd() *cobra.Command {
	var asJSON bool
	var qrID string
	cmd := &cobra.Command{
		Use:   "pending",
		Short: "List requests waiting for your approval, as the daemon rendered them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, done, err := daemonCall(10 * time.Second)
			if err != nil {
				return err
			}
			defer done()
			list, err := c.Pending(ctx)
			if err != nil {
				return daemonError(err)
			}
			if qrID != "" {
				return writePendingQR(os.Stdout, list, qrID)
			}
			if asJSON {
				if list == nil {
					list = []protocol.PendingView{}
				}
				return printJSON(list)
			}
			if len(list) == 0 {
				fmt.Fprintln(os.Stderr, "parley-grant: no requests are waiting")
				return nil
			}
			for i, v := range list {
				if i > 0 {
					fmt.Println()
				}
				printPending(v)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the requests as JSON")
	cmd.Flags().StringVar(&qrID, "qr", "", "print the phone link of request `ID` as a QR code to scan")
	cmd.RegisterFlagCompletionFunc("qr", completeRequest)
	return cmd
}

// printPending shows one request. Its text was rendered and made safe for a
// terminal by the daemon; nothing the agent wrote is printed raw.
func printPending(v protocol.PendingView) { printPendingTo(os.Stdout, v) }

func printPendingTo(w io.Writer, v protocol.PendingView) {
	// The daemon made these safe already; a terminal gets them through the
	// same neutralizer once more, in case a daemon or proxy did not.
	fmt.Fprintf(w, "%s — %s (approve before %s)\n", lens.SafeText(v.ID, 64), lens.SafeText(v.Title, 200), time.Unix(v.Expires, 0).Format("15:04:05"))
	fmt.Fprint(w, lens.SafeLines(v.Text, 0))
	if v.Strong {
		fmt.Fprintln(w, "Only a strong channel may approve it.")
	}
	if slices.Contains(v.Channels, "terminal") {
		fmt.Fprintf(w, "Approve with: parley-grant approve %s   Deny with: parley-grant deny %s\n", v.ID, v.ID)
		if len(v.Remember) > 0 {
			fmt.Fprintf(w, "Or keep approving it for a while: parley-grant approve %s --remember LENGTH, LENGTH one of %s\n", v.ID, lens.SafeText(strings.Join(v.Remember, ", "), 200))
		}
	} else {
		// Say where it may be approved instead of offering a command
		// the daemon would refuse.
		fmt.Fprintf(w, "It may be approved only on %s, not in a terminal.   Deny with: parley-grant deny %s\n", channelWords(v.Channels), v.ID)
	}
	if v.Link != "" {
		fmt.Fprintf(w, "On your phone: %s   As a QR code: parley-grant pending --qr %s\n", v.Link, v.ID)
	} else if slices.Contains(v.Channels, "phone") && !slices.Contains(v.Channels, "terminal") {
		fmt.Fprintln(w, "The phone page is off: an admin sets [phone] listen in parley-keyd's configuration and restarts it.")
	}
}

// channelWords names approval channels for a sentence: "your paired phone
// or the desktop notification".
func channelWords(chans []string) string {
	words := map[string]string{"phone": "your paired phone", "desktop": "the desktop notification", "terminal": "the terminal"}
	var out []string
	for _, c := range chans {
		if w, ok := words[c]; ok {
			out = append(out, w)
		} else {
			out = append(out, c)
		}
	}
	return strings.Join(out, " or ")
}
