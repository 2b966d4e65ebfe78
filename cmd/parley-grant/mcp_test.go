package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/duration"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testservice"
)

// mcpToolNames are the tools the MCP binding offers, and all of them: none
// approves, denies or lists pending requests, or starts a remembered
// approval, which are the human's.
var mcpToolNames = []string{"parley_attenuate", "parley_explain", "parley_forget", "parley_inspect", "parley_proof", "parley_remembered",
	"parley_request_consent", "parley_request_grant", "parley_status", "parley_wait", "parley_withdraw"}

// mcpSession is the Go SDK's client connected in process to the server that
// parley-grant mcp runs, with the messages the server sent.
type mcpSession struct {
	cs       *mcp.ClientSession
	mu       sync.Mutex
	progress map[any][]string // by progress token
	steps    map[any][]float64
	logs     []string
}

func (s *mcpSession) messages() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.logs, "\n")
}

func connectMCP(t *testing.T, keyPath string) *mcpSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	s := &mcpSession{progress: map[any][]string{}, steps: map[any][]float64{}}
	ct, st := mcp.NewInMemoryTransports()
	ss, err := newMCPServer(keyPath).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	client := mcp.NewClient(&mcp.Implementation{Name: "parley-test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			s.mu.Lock()
			s.progress[r.Params.ProgressToken] = append(s.progress[r.Params.ProgressToken], r.Params.Message)
			s.steps[r.Params.ProgressToken] = append(s.steps[r.Params.ProgressToken], r.Params.Progress)
			s.mu.Unlock()
		},
		//lint:ignore SA1019 the server sends the match code as a log message too; this checks it arrives
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			s.mu.Lock()
			s.logs = append(s.logs, r.Params.Data.(string))
			s.mu.Unlock()
		},
	})
	s.cs, err = client.Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.cs.Close() })
	return s
}

// call calls a tool and returns its result; a protocol error fails the test,
// since every refusal must be a tool error.
func (s *mcpSession) call(t *testing.T, name string, args any, progressToken any) *mcp.CallToolResult {
	t.Helper()
	return (<-s.start(name, args, progressToken)).check(t)
}

type callResult struct {
	name string
	res  *mcp.CallToolResult
	err  error
}

func (c callResult) check(t *testing.T) *mcp.CallToolResult {
	t.Helper()
	if c.err != nil {
		t.Fatalf("%s: a protocol error, where a tool result or tool error was due: %v", c.name, c.err)
	}
	return c.res
}

