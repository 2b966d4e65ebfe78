package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/grant/lens"
	"github.com/spf13/cobra"
)

// The MCP binding serves the agent's operations as MCP tools over stdio. It
// is a client of parley-keyd like any other: every tool that needs the
// principal goes over the same socket, as the same OS user, through the same
// daemon checks as the CLI. It has no rights of its own, and it offers no
// approval: pending, approve and deny are the human's, on a terminal.

// mcpInstructions tell the model what the server is for.
const mcpInstructions = `parley-keyd tools get, use and pass on Parley grants (pg1. tokens) for this agent.
Start with parley_status: it says what you may ask for without a human.
Ask for the least you need (parley_request_grant); a request beyond the policy needs a human, who must see the match code.
A call waits for the human up to 45 s; if they have not decided by then, it returns status "waiting" with the request id, the match code and the time left: show the code to the human, then call parley_wait with the request id until the status is "issued" (or a refusal comes).
Send grants to a Parley service with a proof from parley_proof.
When a service answers a COMMIT with consent_required, call parley_request_consent with its ERROR frame and PROPOSALS frame exactly as received.
Refusals are tool errors whose first line is "<code>: <sentence>"; a "fix:" line says what to do.`

func newMCPCmd() *cobra.Command {
	var keyPath string
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the agent's operations as MCP tools over stdio",
		Long: `mcp runs a Model Context Protocol server on stdin and stdout, for agent
clients that speak MCP. Its tools are the agent's operations:

    parley_status           what this agent may ask for, and from whom
    parley_request_grant    ask for a grant, as issue does
    parley_explain          which rule would decide such a request
    parley_request_consent  ask the human to consent to one proposal, as consent does
    parley_wait             wait on for a request that waits for a human
    parley_withdraw         take such a request back
    parley_attenuate        narrow a grant for a sub-agent key, as attenuate does
    parley_inspect          show a grant's blocks, as inspect does
    parley_proof            sign a proof of possession, as proof does

It reads the agent key (--key, $PARLEY_AGENT_KEY, ~/.config/parley/agent.key)
and finds the socket (--socket, $PARLEY_KEYD_SOCKET, the installed
configuration, systemd's parley-keyd.socket, the default) like the other
commands, and goes through exactly the same daemon checks: it has no rights
of its own and cannot approve anything. MCP clients start it with an
environment of their own, so a daemon at another socket is named in the
client's configuration, as in the second example.

A request that needs a human waits in this server, not in the tool call: a
call waits for the decision up to 45 s (its wait argument, 0 to 50), inside
the 60 s that MCP clients such as the TypeScript SDK's give a call by
default, then returns status "waiting" with the request id, the match code
and the time left; parley_wait waits on. The match code also goes out as MCP
progress (when the client asks for progress) and log messages, and to
stderr. Cancelling a call leaves the request waiting; parley_withdraw takes
it back, and it is withdrawn when this server exits.

Example client configurations:

    {"command": "parley-grant", "args": ["mcp"]}
    {"command": "parley-grant", "args": ["mcp", "--socket", "/run/parley-keyd/agent.sock"]}`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := interruptible()
			defer cancel()
			err := newMCPServer(keyPath).Run(ctx, &stdioTransport{in: os.Stdin, out: os.Stdout})
			if err != nil && ctx.Err() == nil {
				return fail(fmt.Errorf("mcp: %w", err), "")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&keyPath, "key", "", "agent key file (default $PARLEY_AGENT_KEY or ~/.config/parley/agent.key)")
	return cmd
}

// mcpTools binds the tools to one agent key path, and holds the requests
// that wait for a human.
type mcpTools struct {
	keyPath string
	reqs    humanRequests
}

