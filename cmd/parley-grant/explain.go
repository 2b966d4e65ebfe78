package main

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/spf13/cobra"
)

func newExplainCmd() *cobra.Command {
	var cf caveatFlags
	var keyPath string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "explain",
		Short: "Ask which policy rule would decide an issue request, signing nothing",
		Long: `explain takes the same flags as issue and asks the daemon which rule would
decide the request and what it would issue after narrowing. Nothing is signed.

It exits with the code issue would get for the same request where the
policy alone decides: 0 when a rule would issue it at once or ask the human
(whose answer explain cannot know), 4 when the policy refuses it, 10 when
the daemon is locked.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			key, cavs, c, err := agentRequest(&cf, keyPath, "explain")
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := interruptible()
			defer cancel()
			e, err := c.Explain(ctx, grant.FormatPublicKey(key.Public().(ed25519.PublicKey)), cavs)
			if err != nil {
				return daemonError(err)
			}
			refused := error(nil)
			if e.Action == "deny" {
				// The exit code issue would get: forbidden.
				refused = &exitError{code: exitForbidden, quiet: true, err: errors.New("refused by policy")}
			}
			if asJSON {
				if err := printJSON(e); err != nil {
					return err
				}
				return refused
			}
			switch {
			case e.Remembered != "":
				fmt.Printf("rule %q asks the human, but remembered approval %s (until %s) covers this; it would issue at once:\n",
					e.Rule, e.Remembered, time.Unix(e.Until, 0).UTC().Format(time.RFC3339))
			case e.Action == "deny":
				fmt.Println(refusedBy(e.Rule, e.Reason))
			case e.Action == "auto":
				fmt.Printf("rule %q would issue at once:\n", e.Rule)
			case e.Action == "ask":
				strong := ""
				if e.Strong {
					strong = ", strong channel required"
				}
				fmt.Printf("rule %q would ask the human (%s%s), then issue:\n", e.Rule, strings.Join(e.Channels, ", "), strong)
			}
			for _, a := range e.Allows {
				fmt.Printf("  - %s\n", a)
			}
			for _, n := range e.Narrowed {
				fmt.Printf("  narrowed: %s\n", n)
			}
			if e.Action == "deny" {
				fmt.Fprintln(os.Stderr, "hint: ask for less (a narrower --can, --svc or --exp), or ask the principal to change the policy")
			}
			return refused
		},
	}
	cf.register(cmd, false)
	cmd.Flags().StringVar(&keyPath, "key", "", "agent key file")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the explanation as JSON")
	return cmd
}

// refusedBy says why the policy refuses, naming the rule that does, or,
// when none covers the request, saying only the reason, which says so.
func refusedBy(rule, reason string) string {
	if rule == "" {
		return "refused: " + reason
	}
	return fmt.Sprintf("refused by rule %q: %s", rule, reason)
}
