package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/parley-keyd/parley-keyd/grant/lens"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/spf13/cobra"
)

func newStatusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Say whether parley-keyd answers, its principal key, and what you may ask for",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, done, err := daemonCall(10 * time.Second)
			if err != nil {
				return err
			}
			defer done()
			m, err := c.Hello(ctx)
			if err != nil {
				return daemonError(err)
			}
			if asJSON {
				return printJSON(m)
			}
			printStatus(m)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the daemon's manifest as JSON")
	return cmd
}

func printStatus(m *protocol.Manifest) {
	fmt.Printf("parley-keyd %s answers at %s\n", m.Version, socketPath())
	fmt.Printf("principal: %s\n", m.Principal)
	for _, p := range m.Previous {
		// A rotation's old key: services trust it until then.
		fmt.Printf("rotated out, still trusted until %s: %s\n", time.Unix(p.Until, 0).UTC().Format(time.RFC3339), lens.SafeText(p.Key, 60))
	}
	who := fmt.Sprintf("you: %s (uid %d) as %s", m.Caller.User, m.Caller.UID, strings.Join(m.Caller.Roles, " and "))
	if m.Caller.Agent != "" {
		who += fmt.Sprintf(", agent %q", m.Caller.Agent)
	}
	if m.Caller.Weak {
		who += " (your approvals are weak: an agent running as you could approve too)"
	}
	fmt.Println(who)
	fmt.Printf("approval channels: %s; approvals time out after %d s\n", strings.Join(m.Channels, ", "), m.Limits.ApprovalTimeout)
	if k := m.Key; k != nil {
		key := k.Backend + ": " + k.Key
		if k.Version != "" {
			key += ", version " + k.Version
		}
		switch {
		case k.Refuses:
			fmt.Printf("principal key: %s; it answers but refuses (%s), so grants are refused as unavailable\n", key, k.Problem)
		case k.Answers && k.Problem == "":
			fmt.Printf("principal key: %s; it answers\n", key)
		case k.Answers:
			fmt.Printf("principal key: %s; it answers, but: %s\n", key, k.Problem)
		default:
			fmt.Printf("principal key: %s; it does not answer (%s), so grants are refused as unavailable\n", key, k.Problem)
		}
	}
	if l := m.Locked; l != nil {
		reason := ""
		if l.Reason != "" {
			reason = " (" + lens.SafeText(l.Reason, 200) + ")"
		}
		fmt.Printf("LOCKED by %s since %s%s: every request is refused until an approver runs: parley-grant unlock\n",
			lens.SafeText(l.By, 100), time.Unix(l.At, 0).UTC().Format(time.RFC3339), reason)
	}
	if rules := mayRules(m.May); len(rules) > 0 {
		fmt.Println("what you may ask for, rule by rule (the first that covers a request decides):")
		for _, r := range rules {
			fmt.Printf("  - rule %q: %s\n", lens.SafeText(r.Rule, 100), lens.SafeText(r.Text, 600))
		}
	} else if m.Caller.Agent == "" && slices.Contains(m.Caller.Roles, "agent") {
		fmt.Println("what you may ask for: nothing; the policy names no agent for you")
	}
}

// mayRule is one entry of the manifest's "may": what a policy rule does
// for this caller. The daemon rendered Text in plain words.
type mayRule struct {
	Rule string `json:"rule"`
	Text string `json:"text"`
}

func mayRules(may any) []mayRule {
	raw, err := json.Marshal(may)
	if err != nil {
		return nil
	}
	var out []mayRule
	if json.Unmarshal(raw, &out) != nil {
		return nil
	}
	return out
}