// newMCPServer returns the MCP server with every tool, reading the agent
// key from keyPath as loadAgentKey does.
func newMCPServer(keyPath string) *mcp.Server {
	t := &mcpTools{keyPath: keyPath}
	s := mcp.NewServer(&mcp.Implementation{Name: "parley-keyd", Title: "parley-keyd grants", Version: protocol.DaemonVersion},
		&mcp.ServerOptions{Instructions: mcpInstructions})
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: new(false)}
	asks := &mcp.ToolAnnotations{DestructiveHint: new(false), OpenWorldHint: new(false)}
	waiting := fmt.Sprintf("A call waits for the human up to wait seconds (default %d, at most %d); "+
		"if they have not decided by then, the result has status \"waiting\", the request id, the match code "+
		"and the seconds left: show the code to the human and call parley_wait with the request id. ", callWaitDefault, callWaitMax)

	mcp.AddTool(s, &mcp.Tool{Name: "parley_status", Title: "What may I ask for?", Annotations: readOnly,
		Description: "Ask parley-keyd what this agent may ask for: the principal key that signs grants, " +
			"who the daemon thinks you are, the policy rules that apply to you (auto = issued at once, " +
			"ask = a human approves, deny = refused), the approval channels and timeout, and this agent's " +
			"public key. Call it first. Signs nothing."}, t.status)
	mcp.AddTool(s, &mcp.Tool{Name: "parley_request_grant", Title: "Request a grant", Annotations: asks,
		Description: "Ask parley-keyd for a grant (a pg1. token) held by this agent's key, narrowed by the " +
			"caveats you give; ask for the least you need. Formats: svc [\"shop.example\"]; verbs [\"ASK\",\"INTENT\",\"COMMIT\"]; " +
			"can [\"calendar.*\"]; exp \"1h\" (or 90s, 10m, 7d, RFC 3339, unix seconds); per and spend \"20.00USD\"; " +
			"risk low|medium|high. The policy issues it at once (status \"issued\"), or a human must approve it, " +
			"after they enter the match code, which you must show them. " + waiting +
			"Present the token in a Parley request's grants with a proof from parley_proof. " +
			"Errors: forbidden (policy; see parley_explain), denied, timeout, limit."}, t.requestGrant)
	mcp.AddTool(s, &mcp.Tool{Name: "parley_explain", Title: "Explain a grant request", Annotations: readOnly,
		Description: "Say which policy rule would decide a parley_request_grant with the same arguments " +
			"(auto, ask or deny), and what it would issue after narrowing. Signs nothing and asks nobody."}, t.explain)
	mcp.AddTool(s, &mcp.Tool{Name: "parley_request_consent", Title: "Request consent for one proposal", Annotations: asks,
		Description: "After a Parley service answered COMMIT with ERROR consent_required, ask the human through " +
			"parley-keyd to consent to that one proposal. Pass service (its id), consent (the whole ERROR frame " +
			"or its consent object) and proposal (the whole PROPOSALS frame or the proposal), exactly as the " +
			"service sent them, as JSON objects or strings; never edit them: a proposal that does not match its " +
			"hash is refused (conflict) and never shown. The human reads the daemon's rendering and decides. " + waiting +
			"The grant is a consent grant: re-send the COMMIT with it in grants and a COMMIT proof for the " +
			"proposal hash. It allows that one COMMIT and nothing else."}, t.requestConsent)
	mcp.AddTool(s, &mcp.Tool{Name: "parley_wait", Title: "Wait for a human's decision", Annotations: readOnly,
		Description: "Wait on for a request of parley_request_grant or parley_request_consent that returned status " +
			"\"waiting\": up to wait seconds (default " + fmt.Sprint(callWaitDefault) + "). The result is the grant " +
			"(status \"issued\"), a refusal (denied, timeout), or status \"waiting\" again with the seconds left: " +
			"call again while it waits. The request waits in this MCP server until the human decides or it times " +
			"out, even when a call is cancelled. not_found: no such request waits here (its result was returned " +
			"already, or it was withdrawn)."}, t.wait)
	mcp.AddTool(s, &mcp.Tool{Name: "parley_withdraw", Title: "Withdraw a waiting request",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: new(false), OpenWorldHint: new(false)},
		Description: "Take back a request that waits for a human (status \"waiting\"), so that nobody can approve it " +
			"any more. Use it when you no longer need what you asked for."}, t.withdraw)
	mcp.AddTool(s, &mcp.Tool{Name: "parley_attenuate", Title: "Narrow a grant for a sub-agent",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: false, OpenWorldHint: new(false)},
		Description: "Narrow a grant you hold and hand it to another key (a sub-agent): appends a block signed " +
			"with your agent key, held by to (\"ed25519:…\"), restricted by the caveats given (formats as in " +
			"parley_request_grant, plus only: a proposal hash). Caveats add up, so the new grant can do at most " +
			"what yours can. Needs no daemon and no human. Returns the new token."}, t.attenuate)
	mcp.AddTool(s, &mcp.Tool{Name: "parley_inspect", Title: "Inspect a grant", Annotations: readOnly,
		Description: "Show a grant's blocks: issuer, holder, each block's caveats in words and its expiry, " +
			"and whether the signature chain holds. Does not say whether a service trusts the issuer or whether " +
			"a request is allowed."}, t.inspect)
	mcp.AddTool(s, &mcp.Tool{Name: "parley_proof", Title: "Sign a proof of possession", Annotations: readOnly,
		Description: "Sign the proof of possession that must go with grants in a Parley request (§6.5), with this " +
			"agent's key: {key, ts, sig}, accepted for 300 s. aud is the service id. target depends on verb: " +
			"COMMIT the proposal hash; UNDO the receipt id; ASK and INTENT the capability; EXPAND the handle."}, t.proof)
	addRememberedTools(s, t, readOnly)
	s.AddReceivingMiddleware(guardToolCalls)
	return s
}

// guardToolCalls keeps every tool call an answer in the tools' own form. A
// call the SDK refuses before any tool runs (a name no tool has, params that
// are not an object) stays the SDK's JSON-RPC error; a tool error the SDK
// makes itself, for arguments that do not fit a tool's input schema, gets
// the first line the tools' own have ("invalid_params: …"); and a panic in
// a tool becomes an "internal" tool error rather than the end of the server
// and of every other call.
func guardToolCalls(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		defer func() {
			if r := recover(); r != nil {
				infof("internal error in a tool call: %v", r)
				res, err = (&toolError{Code: string(protocol.CodeInternal), Message: "parley-grant mcp met a bug in this call; the server goes on",
					Fix: "report it with the tool name and arguments"}).result(), nil
			}
		}()
		res, err = next(ctx, method, req)
		r, ok := res.(*mcp.CallToolResult)
		if !ok || r == nil || !r.IsError || len(r.Content) != 1 {
			return res, err
		}
		var te *toolError
		if tc, ok := r.Content[0].(*mcp.TextContent); ok && !errors.As(r.GetError(), &te) {
			tc.Text = string(protocol.CodeInvalidParams) + ": " + tc.Text
		}
		return res, err
	}
}

