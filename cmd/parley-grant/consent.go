package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
)

// maxJSONFile bounds a consent or proposal file: one Parley frame (§2.1).
const maxJSONFile = 1 << 20

func readJSONFile(path, what string) (json.RawMessage, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxJSONFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if len(b) > maxJSONFile {
		return nil, fmt.Errorf("%s: larger than 1 MiB", what)
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("%s: not valid JSON", what)
	}
	return b, nil
}

func newConsentCmd() *cobra.Command {
	var service, consentPath, proposalPath, keyPath string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "consent --service S --consent FILE --proposal FILE",
		Short: "Ask the human, through parley-keyd, to consent to one proposal",
		Long: `consent asks the daemon for a consent grant (§6.6) for one proposal that a
service refused with consent_required. --consent takes the service's whole
ERROR frame or its "consent" object; --proposal the whole PROPOSALS frame or
the proposal itself, exactly as the service sent them. The daemon recomputes
the proposal's hash and refuses a mismatch without showing it to anyone;
otherwise it shows the human its own rendering of the proposal. The grant
goes to stdout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if service == "" || consentPath == "" || proposalPath == "" {
				return usage(fmt.Errorf("consent needs --service, --consent and --proposal"), "run parley-grant consent --help")
			}
			if consentPath == "-" && proposalPath == "-" {
				return usage(fmt.Errorf("only one of --consent and --proposal can be read from stdin"), "")
			}
			key, err := loadAgentKey(keyPath)
			if err != nil {
				return err
			}
			consent, err := readJSONFile(consentPath, "consent")
			if err != nil {
				return err
			}
			proposal, err := readJSONFile(proposalPath, "proposal")
			if err != nil {
				return err
			}
			c, err := dialDaemon()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := interruptible()
			defer cancel()
			wt := newCountdown()
			res, err := c.Consent(ctx, key, service, consent, proposal, wt.show)
			wt.done()
			if err != nil {
				return daemonError(err)
			}
			if asJSON {
				return printJSON(res)
			}
			fmt.Fprintf(os.Stderr, "parley-grant: consent grant %s, approved by %s over the %s (%s), expires %s\n",
				res.GrantID, res.Approver, res.Channel, res.Strength, time.Unix(res.Expires, 0).UTC().Format(time.RFC3339))
			fmt.Println(res.Token)
			return nil
		},
	}
	cmd.Flags().StringVar(&service, "service", "", "the service's id (its BRIEF service.id)")
	cmd.Flags().StringVar(&consentPath, "consent", "", "file with the consent_required ERROR frame or consent object (- for stdin)")
	cmd.Flags().StringVar(&proposalPath, "proposal", "", "file with the PROPOSALS frame or the proposal (- for stdin)")
	cmd.Flags().StringVar(&keyPath, "key", "", "agent key file")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the whole reply as JSON")
	return cmd
}
