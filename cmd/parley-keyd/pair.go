package main

import (
	"bufio"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/duration"
	"github.com/parley-keyd/parley-keyd/notify/phone"

	"github.com/parley-keyd/parley-keyd/notify"
	"github.com/spf13/cobra"
)

func newPairCmd() *cobra.Command {
	var state, config, name string
	ttl := duration.Value{Duration: phone.DefaultPairingTTL}
	var noWait bool
	cmd := &cobra.Command{
		Use:   "pair",
		Short: "Show a one-time QR code that pairs a phone with the phone page",
		Long: `pair makes a one-time pairing link for the phone page and prints it as a
QR code and as text. The phone that opens it (and taps "Pair this phone")
becomes a paired device that may approve requests routed to the phone. The
link works once, until --ttl passes. Only its hash is stored in the state
folder; the daemon picks it up while it runs.

Pairing is confirmed by number matching: after the phone pairs, its page
shows a four-digit code, and pair waits for you to type that code here. A
phone whose code you do not confirm can approve nothing, and a wrong code
unpairs it: someone else who saw the link cannot pair in your place. With
--no-wait, confirm later with: parley-keyd devices confirm NAME CODE.

The page's certificate is self-signed: pair makes it when there is none, and
prints its SHA-256 fingerprint. Compare it with what the phone's browser
shows before accepting the certificate there.

Run it as the daemon's user or as root, which acts as the state folder's
owner (docs/admin.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig(config, state)
			if err != nil {
				return err
			}
			base := cfg.PhoneURL()
			if base == "" {
				return withHint(errors.New("the phone page is off"),
					fmt.Sprintf("set listen = \"LAN-ADDRESS:7450\" under [phone] in %s, then restart the daemon", config))
			}
			hosts, err := phone.Hosts(cfg.Phone.Listen, cfg.Phone.URL)
			if err != nil {
				return err
			}
			if err := actAsOwnerOf(state); err != nil {
				return err
			}
			now := time.Now()
			_, info, err := phone.EnsureCert(state, hosts, now)
			if err != nil {
				return withHint(err, "run pair as the daemon's user or as root")
			}
			token, chosen, err := phone.OpenDevices(state).NewPairing(name, ttl.Duration, now)
			if err != nil {
				if errors.Is(err, phone.ErrNameTaken) {
					return withHint(err, "choose another --name, or revoke the old phone: parley-keyd devices revoke "+name)
				}
				return err
			}
			link := phone.PairingLink(base, token)
			out := cmd.OutOrStdout()
			if err := notify.WriteTerminalQR(out, link); err != nil {
				return err
			}
			fmt.Fprintln(out, link)
			fmt.Fprintf(out, "certificate SHA-256: %s\n", info.Fingerprint)
			errw := cmd.ErrOrStderr()
			if info.Made {
				fmt.Fprintf(errw, "parley-keyd: made the phone page's certificate for %v\n", info.Hosts)
			}
			fmt.Fprintf(errw, "parley-keyd: scan the code with the phone to pair it as %q; the link works once, until %s\n",
				chosen, now.Add(ttl.Duration).Format("15:04:05"))
			fmt.Fprintln(errw, "hint: the phone warns that the certificate is not trusted: accept it only if its SHA-256 fingerprint is the one above")
			if noWait {
				fmt.Fprintf(errw, "parley-keyd: after pairing, the phone shows a code; finish with: parley-keyd devices confirm %s CODE\n", chosen)
				return nil
			}
			return waitAndConfirm(cmd, state, chosen, now.Add(ttl.Duration))
		},
	}
	cmd.Flags().StringVar(&state, "state", defaultState(), "state folder (certificate, paired devices)")
	cmd.Flags().StringVar(&config, "config", defaultConfig(), "configuration file; $PARLEY_KEYD_CONFIG_DIR/config.toml")
	cmd.Flags().StringVar(&name, "name", "", "name of the phone (default phone-N)")
	cmd.Flags().Var(&ttl, "ttl", "how long the link works, such as 10m")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "do not wait for the phone; confirm later with devices confirm")
	return cmd
}

// waitAndConfirm waits until a phone has used the link for name, then asks
// for the code its page shows and confirms or unpairs it.
func waitAndConfirm(cmd *cobra.Command, state, name string, until time.Time) error {
	errw := cmd.ErrOrStderr()
	devs := phone.OpenDevices(state)
	fmt.Fprintln(errw, "parley-keyd: waiting for the phone to open the link…")
	for {
		list, _, err := devs.List(time.Now())
		if err != nil {
			return err
		}
		for _, d := range list {
			if d.Name == name && !d.Confirmed {
				fmt.Fprintf(errw, "parley-keyd: a phone at %s used the link. Type the code its page shows (anything else unpairs it): ", d.Addr)
				line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
				if err != nil && line == "" {
					devs.Revoke(d.ID, time.Now())
					return withHint(fmt.Errorf("no code was typed, so the phone was unpaired"), "pair again, or use --no-wait and: parley-keyd devices confirm NAME CODE")
				}
				return confirmDevice(cmd, state, d.ID, strings.TrimSpace(line))
			}
		}
		if time.Now().After(until) {
			return withHint(errors.New("nobody used the pairing link before it expired"), "pair again: parley-keyd pair")
		}
		time.Sleep(250 * time.Millisecond) // the phone writes the device file; nothing to wait on but the file
	}
}