// toolError is a refusal as an MCP tool error (never a protocol error): the
// daemon's stable code and sentence, and what to do about it. Its text is
// "<code>: <sentence>" followed by "rule:", "fix:" and "match code:" lines.
type toolError struct {
	Code    string
	Message string
	Rule    string
	Fix     string
	// Request and Match name the request that waited for a human.
	Request, Match string
}

func (e *toolError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", e.Code, e.Message)
	if e.Rule != "" {
		fmt.Fprintf(&b, "\nrule: %s", e.Rule)
	}
	if e.Fix != "" {
		fmt.Fprintf(&b, "\nfix: %s", e.Fix)
	}
	if e.Match != "" {
		fmt.Fprintf(&b, "\nmatch code: %s (request %s)", e.Match, e.Request)
	}
	return b.String()
}

// result returns e as a tool error result.
func (e *toolError) result() *mcp.CallToolResult {
	r := &mcp.CallToolResult{}
	r.SetError(e)
	return r
}

// codeCancelled is the code of a tool call that its client cancelled. It is
// not a daemon code: the daemon never saw the call end.
const codeCancelled = "cancelled"

// toToolError turns any error of the CLI's helpers or the daemon into a
// toolError, by the error's type and the daemon's code, never by its text:
//
//   - a caveat argument that cannot be used (*argError) is invalid_params,
//     naming the argument as the tool calls it;
//   - a daemon refusal (*protocol.Error) keeps its code, sentence and rule, with
//     a fix in the tools' words (refusalFix);
//   - a daemon that cannot be reached is unavailable, or unauthorized for a
//     socket this user may not open;
//   - other local failures (the agent key, a token that does not decode)
//     are invalid_params with the CLI's sentence and hint.
func toToolError(err error) *toolError {
	var te *toolError
	if errors.As(err, &te) {
		return te
	}
	var ae *argError
	if errors.As(err, &ae) {
		return &toolError{Code: string(protocol.CodeInvalidParams), Message: ae.text.render(toolStyle), Fix: ae.hint}
	}
	var ke *protocol.Error
	if errors.As(err, &ke) {
		return &toolError{Code: string(ke.Code), Message: ke.Message, Rule: ke.Rule, Fix: refusalFix(ke)}
	}
	if errors.Is(err, context.Canceled) {
		return &toolError{Code: codeCancelled, Message: "the call was cancelled"}
	}
	if errors.Is(err, client.ErrNoAnswer) {
		return &toolError{Code: string(protocol.CodeUnavailable), Message: err.Error(), Fix: notStartingHint}
	}
	e := &toolError{Code: string(protocol.CodeInvalidParams), Message: err.Error()}
	var ee *exitError
	if errors.As(err, &ee) {
		e.Message, e.Fix = ee.err.Error(), ee.hint
		if ee.code == exitNoDaemon {
			e.Code = string(protocol.CodeUnavailable)
			if errors.Is(err, client.ErrPermission) {
				e.Code = string(protocol.CodeUnauthorized)
			}
		}
	}
	return e
}

// refusalFix says what an agent that calls the tools can do about a daemon
// refusal, chosen by its code: the daemon's own fix, except where that fix
// names a command line that the tools replace, or where there is none.
func refusalFix(e *protocol.Error) string {
	switch e.Code {
	case protocol.CodeForbidden:
		if e.Rule != "" {
			// A policy rule refused: the daemon's fix names the CLI's
			// explain command.
			return "see what the policy would allow with parley_explain (same arguments)"
		}
	case protocol.CodeDenied:
		if e.Fix == "" {
			return "the human said no; ask for less, or tell them first why you need it"
		}
	case protocol.CodeTimeout:
		return "nobody decided in time; ask again, show the human the match code, and have them run: parley-grant pending, then parley-grant approve ID"
	case protocol.CodeLimit:
		if e.Fix == "" && e.Retry > 0 {
			return fmt.Sprintf("try again in %d s", e.Retry)
		}
	}
	return e.Fix
}

// textResult is a result whose content is text for the model.
func textResult(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}}}
}

// caveatArgs are the caveat parameters shared by the grant tools, the
// arguments form of the caveat flags (§6.3).
type caveatArgs struct {
	Svc   []string `json:"svc,omitempty" jsonschema:"only at these service ids, such as [\"shop.example\"]"`
	Verbs []string `json:"verbs,omitempty" jsonschema:"only these verbs, from ASK, INTENT, COMMIT, UNDO, EXPAND"`
	Can   []string `json:"can,omitempty" jsonschema:"only capabilities matching these patterns: an exact name or a prefix ending in *, such as \"calendar.*\""`
	Exp   string   `json:"exp,omitempty" jsonschema:"expiry: a duration from now (90s, 10m, 1h, 7d), an RFC 3339 time or unix seconds"`
	Nbf   string   `json:"nbf,omitempty" jsonschema:"not valid before: a duration from now, an RFC 3339 time or unix seconds"`
	Per   string   `json:"per,omitempty" jsonschema:"most one COMMIT may cost: an amount and a currency, such as \"20.00USD\""`
	Spend string   `json:"spend,omitempty" jsonschema:"most all COMMITs together may cost, such as \"100.00USD\""`
	Risk  string   `json:"risk,omitempty" jsonschema:"highest proposal risk a COMMIT may have: low, medium or high"`
}

