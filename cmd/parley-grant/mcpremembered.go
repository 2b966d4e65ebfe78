package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The MCP tools of remembered approvals (issue 24). An agent gets the two
// that can only narrow what it holds: parley_remembered lists its own
// remembered approvals (the daemon shows an agent no other's), so that it
// knows when it will be asked again; parley_forget ends one of its own, so
// that an agent done with a task gives the standing approval back rather
// than keep it to its end. Starting one stays the human's: no tool approves.

type rememberedArgs struct{}

// rememberedItem is one remembered approval in a tool result.
type rememberedItem struct {
	ID         string   `json:"id" jsonschema:"the remembered approval's id, for parley_forget"`
	Agent      string   `json:"agent"`
	UID        uint32   `json:"uid"`
	Rule       string   `json:"rule,omitempty"`
	Caveats    []any    `json:"caveats" jsonschema:"the approved request: a grant within these is issued at once"`
	Allows     []string `json:"allows" jsonschema:"the caveats in words"`
	Until      int64    `json:"until" jsonschema:"unix seconds at which it ends"`
	UntilAt    string   `json:"until_at" jsonschema:"until in RFC 3339, UTC"`
	ApprovedBy string   `json:"approved_by"`
	Channel    string   `json:"channel"`
	Issued     int      `json:"issued" jsonschema:"grants issued under it so far"`
}

type rememberedOutput struct {
	Remembered []rememberedItem `json:"remembered"`
}

func (t *mcpTools) remembered(ctx context.Context, req *mcp.CallToolRequest, _ rememberedArgs) (*mcp.CallToolResult, rememberedOutput, error) {
	out := rememberedOutput{Remembered: []rememberedItem{}}
	c, err := t.dial()
	if err != nil {
		return nil, out, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := c.Remembered(ctx)
	if err != nil {
		return nil, out, toToolError(err)
	}
	var b strings.Builder
	if len(list) == 0 {
		b.WriteString("No approval is remembered for you: a request the policy asks about waits for a human.")
	}
	for _, v := range list {
		it := rememberedItem{ID: v.ID, Agent: v.Agent, UID: v.UID, Rule: v.Rule, Caveats: caveatList(v.Scope.Caveats),
			Allows: caveatWords(v.Scope.Caveats), Until: v.Until, UntilAt: time.Unix(v.Until, 0).UTC().Format(time.RFC3339),
			ApprovedBy: v.ApprovedBy, Channel: v.Channel, Issued: v.Issued}
		out.Remembered = append(out.Remembered, it)
		fmt.Fprintf(&b, "%s: until %s, approved by %s on the %s, %d grants issued; a parley_request_grant within it is issued at once: %s.\n",
			it.ID, it.UntilAt, it.ApprovedBy, it.Channel, it.Issued, strings.Join(it.Allows, "; "))
	}
	return textResult("%s", strings.TrimSpace(b.String())), out, nil
}

type forgetArgs struct {
	ID     string `json:"id" jsonschema:"the id of one of your remembered approvals (see parley_remembered)"`
	Reason string `json:"reason,omitempty" jsonschema:"why, for the audit log"`
}

type forgetOutput struct {
	ID      string `json:"id"`
	Outcome string `json:"outcome"`
}

func (t *mcpTools) forget(ctx context.Context, req *mcp.CallToolRequest, in forgetArgs) (*mcp.CallToolResult, forgetOutput, error) {
	c, err := t.dial()
	if err != nil {
		return nil, forgetOutput{}, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.Forget(ctx, in.ID, in.Reason); err != nil {
		return nil, forgetOutput{}, toToolError(err)
	}
	out := forgetOutput{ID: in.ID, Outcome: "forgotten: no grant is issued under it any more; your next request the policy asks about waits for a human"}
	return textResult("%s %s", in.ID, out.Outcome), out, nil
}

// addRememberedTools adds parley_remembered and parley_forget to s.
func addRememberedTools(s *mcp.Server, t *mcpTools, readOnly *mcp.ToolAnnotations) {
	mcp.AddTool(s, &mcp.Tool{Name: "parley_remembered", Title: "My remembered approvals", Annotations: readOnly,
		Description: "List the approvals a human asked parley-keyd to remember for you: while one lasts, a " +
			"parley_request_grant within its caveats is issued at once (a short grant; ask again before it " +
			"expires). Each has its id, the caveats, when it ends, who approved it, and the grants issued under it. " +
			"Signs nothing."}, t.remembered)
	mcp.AddTool(s, &mcp.Tool{Name: "parley_forget", Title: "End one of my remembered approvals",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: new(true), OpenWorldHint: new(false)},
		Description: "End one of your remembered approvals (id from parley_remembered) when you no longer need " +
			"it, so that nobody can get grants under it: afterwards a request the policy asks about waits for a " +
			"human again. Grants issued before live on until they expire. not_found: no such approval of yours."}, t.forget)
}
