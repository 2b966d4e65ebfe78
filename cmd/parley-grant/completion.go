package main

import (
	"context"
	"strings"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/client"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/grant/lens"
	"github.com/spf13/cobra"
)

// Shell completion: "parley-grant completion bash|zsh|fish" prints a script
// (cobra's) that asks the binary what to offer; make install installs the
// same scripts. Beyond commands and flags, these offer flag values and
// arguments: risk levels, verbs, and the ids of the requests waiting for
// the user's approval.

// riskLevels are the values of --risk, lowest first (§6.3).
var riskLevels = []string{"low", "medium", "high"}

// completeRisk offers the risk levels.
func completeRisk(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	return riskLevels, cobra.ShellCompDirectiveNoFileComp
}

// grantVerbs returns the verbs whose requests carry grants and proofs (§3,
// §6.5): every Parley verb but HELLO, which grant.ParleyVerbs lists first.
func grantVerbs() []string { return grant.ParleyVerbs()[1:] }

// completeVerb offers the verbs a request with grants can have.
func completeVerb(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	return grantVerbs(), cobra.ShellCompDirectiveNoFileComp
}

// completeVerbs offers the next verb of a comma-separated --verbs list:
// "ASK,IN" gets "ASK,INTENT", and verbs already in the list are not offered
// again. No space follows, so that the list can go on.
func completeVerbs(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	done, last := "", toComplete
	if i := strings.LastIndexByte(toComplete, ','); i >= 0 {
		done, last = toComplete[:i+1], toComplete[i+1:]
	}
	used := map[string]bool{}
	for _, v := range strings.Split(done, ",") {
		used[strings.ToUpper(strings.TrimSpace(v))] = true
	}
	lower := last != "" && last == strings.ToLower(last)
	var out []string
	for _, v := range grantVerbs() {
		if used[v] || !strings.HasPrefix(v, strings.ToUpper(last)) {
			continue
		}
		if lower {
			// Verbs are taken in any case; shells match the prefix in
			// the case typed.
			v = strings.ToLower(v)
		}
		out = append(out, done+v)
	}
	return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
}

// completionTimeout bounds the daemon's answer to a completion: a shell
// waits for it on every Tab.
const completionTimeout = 2 * time.Second

// completeRequest offers the ids of the requests waiting for this user's
// approval, with each one's title as its description, as the daemon (at
// --socket, else $PARLEY_KEYD_SOCKET) lists them. It offers nothing when the
// daemon cannot be reached, is slow, or does not let this user list them:
// completion must never hang a shell or print an error into it.
func completeRequest(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	return completeIDs(args, toComplete, func(ctx context.Context, c *client.Client) ([]string, error) {
		list, err := c.Pending(ctx)
		var lines []string
		for _, v := range list {
			lines = append(lines, completionLine(v.ID, lens.SafeText(v.Title, 80), toComplete)...)
		}
		return lines, err
	})
}

// completeIDs asks the daemon (through dial, which refuses a socket served
// by another user) for what list returns, within completionTimeout. It
// offers nothing when there are args already, or the daemon cannot be
// reached, is slow, or refuses.
func completeIDs(args []string, toComplete string, list func(context.Context, *client.Client) ([]string, error)) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c, err := dial(socketPath())
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), completionTimeout)
	defer cancel()
	out, err := list(ctx, c)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completionLine is the completion of one id from the daemon, described by
// desc (already made safe), when it starts with toComplete. The id comes
// from the daemon; a completion line must stay one line, with one tab
// before its description, so an id holding a space or tab is not offered.
func completionLine(id, desc, toComplete string) []string {
	id = lens.SafeText(id, 64)
	if !strings.HasPrefix(id, toComplete) || strings.ContainsAny(id, " \t") {
		return nil
	}
	return []string{id + "\t" + desc}
}