// caveats parses a as the caveat flags of issue and attenuate parse theirs.
func (a caveatArgs) caveats(only string, now time.Time) ([]grant.Caveat, error) {
	cf := caveatFlags{svc: a.Svc, verbs: a.Verbs, can: a.Can, exp: a.Exp, nbf: a.Nbf, per: a.Per,
		spend: a.Spend, risk: a.Risk, only: only, withOnly: only != ""}
	return cf.caveats(now)
}

// caveatList returns caveats as plain JSON values, {"svc": […]}, for
// structured output.
func caveatList(cavs []grant.Caveat) []any {
	out := make([]any, 0, len(cavs))
	for _, c := range cavs {
		var v any
		if json.Unmarshal([]byte(c.String()), &v) == nil {
			out = append(out, v)
		}
	}
	return out
}

func caveatWords(cavs []grant.Caveat) []string {
	out := make([]string, 0, len(cavs))
	for _, c := range cavs {
		out = append(out, lens.SafeText(lens.DescribeCaveat(c), 200))
	}
	return out
}

// The status of a grant request's result.
const (
	statusIssued  = "issued"
	statusWaiting = "waiting"
)

// consentWhat names a consent grant in results.
const consentWhat = "Consent grant"

// grantOutput is the result of parley_request_grant, parley_request_consent
// and parley_wait: a grant, or a request that still waits for a human.
type grantOutput struct {
	Status  string `json:"status" jsonschema:"issued: the grant is in token; waiting: no human decided yet: show match_code to the human and call parley_wait with request"`
	Request string `json:"request" jsonschema:"the daemon's request id"`
	// While waiting.
	MatchCode   string   `json:"match_code,omitempty" jsonschema:"the code the human must enter (or entered) to approve"`
	Channels    []string `json:"channels,omitempty" jsonschema:"waiting: where a human can approve it"`
	Strong      bool     `json:"strong,omitempty" jsonschema:"waiting: only a strong channel may approve it"`
	DecideBy    int64    `json:"decide_by,omitempty" jsonschema:"waiting: unix seconds at which the request times out"`
	DecideByAt  string   `json:"decide_by_at,omitempty" jsonschema:"waiting: decide_by in RFC 3339, UTC"`
	SecondsLeft int      `json:"seconds_left,omitempty" jsonschema:"waiting: seconds until the request times out"`
	// Once issued.
	Token     string   `json:"token,omitempty" jsonschema:"the grant: put it in a Parley request's grants"`
	GrantID   string   `json:"grant_id,omitempty"`
	Expires   int64    `json:"expires,omitempty" jsonschema:"unix seconds"`
	ExpiresAt string   `json:"expires_at,omitempty" jsonschema:"RFC 3339, UTC"`
	Caveats   []any    `json:"caveats,omitempty" jsonschema:"the caveats as signed (§6.3)"`
	Allows    []string `json:"allows,omitempty" jsonschema:"the caveats in words"`
	Decision  string   `json:"decision,omitempty" jsonschema:"auto (by policy), ask (a human approved) or remembered (a human approved this request earlier, for a while)"`
	Rule      string   `json:"rule,omitempty"`
	Approver  string   `json:"approver,omitempty"`
	Channel   string   `json:"channel,omitempty"`
	Strength  string   `json:"strength,omitempty" jsonschema:"strong or weak approval"`
	Narrowed  []string `json:"narrowed,omitempty" jsonschema:"what the policy cut from the request"`
	// Under a remembered approval.
	Remembered string `json:"remembered,omitempty" jsonschema:"decision remembered: the remembered approval it was issued under (see parley_remembered)"`
	Until      int64  `json:"until,omitempty" jsonschema:"decision remembered: unix seconds at which that approval ends; ask again before expires for a fresh grant until then"`
}

// newGrantOutput is the result for an issued grant; ev is the request's
// wait for a human, if it had one.
func newGrantOutput(res *protocol.GrantResult, ev *protocol.Event) grantOutput {
	out := grantOutput{Status: statusIssued, Token: res.Token, GrantID: res.GrantID, Expires: res.Expires,
		ExpiresAt: time.Unix(res.Expires, 0).UTC().Format(time.RFC3339), Caveats: caveatList(res.Caveats),
		Allows: caveatWords(res.Caveats), Decision: res.Decision, Rule: res.Rule, Approver: res.Approver,
		Channel: res.Channel, Strength: res.Strength, Narrowed: res.Narrowed, Request: res.RequestID,
		Remembered: res.Remembered, Until: res.Until}
	if ev != nil {
		out.MatchCode = ev.Code
	}
	return out
}

func (o grantOutput) text(what string) string {
	how := fmt.Sprintf("issued at once by policy rule %q", o.Rule)
	switch o.Decision {
	case "ask":
		how = fmt.Sprintf("approved by %s on the %s (%s approval, match code %s)", o.Approver, o.Channel, o.Strength, o.MatchCode)
	case "remembered":
		how = fmt.Sprintf("issued at once under remembered approval %s, which ends %s (ask again before this grant expires)",
			o.Remembered, time.Unix(o.Until, 0).UTC().Format(time.RFC3339))
	}
	s := fmt.Sprintf("%s %s, %s; expires %s.\nIt allows: %s.\n", what, o.GrantID, how, o.ExpiresAt, strings.Join(o.Allows, "; "))
	if len(o.Narrowed) > 0 {
		s += "Narrowed by the policy: " + strings.Join(o.Narrowed, "; ") + ".\n"
	}
	return s + "token: " + o.Token
}

