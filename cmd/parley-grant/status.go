package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

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
			c, err := dialDaemon()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
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
	fmt.Printf("parley-keyd %s answers at %s\n", m.Version, protocol.SocketPath(socketFlag))
	fmt.Printf("principal: %s\n", m.Principal)
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
		case k.Answers && k.Problem == "":
			fmt.Printf("principal key: %s; it answers\n", key)
		case k.Answers:
			fmt.Printf("principal key: %s; it answers, but: %s\n", key, k.Problem)
		default:
			fmt.Printf("principal key: %s; it does not answer (%s), so grants are refused as unavailable\n", key, k.Problem)
		}
	}
	if m.May != nil {
		b, _ := json.MarshalIndent(m.May, "  ", "  ")
		fmt.Printf("what you may ask for:\n  %s\n", b)
	}
}
