package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/parley-keyd/parley-keyd/notify"
	"github.com/spf13/cobra"
)

func newDevicesCmd() *cobra.Command {
	var state string
	var asJSON bool
	list := func(cmd *cobra.Command, args []string) error {
		devs, pairings, err := notify.OpenDevices(state).List(time.Now())
		if err != nil {
			return err
		}
		if asJSON {
			type device struct {
				ID      string `json:"id"`
				Name    string `json:"name"`
				Created int64  `json:"created"`
			}
			out := []device{}
			for _, d := range devs {
				out = append(out, device{d.ID, d.Name, d.Created})
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(out)
		}
		errw := cmd.ErrOrStderr()
		if len(devs) == 0 {
			fmt.Fprintln(errw, "parley-keyd: no phone is paired")
		} else {
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tPAIRED")
			for _, d := range devs {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", d.ID, d.Name, time.Unix(d.Created, 0).Format("2006-01-02 15:04"))
			}
			tw.Flush()
		}
		for _, p := range pairings {
			fmt.Fprintf(errw, "parley-keyd: a pairing link for %q is waiting, until %s\n", p.Name, time.Unix(p.Expires, 0).Format("15:04:05"))
		}
		return nil
	}
	cmd := &cobra.Command{
		Use:   "devices",
		Short: "List the paired phones, or revoke one",
		Long: `devices lists the phones paired with the phone page (the default), and
revokes them: "parley-keyd devices revoke NAME|ID". A revoked phone can no
longer see or approve requests, from its next page on; the daemon need not
restart. Pair a phone with: parley-keyd pair.`,
		Args: cobra.NoArgs,
		RunE: list,
	}
	cmd.PersistentFlags().StringVar(&state, "state", defaultState(), "state folder (paired devices)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the devices as JSON")
	listCmd := &cobra.Command{Use: "list", Short: "List the paired phones", Args: cobra.NoArgs, RunE: list}
	listCmd.Flags().BoolVar(&asJSON, "json", false, "print the devices as JSON")
	revoke := &cobra.Command{
		Use:   "revoke NAME|ID",
		Short: "Revoke a paired phone",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			d, err := notify.OpenDevices(state).Revoke(args[0], time.Now())
			if errors.Is(err, notify.ErrNoDevice) {
				return withHint(err, "list them with: parley-keyd devices --state "+state)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "parley-keyd: revoked %s (%s); it can no longer see or approve requests\n", d.Name, d.ID)
			return nil
		},
	}
	cmd.AddCommand(listCmd, revoke)
	return cmd
}