func (t *mcpTools) dial() (*client.Client, error) {
	c, err := dialDaemon()
	if err != nil {
		return nil, toToolError(err)
	}
	return c, nil
}

type statusArgs struct{}

type statusOutput struct {
	Socket          string   `json:"socket"`
	DaemonVersion   string   `json:"daemon_version"`
	Principal       string   `json:"principal" jsonschema:"the key that signs grants; services must trust it"`
	AgentKey        string   `json:"agent_key,omitempty" jsonschema:"this agent's public key, the holder of its grants"`
	AgentKeyProblem string   `json:"agent_key_problem,omitempty"`
	User            string   `json:"user"`
	UID             uint32   `json:"uid"`
	Roles           []string `json:"roles"`
	Agent           string   `json:"agent,omitempty" jsonschema:"the policy's name for this caller"`
	Channels        []string `json:"channels" jsonschema:"where a human can approve now"`
	ApprovalTimeout int      `json:"approval_timeout" jsonschema:"seconds a request waits for a human"`
	MaxPending      int      `json:"max_pending,omitempty"`
	May             any      `json:"may,omitempty" jsonschema:"the policy rules for this caller and what each allows"`
}

func (t *mcpTools) status(ctx context.Context, req *mcp.CallToolRequest, _ statusArgs) (*mcp.CallToolResult, statusOutput, error) {
	var out statusOutput
	c, err := t.dial()
	if err != nil {
		return nil, out, err
	}
	defer c.Close()
	m, err := c.Hello(ctx)
	if err != nil {
		return nil, out, toToolError(err)
	}
	out = statusOutput{Socket: socketPath(), DaemonVersion: m.Version, Principal: m.Principal,
		User: m.Caller.User, UID: m.Caller.UID, Roles: m.Caller.Roles, Agent: m.Caller.Agent, Channels: m.Channels,
		ApprovalTimeout: m.Limits.ApprovalTimeout, MaxPending: m.Limits.MaxPending, May: m.May}
	if key, err := loadAgentKey(t.keyPath); err != nil {
		out.AgentKeyProblem = toToolError(err).Error()
	} else {
		out.AgentKey = grant.FormatPublicKey(key.Public().(ed25519.PublicKey))
	}
	may, _ := json.Marshal(m.May)
	text := fmt.Sprintf("parley-keyd %s at %s; principal %s.\nYou are %s (uid %d) as %s", m.Version, out.Socket,
		m.Principal, m.Caller.User, m.Caller.UID, strings.Join(m.Caller.Roles, " and "))
	if m.Caller.Agent != "" {
		text += fmt.Sprintf(", agent %q", m.Caller.Agent)
	}
	text += fmt.Sprintf(".\nApproval channels: %s; a request waits %d s for a human.\nWhat you may ask for: %s\n",
		strings.Join(m.Channels, ", "), m.Limits.ApprovalTimeout, may)
	if out.AgentKey != "" {
		text += "Your agent key: " + out.AgentKey
	} else {
		text += "No agent key: " + out.AgentKeyProblem
	}
	return textResult("%s", text), out, nil
}

// waitField is the wait argument of the tools that may wait for a human.
type waitField struct {
	Wait *int `json:"wait,omitempty" jsonschema:"seconds this call waits for a human's decision before it returns status waiting: 0 to 50, default 45"`
}

type grantArgs struct {
	caveatArgs
	waitField
}

type explainArgs struct {
	caveatArgs
}

// agentRequest is the common start of parley_request_grant and
// parley_explain: the agent key, the caveats asked for, and a connection.
func (t *mcpTools) agentRequest(in caveatArgs, forGrant bool) (ed25519.PrivateKey, []grant.Caveat, *client.Client, error) {
	key, err := loadAgentKey(t.keyPath)
	if err != nil {
		return nil, nil, nil, toToolError(err)
	}
	if _, err := in.caveats("", time.Now()); err != nil {
		return nil, nil, nil, toToolError(err)
	}
	c, err := t.dial()
	if err != nil {
		return nil, nil, nil, err
	}
	// For a grant, made again once the daemon answered the HELLO its
	// proof needs, as for the command line: an exp given as a duration
	// counts from the request.
	if forGrant {
		if _, err := c.Principal(context.Background()); err != nil {
			c.Close()
			return nil, nil, nil, toToolError(err)
		}
	}
	cavs, err := in.caveats("", time.Now())
	if err != nil {
		c.Close()
		return nil, nil, nil, toToolError(err)
	}
	return key, cavs, c, nil
}

func (t *mcpTools) requestGrant(ctx context.Context, req *mcp.CallToolRequest, in grantArgs) (*mcp.CallToolResult, grantOutput, error) {
	wait, err := waitArg(in.Wait)
	if err != nil {
		return nil, grantOutput{}, err
	}
	key, cavs, c, err := t.agentRequest(in.caveatArgs, true)
	if err != nil {
		return nil, grantOutput{}, err
	}
	h := t.reqs.start("Grant", func(ctx context.Context, events func(protocol.Event)) (*protocol.GrantResult, error) {
		defer c.Close()
		return c.Grant(ctx, key, cavs, events)
	})
	return t.await(ctx, req, h, wait)
}