// start calls a tool in the background.
func (s *mcpSession) start(name string, args any, progressToken any) <-chan callResult {
	done := make(chan callResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// The client asks for log messages on every request, as the
		// 2026-07-28 protocol does it.
		//lint:ignore SA1019 see LoggingMessageHandler above
		p := &mcp.CallToolParams{Name: name, Arguments: args, Meta: mcp.Meta{mcp.MetaKeyLogLevel: "info"}}
		if progressToken != nil {
			p.SetProgressToken(progressToken)
		}
		res, err := s.cs.CallTool(ctx, p)
		done <- callResult{name, res, err}
	}()
	return done
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// ok checks that res succeeded and decodes its structured content into out.
func ok(t *testing.T, res *mcp.CallToolResult, out any) {
	t.Helper()
	if res.IsError {
		t.Fatalf("tool error: %s", resultText(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
}

// toolErr checks that res is a tool error whose first line starts with
// "code: " and returns its text.
func toolErr(t *testing.T, res *mcp.CallToolResult, code string) string {
	t.Helper()
	text := resultText(res)
	if !res.IsError || !strings.HasPrefix(text, code+": ") {
		t.Fatalf("got isError=%v %q, want a tool error with code %s", res.IsError, text, code)
	}
	return text
}

func TestMCPTools(t *testing.T) {
	d := startDaemon(t, journeyPolicy, nil)
	t.Setenv(protocol.SocketEnv, d.sock)
	keyPath, key := writeAgentKey(t, t.TempDir())
	s := connectMCP(t, keyPath)

	ctx := context.Background()
	tools, err := s.cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		if len(tl.Description) < 80 || tl.InputSchema == nil || tl.OutputSchema == nil {
			t.Errorf("tool %s: description %q, input schema %v, output schema %v", tl.Name, tl.Description, tl.InputSchema, tl.OutputSchema)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, mcpToolNames) {
		t.Fatalf("tools %v, want %v", names, mcpToolNames)
	}

	t.Run("ok/status", func(t *testing.T) {
		var st statusOutput
		ok(t, s.call(t, "parley_status", map[string]any{}, nil), &st)
		if st.Principal != d.srv.Principal() || st.AgentKey != pubOf(key) || st.Agent != "shopper" || st.May == nil {
			t.Errorf("status %+v", st)
		}
	})

	var g string
	t.Run("ok/request-grant-auto", func(t *testing.T) {
		var out grantOutput
		res := s.call(t, "parley_request_grant", map[string]any{"svc": []string{"shop.example"}, "can": []string{"shop.*"},
			"per": "20.00USD", "exp": "30m"}, nil)
		ok(t, res, &out)
		tok, err := grant.Decode(out.Token)
		if err != nil {
			t.Fatal(err)
		}
		if tok.Issuer() != d.srv.Principal() || tok.Holder() != pubOf(key) || out.Decision != "auto" || out.Rule != "shop-auto" {
			t.Errorf("grant %+v", out)
		}
		if !strings.Contains(resultText(res), "token: "+out.Token) {
			t.Errorf("the text does not carry the token: %q", resultText(res))
		}
		g = out.Token
	})

	t.Run("fail/policy-refuses-as-for-the-cli", func(t *testing.T) {
		text := toolErr(t, s.call(t, "parley_request_grant", map[string]any{"can": []string{"bank.*"}}, nil), "forbidden")
		if !strings.Contains(text, "\nrule: never-bank") || !strings.Contains(text, "\nfix: ") || !strings.Contains(text, "parley_explain") {
			t.Errorf("no rule line, or no fix naming parley_explain: %q", text)
		}
		// The binding has no rights of its own: the CLI, as the same user,
		// is refused with the same sentence.
		r := cli(t, cliEnv(t, d.sock, keyPath), exitForbidden, "issue", "--can", "bank.*")
		sentence, _, _ := strings.Cut(strings.TrimPrefix(text, "forbidden: "), "\n")
		if !strings.Contains(r.stderr, sentence) {
			t.Errorf("CLI said %q, MCP said %q", r.stderr, sentence)
		}
		var ex explainOutput
		ok(t, s.call(t, "parley_explain", map[string]any{"can": []string{"bank.*"}}, nil), &ex)
		if ex.Action != "deny" || ex.Rule != "never-bank" {
			t.Errorf("explain %+v", ex)
		}
	})

	t.Run("fail/bad-arguments", func(t *testing.T) {
		text := toolErr(t, s.call(t, "parley_request_grant", map[string]any{"exp": "soon"}, nil), "invalid_params")
		if !strings.HasPrefix(text, "invalid_params: exp: ") || strings.Contains(text, "--") {
			t.Errorf("%q does not name the argument as the tool calls it", text)
		}
		// A message about two arguments names both as the tool calls them.
		text = toolErr(t, s.call(t, "parley_request_grant", map[string]any{"exp": "1h", "nbf": "2h"}, nil), "invalid_params")
		if !strings.HasPrefix(text, "invalid_params: nbf ") || !strings.Contains(text, " is not before exp ") || strings.Contains(text, "--") {
			t.Errorf("%q does not name the arguments as the tool calls them", text)
		}
		toolErr(t, s.call(t, "parley_inspect", map[string]any{"token": "pg1.AAAA"}, nil), "invalid_params")
		// Arguments the input schema refuses never reach the tool, and are
		// refused in the same form.
		toolErr(t, s.call(t, "parley_request_grant", map[string]any{"can": "shop.*"}, nil), "invalid_params")
		toolErr(t, s.call(t, "parley_request_grant", map[string]any{"bogus": 1}, nil), "invalid_params")
		toolErr(t, s.call(t, "parley_request_consent", map[string]any{"service": "shop.example"}, nil), "invalid_params")
		toolErr(t, s.call(t, "parley_proof", map[string]any{"aud": "a", "verb": "COMMIT", "target": "x"}, nil), "invalid_params")
	})

	t.Run("ok/approved-with-match-code", func(t *testing.T) {
		var out grantOutput
		done := s.start("parley_request_grant", map[string]any{"can": []string{"mail.read"}}, "p1")
		id, code := approveFromMessages(t, d, s, "p1", true)
		ok(t, (<-done).check(t), &out)
		if out.Decision != "ask" || out.MatchCode != code || out.Request != id || out.Channel != "terminal" {
			t.Errorf("grant %+v, want request %s approved with code %s", out, id, code)
		}
	})

	t.Run("fail/denied-names-the-code", func(t *testing.T) {
		done := s.start("parley_request_grant", map[string]any{"can": []string{"mail.send"}}, "p2")
		id, code := approveFromMessages(t, d, s, "p2", false)
		text := toolErr(t, (<-done).check(t), "denied")
		if !strings.Contains(text, "match code: "+code+" (request "+id+")") {
			t.Errorf("denial %q does not name the code", text)
		}
	})

	t.Run("ok/code-repeated-while-waiting", func(t *testing.T) {
		defer func(d time.Duration) { progressEvery = d }(progressEvery)
		progressEvery = 5 * time.Millisecond
		done := s.start("parley_request_grant", map[string]any{"can": []string{"mail.list"}}, "p4")
		var steps []float64
		waitUntil(t, "the match code repeated", func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			steps = slices.Clone(s.steps["p4"])
			return len(steps) >= 3
		})
		approveFromMessages(t, d, s, "p4", false)
		toolErr(t, (<-done).check(t), "denied")
		for i := 1; i < len(steps); i++ {
			if steps[i] <= steps[i-1] {
				t.Errorf("progress does not increase: %v", steps)
			}
		}
	})

	t.Run("ok/two-step-wait", func(t *testing.T) {
		// A call that returns before the human decides hands back the
		// request; parley_wait gets the grant once they approve.
		var w grantOutput
		ok(t, s.call(t, "parley_request_grant", map[string]any{"can": []string{"mail.archive"}, "wait": 0}, nil), &w)
		if w.Status != statusWaiting || w.Request == "" || len(w.MatchCode) != 2 || w.Token != "" ||
			w.SecondsLeft <= 0 || w.SecondsLeft > 120 || w.DecideBy == 0 {
			t.Fatalf("first call %+v, want status waiting with a request, a code and the time left", w)
		}
		// Still waiting: a short wait says so again, with less time left.
		var again grantOutput
		ok(t, s.call(t, "parley_wait", map[string]any{"request": w.Request, "wait": 1}, nil), &again)
		if again.Status != statusWaiting || again.Request != w.Request || again.MatchCode != w.MatchCode || again.SecondsLeft > w.SecondsLeft {
			t.Errorf("second call %+v after %+v", again, w)
		}
		approve(t, d, w.Request, w.MatchCode, true)
		var out grantOutput
		ok(t, s.call(t, "parley_wait", map[string]any{"request": w.Request}, nil), &out)
		if out.Status != statusIssued || out.Token == "" || out.Request != w.Request || out.MatchCode != w.MatchCode || out.Decision != "ask" {
			t.Errorf("after approval %+v", out)
		}
		// The result went out once: the request is no longer here.
		toolErr(t, s.call(t, "parley_wait", map[string]any{"request": w.Request}, nil), "not_found")
	})

	t.Run("ok/withdraw", func(t *testing.T) {
		var w grantOutput
		ok(t, s.call(t, "parley_request_grant", map[string]any{"can": []string{"mail.delete"}, "wait": 0}, nil), &w)
		var out withdrawOutput
		ok(t, s.call(t, "parley_withdraw", map[string]any{"request": w.Request}, nil), &out)
		if !strings.Contains(out.Outcome, "withdrew request "+w.Request) {
			t.Errorf("withdraw: %+v", out)
		}
		waitUntil(t, "the daemon to drop the request", func() bool { return !isPending(t, d, w.Request) })
		toolErr(t, s.call(t, "parley_wait", map[string]any{"request": w.Request}, nil), "not_found")
		toolErr(t, s.call(t, "parley_withdraw", map[string]any{"request": w.Request}, nil), "not_found")
	})

	t.Run("ok/cancelled-call-leaves-the-request", func(t *testing.T) {
		// A client that gives up on a call (its own timeout is a cancel)
		// must still be able to get what the human approves afterwards.
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			p := &mcp.CallToolParams{Name: "parley_request_grant", Arguments: map[string]any{"can": []string{"mail.move"}}}
			p.SetProgressToken("p5")
			_, err := s.cs.CallTool(ctx, p)
			done <- err
		}()
		id, code := matchFromProgress(t, s, "p5")
		cancel()
		if err := <-done; err == nil {
			t.Fatal("the cancelled call returned no error")
		}
		// The call after the cancel is served.
		var st statusOutput
		ok(t, s.call(t, "parley_status", map[string]any{}, nil), &st)
		if !isPending(t, d, id) {
			t.Fatalf("request %s was withdrawn with the call", id)
		}
		approve(t, d, id, code, true)
		var out grantOutput
		ok(t, s.call(t, "parley_wait", map[string]any{"request": id}, nil), &out)
		if out.Status != statusIssued || out.Token == "" {
			t.Errorf("after approval %+v", out)
		}
	})

	t.Run("ok/progress-tells-the-time", func(t *testing.T) {
		defer func(d time.Duration) { progressEvery = d }(progressEvery)
		progressEvery = 5 * time.Millisecond
		done := s.start("parley_request_grant", map[string]any{"can": []string{"mail.flag"}, "wait": 3}, "p6")
		res := (<-done).check(t)
		var w grantOutput
		ok(t, res, &w)
		s.mu.Lock()
		msgs := slices.Clone(s.progress["p6"])
		s.mu.Unlock()
		if w.Status != statusWaiting || len(msgs) < 2 {
			t.Fatalf("result %+v after %d progress messages", w, len(msgs))
		}
		// Each message gives the time the request has left at the
		// daemon (at most its 120 s), and the time this call has left
		// (at most its 3 s), both going down.
		for _, m := range msgs {
			left, call, found := waitTimes(m)
			switch {
			case !found && (strings.Contains(m, "this call returns") || !strings.Contains(m, "times out in")):
				t.Errorf("progress %q does not give both times", m)
			case found && (left > 120*time.Second || call > 3*time.Second):
				t.Errorf("progress %q: more time than there is", m)
			}
			// Without "this call returns": the call's last second.
		}
		if !strings.Contains(resultText(res), "Call parley_wait with {\"request\": \""+w.Request+"\"}") {
			t.Errorf("the waiting result does not say how to go on: %q", resultText(res))
		}
		approve(t, d, w.Request, w.MatchCode, false)
		text := toolErr(t, s.call(t, "parley_wait", map[string]any{"request": w.Request}, nil), "denied")
		if !strings.Contains(text, "match code: "+w.MatchCode+" (request "+w.Request+")") {
			t.Errorf("denial %q does not name the code", text)
		}
	})

	t.Run("ok/attenuate-and-inspect", func(t *testing.T) {
		sub := newTestKey(t)
		var at attenuateOutput
		ok(t, s.call(t, "parley_attenuate", map[string]any{"token": g, "to": pubOf(sub), "verbs": []string{"ASK"}}, nil), &at)
		// A caveat that narrows nothing is a warning that names the
		// argument as the tool calls it.
		var wide attenuateOutput
		ok(t, s.call(t, "parley_attenuate", map[string]any{"token": g, "to": pubOf(sub), "exp": "2h"}, nil), &wide)
		if len(wide.Warnings) != 1 || !strings.HasPrefix(wide.Warnings[0], "exp ") || !strings.Contains(wide.Warnings[0], "narrows nothing") {
			t.Errorf("warnings %q", wide.Warnings)
		}
		var in inspectOutput
		ok(t, s.call(t, "parley_inspect", map[string]any{"token": at.Token}, nil), &in)
		if at.Blocks != 2 || in.Holder != pubOf(sub) || !in.ChainOK || len(in.Blocks) != 2 || in.Issuer != d.srv.Principal() {
			t.Errorf("attenuated %+v, inspected %+v", at, in)
		}
		if !slices.ContainsFunc(in.Blocks[1].Words, func(w string) bool { return strings.Contains(w, "ASK") }) {
			t.Errorf("block 1 words %v", in.Blocks[1].Words)
		}
		// Only the holder can attenuate: a grant held by the sub-agent is
		// not this agent's to narrow.
		toolErr(t, s.call(t, "parley_attenuate", map[string]any{"token": at.Token, "to": pubOf(sub)}, nil), "invalid_params")
	})

	t.Run("ok/consent-round-trip", func(t *testing.T) {
		srv := httptest.NewServer(testservice.New(testservice.Config{ID: "shop.example", Principals: []string{d.srv.Principal()}}))
		defer srv.Close()
		agent := &testservice.Agent{URL: srv.URL, Service: "shop.example", Key: key}
		proposals := want(t, "PROPOSALS")(agent.Intent("shop.order", order("lamp", 9900), g))
		p := proposalOf(t, proposals)
		refusal := wantRefused(t, "consent_required", "")(agent.Commit(p.ID, p.Hash, g))

		// An altered proposal: conflict, and never shown to anyone.
		before := len(d.seen.list())
		altered := strings.Replace(string(proposals.Raw), "9900", "990", 1)
		text := toolErr(t, s.call(t, "parley_request_consent", map[string]any{"service": "shop.example",
			"consent": string(refusal.Raw), "proposal": altered}, nil), "conflict")
		if !strings.Contains(text, "fix: ") || len(d.seen.list()) != before {
			t.Errorf("altered proposal: %q; human channels saw %d new requests", text, len(d.seen.list())-before)
		}

		// The frames as JSON objects, exactly as the service sent them.
		var consentObj, proposalsObj any
		json.Unmarshal(refusal.Raw, &consentObj)
		json.Unmarshal(proposals.Raw, &proposalsObj)
		done := s.start("parley_request_consent", map[string]any{"service": "shop.example",
			"consent": consentObj, "proposal": proposalsObj}, "p3")
		approveFromMessages(t, d, s, "p3", true)
		var out grantOutput
		ok(t, (<-done).check(t), &out)
		want(t, "RECEIPT")(agent.Commit(p.ID, p.Hash, out.Token))

		// A COMMIT proof from parley_proof is what the service checks.
		var pr proofOutput
		ok(t, s.call(t, "parley_proof", map[string]any{"aud": "shop.example", "verb": "COMMIT", "target": p.Hash}, nil), &pr)
		if err := grant.VerifyProof(pr.Proof, "shop.example", "COMMIT", p.Hash, time.Now().Unix()); err != nil || pr.Proof.Key != pubOf(key) {
			t.Errorf("proof %+v: %v", pr.Proof, err)
		}
	})
}

var progressCode = regexp.MustCompile(`request (r_[a-z0-9]+) .*match code (\d\d)`)

// approveFromMessages waits for the match code in the MCP client's progress
// and log messages, then approves (or denies) the request as the human over
// the socket, with that code.
func approveFromMessages(t *testing.T, d *testDaemon, s *mcpSession, token string, approve bool) (id, code string) {
	t.Helper()
	var m []string
	waitUntil(t, "a progress message with the match code", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, msg := range s.progress[token] {
			if m = progressCode.FindStringSubmatch(msg); m != nil {
				return true
			}
		}
		return false
	})
	id, code = m[1], m[2]
	// The log message is a notification of its own, sent after the
	// progress one: the client may hand it over later.
	waitUntil(t, "a log message with the match code", func() bool {
		return strings.Contains(s.messages(), "request "+id+" on terminal; match code "+code)
	})
	human, err := client.Dial(d.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer human.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if approve {
		err = human.Approve(ctx, id, code, "terminal")
	} else {
		err = human.Deny(ctx, id, "terminal")
	}
	if err != nil {
		t.Fatal(err)
	}
	return id, code
}

// matchFromProgress waits for the request id and match code in the
// progress messages for token.
func matchFromProgress(t *testing.T, s *mcpSession, token string) (id, code string) {
	t.Helper()
	var m []string
	waitUntil(t, "a progress message with the match code", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, msg := range s.progress[token] {
			if m = progressCode.FindStringSubmatch(msg); m != nil {
				return true
			}
		}
		return false
	})
	return m[1], m[2]
}

// approve approves (or denies) request id as the human, over the socket.
func approve(t *testing.T, d *testDaemon, id, code string, yes bool) {
	t.Helper()
	human, err := client.Dial(d.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer human.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if yes {
		err = human.Approve(ctx, id, code, "terminal")
	} else {
		err = human.Deny(ctx, id, "terminal")
	}
	if err != nil {
		t.Fatal(err)
	}
}

// isPending reports whether the daemon lists request id as waiting.
func isPending(t *testing.T, d *testDaemon, id string) bool {
	t.Helper()
	human, err := client.Dial(d.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer human.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := human.Pending(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(list, func(v protocol.PendingView) bool { return v.ID == id })
}

func TestMCPSetupErrors(t *testing.T) {
	d := startDaemon(t, journeyPolicy, nil)
	keyPath, _ := writeAgentKey(t, t.TempDir())
	cases := []struct {
		name    string
		sock    string
		key     string
		tool    string
		args    map[string]any
		code    string
		fixWant string
	}{
		{"fail/daemon-not-running", filepath.Join(t.TempDir(), "none.sock"), keyPath, "parley_status", nil, "unavailable", "parley-keyd serve"},
		{"fail/no-agent-key", d.sock, filepath.Join(t.TempDir(), "missing.key"), "parley_request_grant", map[string]any{"can": []string{"shop.order"}}, "invalid_params", "parley-grant keygen"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(protocol.SocketEnv, tc.sock)
			s := connectMCP(t, tc.key)
			text := toolErr(t, s.call(t, tc.tool, tc.args, nil), tc.code)
			if !strings.Contains(text, "\nfix: ") || !strings.Contains(text, tc.fixWant) {
				t.Errorf("%q: no fix naming %q", text, tc.fixWant)
			}
		})
	}
}

// mcpTSDir holds the TypeScript SDK client; CI runs npm ci there first.
const mcpTSDir = "testdata/mcp-ts"

// tsLine is one line the TypeScript client writes.
type tsLine struct {
	Step          string          `json:"step"`
	Tool          string          `json:"tool"`
	IsError       bool            `json:"isError"`
	Text          string          `json:"text"`
	Structured    json.RawMessage `json:"structured"`
	ProtocolError string          `json:"protocolError"`
	Names         []string        `json:"names"`
	Described     bool            `json:"described"`
	Data          any             `json:"data"`
	Instructions  string          `json:"instructions"`
	Elapsed       int64           `json:"elapsed"` // ms since the client started
}

// requireTSClient returns node's path when the TypeScript client can run,
// and skips the test otherwise (see testpeer.Unavailable). Tests call it
// before they start anything, so that the skip's reason is all they say.
func requireTSClient(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testpeer.Unavailable(t, "needs node for the TypeScript MCP client")
	}
	if _, err := os.Stat(filepath.Join(mcpTSDir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		testpeer.Unavailable(t, "needs the TypeScript MCP SDK: make test runs npm ci in cmd/parley-grant/"+mcpTSDir+" (or run it there)")
	}
	return node
}

// runTSClient runs client.mjs in mode against the real binary's
// parley-grant mcp, with env added, and passes each line it writes to
// onLine as it comes. It fails the test if the client fails or does not
// finish.
func runTSClient(t *testing.T, mode string, env []string, onLine func(tsLine)) {
	t.Helper()
	cmd := exec.Command(requireTSClient(t), "client.mjs")
	cmd.Dir = mcpTSDir
	cmd.Env = append(env, "PARLEY_GRANT="+cliBinary(t), "PARLEY_TEST_MODE="+mode)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	done := false
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var l tsLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("client line %q: %v", sc.Text(), err)
		}
		done = done || l.Step == "done"
		onLine(l)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("client: %v\nstderr: %s", err, stderr.String())
	}
	if !done {
		t.Fatalf("the client did not finish; stderr: %s", stderr.String())
	}
}

// humanReader approves the requests whose match code the client shows in a
// log message, once each, as a human who reads the code from the agent's
// screen would. The client at its defaults asks for no progress, so log
// messages are where it sees the code.
type humanReader struct {
	t     *testing.T
	d     *testDaemon
	delay func(id string) time.Duration // how long the human takes
	mu    sync.Mutex
	codes map[string]string // request id → the code the human entered
	wg    sync.WaitGroup
}

func (h *humanReader) log(l tsLine) {
	m := progressCode.FindStringSubmatch(fmt.Sprint(l.Data))
	if m == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.codes[m[1]] != "" {
		return
	}
	h.codes[m[1]] = m[2]
	wait := time.Duration(0)
	if h.delay != nil {
		wait = h.delay(m[1])
	}
	h.wg.Add(1)
	time.AfterFunc(wait, func() {
		defer h.wg.Done()
		human, err := client.Dial(h.d.sock)
		if err != nil {
			h.t.Errorf("human: %v", err)
			return
		}
		defer human.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := human.Approve(ctx, m[1], m[2], "terminal"); err != nil {
			h.t.Errorf("approve %s: %v", m[1], err)
		}
	})
}

func (h *humanReader) code(id string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.codes[id]
}

// TestMCPTypeScriptClient runs the official MCP TypeScript SDK's client at
// its default settings against the real binary's parley-grant mcp, calling
// every tool and a tool that does not exist.
func TestMCPTypeScriptClient(t *testing.T) {
	t.Parallel()
	requireTSClient(t)
	d := startDaemon(t, journeyPolicy, nil)
	keyPath, key := writeAgentKey(t, t.TempDir())
	sub := newTestKey(t)

	// A consent_required from a real service, for the consent tool.
	shopSrv := shop(t, "shop.example", d.srv.Principal())
	agent := &testservice.Agent{URL: shopSrv.URL, Service: "shop.example", Key: key}
	kc, err := client.Dial(d.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	gr, err := kc.Grant(context.Background(), key, []grant.Caveat{grant.Svc("shop.example"), grant.Can("shop.*"),
		grant.Per(grant.Money{Amount: 2000, Currency: "USD"}), grant.Exp(time.Now().Unix() + 600)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	proposals := want(t, "PROPOSALS")(agent.Intent("shop.order", order("chair", 12000), gr.Token))
	p := proposalOf(t, proposals)
	refusal := wantRefused(t, "consent_required", "")(agent.Commit(p.ID, p.Hash, gr.Token))
	dir := t.TempDir()
	consentFile, proposalsFile := filepath.Join(dir, "consent.json"), filepath.Join(dir, "proposals.json")
	os.WriteFile(consentFile, refusal.Raw, 0o600)
	os.WriteFile(proposalsFile, proposals.Raw, 0o600)

	human := &humanReader{t: t, d: d, codes: map[string]string{}}
	results := map[string]tsLine{}
	var logs []string
	runTSClient(t, "all", append(cliEnv(t, d.sock, keyPath), "PARLEY_TEST_SUBKEY="+pubOf(sub),
		"PARLEY_TEST_CONSENT="+consentFile, "PARLEY_TEST_PROPOSALS="+proposalsFile), func(l tsLine) {
		if l.Step == "log" {
			logs = append(logs, fmt.Sprint(l.Data))
			human.log(l)
			return
		}
		results[l.Step] = l
	})
	human.wg.Wait()

	res := func(step string, out any) tsLine {
		t.Helper()
		l := results[step]
		switch {
		case l.ProtocolError != "":
			t.Errorf("%s: protocol error (a tool error or result was due): %s", step, l.ProtocolError)
		case out != nil && l.IsError:
			t.Errorf("%s: tool error: %s", step, l.Text)
		case out != nil:
			if err := json.Unmarshal(l.Structured, out); err != nil {
				t.Errorf("%s: structured content %s: %v", step, l.Structured, err)
			}
		}
		return l
	}
	if l := results["tools"]; !slices.Equal(l.Names, mcpToolNames) || !l.Described {
		t.Errorf("tools %v (described %v), want %v", l.Names, l.Described, mcpToolNames)
	}
	if !strings.Contains(results["server"].Instructions, "parley_status") || !strings.Contains(results["server"].Instructions, "parley_wait") {
		t.Errorf("instructions %q", results["server"].Instructions)
	}
	var st statusOutput
	res("status", &st)
	if st.Principal != d.srv.Principal() || st.AgentKey != pubOf(key) {
		t.Errorf("status %+v", st)
	}
	var g grantOutput
	res("grant", &g)
	if tok, err := grant.Decode(g.Token); err != nil || tok.Holder() != pubOf(key) || g.Rule != "shop-auto" || g.Status != statusIssued {
		t.Errorf("grant %+v: %v", g, err)
	}
	if l := res("refused", nil); !l.IsError || !strings.HasPrefix(l.Text, "forbidden: ") || !strings.Contains(l.Text, "rule: never-bank") || !strings.Contains(l.Text, "parley_explain") {
		t.Errorf("refused: %+v", l)
	}
	if l := res("bad-argument", nil); !l.IsError || !strings.HasPrefix(l.Text, "invalid_params: ") {
		t.Errorf("bad argument: %+v", l)
	}
	// A tool that does not exist is a JSON-RPC error for the SDK, and the
	// server serves the next call.
	if l := results["unknown-tool"]; !strings.Contains(l.ProtocolError, "unknown tool") {
		t.Errorf("unknown tool: %+v", l)
	}
	var after statusOutput
	res("after-unknown-tool", &after)
	if after.Principal != d.srv.Principal() {
		t.Errorf("status after an unknown tool: %+v", after)
	}
	var ex explainOutput
	if res("explain", &ex); ex.Action != "deny" || ex.Rule != "never-bank" {
		t.Errorf("explain %+v", ex)
	}
	var ap grantOutput
	if res("approved", &ap); ap.Status != statusIssued || ap.Decision != "ask" || ap.MatchCode == "" || ap.MatchCode != human.code(ap.Request) {
		t.Errorf("approved grant %+v, the human confirmed code %q", ap, human.code(ap.Request))
	}
	if !slices.ContainsFunc(logs, func(s string) bool { return strings.Contains(s, "match code "+ap.MatchCode) }) {
		t.Errorf("no log message with the match code: %q", logs)
	}
	var at attenuateOutput
	res("attenuate", &at)
	var in inspectOutput
	if res("inspect", &in); in.Holder != pubOf(sub) || len(in.Blocks) != 2 || !in.ChainOK || at.Token == "" {
		t.Errorf("attenuate %+v, inspect %+v", at, in)
	}
	var pr proofOutput
	if res("proof", &pr); grant.VerifyProof(pr.Proof, "shop.example", "ASK", "shop.status", time.Now().Unix()) != nil {
		t.Errorf("proof %+v", pr)
	}
	var cg grantOutput
	res("consent", &cg)
	want(t, "RECEIPT")(agent.Commit(p.ID, p.Hash, cg.Token))
}

// TestMCPTypeScriptClientSlowHuman is the approval that used to fail: the
// TypeScript SDK's client, at its defaults, gives a call 60 s and does not
// let progress reset that; the daemon waits 120 s for a human. Here the
// human approves 65 s after the request appears, and the client, following
// the tools' description (parley_wait while the status is waiting), gets the
// grant. The test takes that long; it runs in parallel with the others.
func TestMCPTypeScriptClientSlowHuman(t *testing.T) {
	t.Parallel()
	requireTSClient(t)
	const humanTakes = 65 * time.Second
	d := startDaemon(t, journeyPolicy, nil)
	keyPath, _ := writeAgentKey(t, t.TempDir())
	human := &humanReader{t: t, d: d, codes: map[string]string{}, delay: func(string) time.Duration { return humanTakes }}
	var calls []tsLine
	var logs []string
	runTSClient(t, "slow", cliEnv(t, d.sock, keyPath), func(l tsLine) {
		switch l.Step {
		case "log":
			logs = append(logs, fmt.Sprint(l.Data))
			human.log(l)
		case "slow":
			calls = append(calls, l)
		}
	})
	human.wg.Wait()
	if len(calls) < 2 {
		t.Fatalf("calls %+v: want the request and at least one parley_wait", calls)
	}
	prev := 121
	for i, c := range calls {
		if c.ProtocolError != "" {
			t.Fatalf("call %d (%s): protocol error %s: the client gave up", i, c.Tool, c.ProtocolError)
		}
		var out grantOutput
		if err := json.Unmarshal(c.Structured, &out); err != nil || c.IsError {
			t.Fatalf("call %d (%s): %s %s", i, c.Tool, c.Text, c.Structured)
		}
		last := i == len(calls)-1
		switch {
		case !last && (out.Status != statusWaiting || out.SecondsLeft <= 0 || out.SecondsLeft >= prev):
			t.Errorf("call %d: %+v, want waiting with less time left than %d s", i, out, prev)
		case last && (out.Status != statusIssued || out.Token == "" || out.MatchCode != human.code(out.Request)):
			t.Errorf("last call: %+v, want the grant approved with code %s", out, human.code(out.Request))
		}
		prev = out.SecondsLeft
	}
	if got := time.Duration(calls[len(calls)-1].Elapsed) * time.Millisecond; got < humanTakes {
		t.Errorf("the grant came after %v, before the human approved", got)
	}
	// What the client was told about time was true: the request times out
	// within the daemon's 120 s, and each call returns within 45 s.
	for _, l := range logs {
		left, call, ok := waitTimes(l)
		if !ok {
			t.Errorf("log %q does not say when the request times out and when the call returns", l)
		} else if left > 120*time.Second || call > callWaitDefault*time.Second {
			t.Errorf("log %q: more time than there is", l)
		}
	}
}

var waitTimesRE = regexp.MustCompile(`times out in ((?:\d+[dhms] ?)+); this call returns within ((?:\d+[dhms] ?)+), then parley_wait waits on`)

// waitTimes reads the two times of a message about a waiting request: the
// time the request has left at the daemon, and the time the call has left.
func waitTimes(msg string) (left, call time.Duration, ok bool) {
	m := waitTimesRE.FindStringSubmatch(msg)
	if m == nil {
		return 0, 0, false
	}
	span := func(s string) time.Duration {
		d, err := duration.Parse(strings.ReplaceAll(s, " ", ""))
		if err != nil {
			return -1
		}
		return d
	}
	left, call = span(m[1]), span(m[2])
	return left, call, left > 0 && call > 0
}
