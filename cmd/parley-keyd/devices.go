package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/parley-keyd/parley-keyd/notify/phone"

	"github.com/spf13/cobra"
)

func newDevicesCmd() *cobra.Command {
	var state string
	var asJSON bool
	list := func(cmd *cobra.Command, args []string) error {
		if err := actAsOwnerOf(state); err != nil {
			return err
		}
		devs, pairings, err := phone.OpenDevices(state).List(time.Now())
		if err != nil {
			return err
		}
		if asJSON {
			type device struct {
				ID        string `json:"id"`
				Name      string `json:"name"`
				Created   int64  `json:"created"`
				Confirmed bool   `json:"confirmed"`
				Addr      string `json:"addr,omitempty"`
			}
			out := []device{}
			for _, d := range devs {
				out = append(out, device{d.ID, d.Name, d.Created, d.Confirmed, d.Addr})
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
			fmt.Fprintln(tw, "ID\tNAME\tPAIRED\tFROM\tSTATE")
			for _, d := range devs {
				st := "confirmed"
				if !d.Confirmed {
					st = "waiting for its code"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", d.ID, d.Name, time.Unix(d.Created, 0).Format("2006-01-02 15:04"), d.Addr, st)
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
		Long: `devices lists the phones paired with the phone page (the default),
confirms a pairing ("parley-keyd devices confirm NAME CODE", with the code the
phone showed), and revokes phones: "parley-keyd devices revoke NAME|ID". A
revoked phone can no longer see or approve requests, from its next page on;
the daemon need not restart. Pair a phone with: parley-keyd pair.`,
		Args: cobra.NoArgs,
		RunE: list,
	}
	cmd.PersistentFlags().StringVar(&state, "state", defaultState(), "state folder (paired devices)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the devices as JSON")
	listCmd := &cobra.Command{Use: "list", Short: "List the paired phones", Args: cobra.NoArgs, RunE: list}
	listCmd.Flags().BoolVar(&asJSON, "json", false, "print the devices as JSON")
	revoke := &cobra.Command{
		Use:               "revoke NAME|ID",
		Short:             "Revoke a paired phone",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeDevice(&state, false),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := actAsOwnerOf(state); err != nil {
				return err
			}
			d, err := phone.OpenDevices(state).Revoke(args[0], time.Now())
			if errors.Is(err, phone.ErrNoDevice) {
				return withHint(err, "list them with: parley-keyd devices --state "+state)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "parley-keyd: revoked %s (%s); it can no longer see or approve requests\n", d.Name, d.ID)
			return nil
		},
	}
	confirm := &cobra.Command{
		Use:               "confirm NAME|ID CODE",
		Short:             "Finish pairing a phone with the code its page shows",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: completeDevice(&state, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := actAsOwnerOf(state); err != nil {
				return err
			}
			return confirmDevice(cmd, state, args[0], args[1])
		},
	}
	cmd.AddCommand(listCmd, revoke, confirm)
	return cmd
}

// confirmDevice finishes pairing nameOrID with code, or unpairs it on a
// wrong code.
func confirmDevice(cmd *cobra.Command, state, nameOrID, code string) error {
	d, err := phone.OpenDevices(state).Confirm(nameOrID, code, time.Now())
	switch {
	case errors.Is(err, phone.ErrCodeMismatch):
		return withHint(err, "if that was not your phone, someone else used the link: pair again with a new one")
	case errors.Is(err, phone.ErrNoDevice):
		return withHint(err, "list them with: parley-keyd devices --state "+state)
	case err != nil:
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "parley-keyd: paired %s (%s); it may now approve requests routed to the phone\n", d.Name, d.ID)
	return nil
}

// completeDevice offers, for the first argument, the names of the phones
// paired in the state folder *state (at completion time, after --state is
// parsed), with their ids and states as descriptions; only those waiting for
// their code when waiting is set. It offers nothing when the folder cannot be
// read, which is the case for every user but the daemon's.
func completeDevice(state *string, waiting bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 || actAsOwnerOf(*state) != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		devs, _, err := phone.OpenDevices(*state).List(time.Now())
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		for _, d := range devs {
			if waiting && d.Confirmed {
				continue
			}
			st := "confirmed"
			if !d.Confirmed {
				st = "waiting for its code"
			}
			out = append(out, fmt.Sprintf("%s\t%s, paired %s, %s", d.Name, d.ID, time.Unix(d.Created, 0).Format("2006-01-02"), st))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