type waitArgs struct {
	Request string `json:"request" jsonschema:"the request id of a result with status waiting"`
	waitField
}

func (t *mcpTools) wait(ctx context.Context, req *mcp.CallToolRequest, in waitArgs) (*mcp.CallToolResult, grantOutput, error) {
	wait, err := waitArg(in.Wait)
	if err != nil {
		return nil, grantOutput{}, err
	}
	h := t.reqs.get(in.Request)
	if h == nil {
		return nil, grantOutput{}, noRequest(in.Request)
	}
	return t.await(ctx, req, h, wait)
}

// noRequest is the refusal for a request id that nothing waits under here.
func noRequest(id string) *toolError {
	return &toolError{Code: string(protocol.CodeNotFound), Message: fmt.Sprintf("no request %q waits in this MCP server", lens.SafeText(id, 64)),
		Fix: "its result was returned already, or it was withdrawn, or another server sent it; ask again if you still need it"}
}

type withdrawArgs struct {
	Request string `json:"request" jsonschema:"the request id of a result with status waiting"`
}

type withdrawOutput struct {
	Request string `json:"request"`
	Outcome string `json:"outcome" jsonschema:"what became of the request"`
}

func (t *mcpTools) withdraw(ctx context.Context, req *mcp.CallToolRequest, in withdrawArgs) (*mcp.CallToolResult, withdrawOutput, error) {
	outcome, err := t.withdrawRequest(in.Request)
	if err != nil {
		return nil, withdrawOutput{}, noRequest(in.Request)
	}
	return textResult("%s", outcome), withdrawOutput{Request: in.Request, Outcome: outcome}, nil
}

type explainOutput struct {
	Action   string   `json:"action" jsonschema:"auto, ask or deny"`
	Rule     string   `json:"rule,omitempty"`
	Reason   string   `json:"reason,omitempty"`
	Agent    string   `json:"agent,omitempty"`
	Channels []string `json:"channels,omitempty"`
	Strong   bool     `json:"strong,omitempty" jsonschema:"a strong approval channel is required"`
	Caveats  []any    `json:"caveats,omitempty" jsonschema:"what would be issued"`
	Allows   []string `json:"allows,omitempty"`
	Narrowed []string `json:"narrowed,omitempty"`
	Expires  int64    `json:"expires,omitempty"`
	// Remembered: a GRANT would be issued at once under this remembered
	// approval, though the rule asks.
	Remembered string `json:"remembered,omitempty" jsonschema:"the remembered approval a grant would be issued under at once, though the rule asks"`
	Until      int64  `json:"until,omitempty" jsonschema:"when that remembered approval ends, unix seconds"`
}

func (t *mcpTools) explain(ctx context.Context, req *mcp.CallToolRequest, in explainArgs) (*mcp.CallToolResult, explainOutput, error) {
	var out explainOutput
	key, cavs, c, err := t.agentRequest(in.caveatArgs, false)
	if err != nil {
		return nil, out, err
	}
	defer c.Close()
	e, err := c.Explain(ctx, grant.FormatPublicKey(key.Public().(ed25519.PublicKey)), cavs)
	if err != nil {
		return nil, out, toToolError(err)
	}
	out = explainOutput{Action: e.Action, Rule: e.Rule, Reason: e.Reason, Agent: e.Agent, Channels: e.Channels,
		Strong: e.Strong, Caveats: caveatList(e.Caveats), Allows: e.Allows, Narrowed: e.Narrowed, Expires: e.Expires,
		Remembered: e.Remembered, Until: e.Until}
	var text string
	switch {
	case e.Remembered != "":
		text = fmt.Sprintf("Rule %q asks a human, but remembered approval %s (until %s) covers this: a grant would be issued at once: %s.",
			e.Rule, e.Remembered, time.Unix(e.Until, 0).UTC().Format(time.RFC3339), strings.Join(e.Allows, "; "))
	case e.Action == "deny":
		r := refusedBy(e.Rule, e.Reason)
		text = strings.ToUpper(r[:1]) + r[1:] + ". Ask for less (narrower can, svc or exp), or ask the principal to change the policy."
	case e.Action == "auto":
		text = fmt.Sprintf("Rule %q would issue at once: %s.", e.Rule, strings.Join(e.Allows, "; "))
	default:
		text = fmt.Sprintf("Rule %q would ask a human (on %s), then issue: %s.", e.Rule, strings.Join(e.Channels, ", "), strings.Join(e.Allows, "; "))
	}
	if len(e.Narrowed) > 0 {
		text += "\nNarrowed: " + strings.Join(e.Narrowed, "; ")
	}
	return textResult("%s", text), out, nil
}

type consentArgs struct {
	Service  string `json:"service" jsonschema:"the id of the service that sent the proposal (its BRIEF service.id)"`
	Consent  any    `json:"consent" jsonschema:"the service's consent_required ERROR frame, or its consent object, exactly as received: a JSON object or a string holding it"`
	Proposal any    `json:"proposal" jsonschema:"the PROPOSALS frame, or the one proposal, exactly as received: a JSON object or a string holding it"`
	waitField
}

// rawArg returns an argument that may be a JSON value or a string holding
// one, as JSON text of at most one frame (§2.1).
func rawArg(name string, v any) (json.RawMessage, error) {
	var raw []byte
	if s, ok := v.(string); ok {
		raw = []byte(s)
	} else {
		var err error
		if raw, err = json.Marshal(v); err != nil {
			return nil, &toolError{Code: string(protocol.CodeInvalidParams), Message: name + " is not JSON"}
		}
	}
	switch {
	case len(raw) > maxJSONFile:
		return nil, &toolError{Code: string(protocol.CodeInvalidParams), Message: name + " is larger than 1 MiB"}
	case !json.Valid(raw) || !strings.HasPrefix(strings.TrimSpace(string(raw)), "{"):
		return nil, &toolError{Code: string(protocol.CodeInvalidParams), Message: name + " must be a JSON object, or a string holding one",
			Fix: "pass the frame exactly as the service sent it"}
	}
	return raw, nil
}

func (t *mcpTools) requestConsent(ctx context.Context, req *mcp.CallToolRequest, in consentArgs) (*mcp.CallToolResult, grantOutput, error) {
	var out grantOutput
	wait, err := waitArg(in.Wait)
	if err != nil {
		return nil, out, err
	}
	if in.Service == "" {
		return nil, out, &toolError{Code: string(protocol.CodeInvalidParams), Message: "service is required",
			Fix: "give the service id from its BRIEF (service.id); the consent object names it too"}
	}
	consent, err := rawArg("consent", in.Consent)
	if err != nil {
		return nil, out, err
	}
	proposal, err := rawArg("proposal", in.Proposal)
	if err != nil {
		return nil, out, err
	}
	key, err := loadAgentKey(t.keyPath)
	if err != nil {
		return nil, out, toToolError(err)
	}
	c, err := t.dial()
	if err != nil {
		return nil, out, err
	}
	h := t.reqs.start(consentWhat, func(ctx context.Context, events func(protocol.Event)) (*protocol.GrantResult, error) {
		defer c.Close()
		return c.Consent(ctx, key, in.Service, consent, proposal, events)
	})
	return t.await(ctx, req, h, wait)
}

type attenuateArgs struct {
	Token string `json:"token" jsonschema:"the grant you hold (pg1.…)"`
	To    string `json:"to" jsonschema:"the sub-agent's public key, ed25519:…"`
	caveatArgs
	Only string `json:"only,omitempty" jsonschema:"COMMIT only the proposal with this hash"`
}

type attenuateOutput struct {
	Token    string   `json:"token" jsonschema:"the narrowed grant, held by to"`
	GrantID  string   `json:"grant_id"`
	Holder   string   `json:"holder"`
	Blocks   int      `json:"blocks"`
	Added    []string `json:"added" jsonschema:"the new block's caveats in words"`
	Warnings []string `json:"warnings,omitempty" jsonschema:"caveats that narrow nothing"`
}

func (t *mcpTools) attenuate(ctx context.Context, req *mcp.CallToolRequest, in attenuateArgs) (*mcp.CallToolResult, attenuateOutput, error) {
	var out attenuateOutput
	bad := func(msg, fix string) error {
		return &toolError{Code: string(protocol.CodeInvalidParams), Message: msg, Fix: fix}
	}
	to, err := grant.ParsePublicKey(in.To)
	if err != nil {
		return nil, out, bad(fmt.Sprintf("to %q: %v", in.To, err), "give the sub-agent's public key, ed25519:… (it prints it with: parley-grant pubkey)")
	}
	now := time.Now()
	cavs, err := in.caveats(in.Only, now)
	if err != nil {
		return nil, out, toToolError(err)
	}
	tok, err := decodeToken(strings.TrimSpace(in.Token))
	if err != nil {
		return nil, out, toToolError(err)
	}
	if err := tok.CheckChain(); err != nil {
		return nil, out, &toolError{Code: "unauthorized", Message: "the grant's signature chain does not hold: " + chainMessage(err),
			Fix: "a broken grant authorizes nothing; get a new one"}
	}
	for i, b := range tok.Blocks {
		for _, c := range b.Caveats {
			if err := c.Check(); err != nil {
				return nil, out, &toolError{Code: "forbidden", Message: fmt.Sprintf("the grant authorizes nothing: block %d: %v", i, err)}
			}
		}
	}
	key, err := loadAgentKey(t.keyPath)
	if err != nil {
		return nil, out, toToolError(err)
	}
	if mine := grant.FormatPublicKey(key.Public().(ed25519.PublicKey)); mine != tok.Holder() {
		return nil, out, bad(fmt.Sprintf("your key %s does not hold this grant; its holder is %s", mine, tok.Holder()),
			"only the holder can attenuate a grant")
	}
	next, err := tok.Delegate(key, to, cavs, now.Unix())
	if err != nil {
		return nil, out, toToolError(err)
	}
	out = attenuateOutput{Token: next.Encode(), GrantID: next.ID(), Holder: next.Holder(), Blocks: len(next.Blocks),
		Added: caveatWords(cavs), Warnings: narrowWarnings(tok, cavs, now.Unix(), toolStyle)}
	text := fmt.Sprintf("Narrowed grant %s for %s (%d blocks). Added: %s.\n", out.GrantID, out.Holder, out.Blocks, strings.Join(out.Added, "; "))
	if len(cavs) == 0 {
		text += "Warning: no caveats given, so the new grant can do all yours can.\n"
	}
	for _, w := range out.Warnings {
		text += "Warning: " + w + "\n"
	}
	return textResult("%stoken: %s", text, out.Token), out, nil
}

type inspectArgs struct {
	Token string `json:"token" jsonschema:"a grant token, pg1.…"`
}

type inspectBlockOutput struct {
	Index   int      `json:"index"`
	ID      string   `json:"id"`
	Signer  string   `json:"signer"`
	Holder  string   `json:"holder"`
	Iat     int64    `json:"iat"`
	Caveats []any    `json:"caveats"`
	Words   []string `json:"words"`
	Expires *int64   `json:"expires"`
	Expired bool     `json:"expired"`
}

type inspectOutput struct {
	GrantID    string               `json:"grant_id"`
	Issuer     string               `json:"issuer" jsonschema:"the principal who signed the root block"`
	Holder     string               `json:"holder" jsonschema:"the key that must sign proofs with this grant"`
	Expires    *int64               `json:"expires"`
	Expired    bool                 `json:"expired"`
	ChainOK    bool                 `json:"chain_ok" jsonschema:"every signature and prev link holds"`
	ChainError string               `json:"chain_error,omitempty"`
	Problems   []string             `json:"problems" jsonschema:"unknown or malformed caveats: the grant then authorizes nothing"`
	Blocks     []inspectBlockOutput `json:"blocks"`
}

func (t *mcpTools) inspect(ctx context.Context, req *mcp.CallToolRequest, in inspectArgs) (*mcp.CallToolResult, inspectOutput, error) {
	var out inspectOutput
	tok, err := decodeToken(strings.TrimSpace(in.Token))
	if err != nil {
		return nil, out, toToolError(err)
	}
	now := time.Now().Unix()
	rep := buildReport(tok, now)
	out = inspectOutput{GrantID: rep.GrantID, Issuer: rep.Issuer, Holder: rep.Holder, Expires: rep.Expires,
		Expired: rep.Expired, ChainOK: rep.ChainOK, ChainError: rep.ChainError, Problems: rep.Problems}
	var b strings.Builder
	fmt.Fprintf(&b, "Grant %s: issued by %s, held by %s", rep.GrantID, rep.Issuer, rep.Holder)
	if rep.Expires != nil {
		fmt.Fprintf(&b, ", expires %s", time.Unix(*rep.Expires, 0).UTC().Format(time.RFC3339))
		if rep.Expired {
			b.WriteString(" (expired)")
		}
	}
	if rep.ChainOK {
		b.WriteString(". The signature chain holds.\n")
	} else {
		fmt.Fprintf(&b, ". The signature chain does NOT hold: %s. Do not use it.\n", rep.ChainError)
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(&b, "Problem: %s (the grant authorizes nothing).\n", p)
	}
	for _, bl := range rep.Blocks {
		out.Blocks = append(out.Blocks, inspectBlockOutput{Index: bl.Index, ID: bl.ID, Signer: bl.Signer, Holder: bl.Holder,
			Iat: bl.Iat, Caveats: caveatList(bl.Caveats), Words: bl.Words, Expires: bl.Expires, Expired: bl.Expired})
		words := "no caveats"
		if len(bl.Words) > 0 {
			words = strings.Join(bl.Words, "; ")
		}
		fmt.Fprintf(&b, "Block %d, held by %s: %s.\n", bl.Index, bl.Holder, lens.SafeText(words, 2000))
	}
	return textResult("%s", strings.TrimSuffix(b.String(), "\n")), out, nil
}

type proofArgs struct {
	Aud    string `json:"aud" jsonschema:"the id of the service the request goes to"`
	Verb   string `json:"verb" jsonschema:"the request verb: ASK, INTENT, COMMIT, UNDO or EXPAND"`
	Target string `json:"target" jsonschema:"COMMIT: the proposal hash; UNDO: the receipt id; ASK, INTENT: the capability; EXPAND: the handle"`
}

type proofOutput struct {
	Proof grant.Proof `json:"proof" jsonschema:"put this object in the request's proof field"`
}

func (t *mcpTools) proof(ctx context.Context, req *mcp.CallToolRequest, in proofArgs) (*mcp.CallToolResult, proofOutput, error) {
	var out proofOutput
	if in.Aud == "" || in.Target == "" {
		return nil, out, &toolError{Code: string(protocol.CodeInvalidParams), Message: "aud and target are required"}
	}
	verb, err := parseVerb(in.Verb)
	if err != nil {
		return nil, out, &toolError{Code: string(protocol.CodeInvalidParams), Message: "verb: " + err.Error()}
	}
	if verb == "COMMIT" && !isHash(in.Target) {
		return nil, out, &toolError{Code: string(protocol.CodeInvalidParams), Message: fmt.Sprintf("for COMMIT the target is the proposal hash, and %q is not one", in.Target)}
	}
	key, err := loadAgentKey(t.keyPath)
	if err != nil {
		return nil, out, toToolError(err)
	}
	p, err := grant.MakeProof(key, in.Aud, verb, in.Target, time.Now().Unix())
	if err != nil {
		return nil, out, toToolError(err)
	}
	out.Proof = p
	b, _ := json.Marshal(p)
	return textResult("proof: %s", b), out, nil
}
