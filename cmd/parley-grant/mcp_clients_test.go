package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// TestMCPGoClientLogLevel runs the official Go SDK's client the way its
// documentation shows: parley-grant mcp as a command, with the socket in the
// server's arguments rather than in the environment, and the log level set
// once for the session with SetLoggingLevel, not on every request. The match
// code of a request that waits for a human must reach it as a log message.
func TestMCPGoClientLogLevel(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, journeyPolicy, nil)
	keyPath, _ := writeAgentKey(t, t.TempDir())
	cmd := exec.Command(cliBinary(t), "mcp", "--socket", d.sock, "--key", keyPath)
	// The client's own environment has neither the socket nor the key.
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	var mu sync.Mutex
	var logs []string
	c := mcp.NewClient(&mcp.Implementation{Name: "parley-go-client", Version: "1"}, &mcp.ClientOptions{
		//lint:ignore SA1019 the match code reaches clients without progress as a log message; this checks it does
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			mu.Lock()
			defer mu.Unlock()
			s, _ := r.Params.Data.(string)
			logs = append(logs, s)
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	//lint:ignore SA1019 as above
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan callResult, 1)
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "parley_request_grant",
			Arguments: map[string]any{"can": []string{"mail.read"}, "wait": 20}})
		done <- callResult{"parley_request_grant", res, err}
	}()
	var id, code string
	waitUntil(t, "a log message with the match code", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range logs {
			if m := progressCode.FindStringSubmatch(l); m != nil {
				id, code = m[1], m[2]
				return true
			}
		}
		return false
	})
	approve(t, d, id, code, true)
	var out grantOutput
	ok(t, (<-done).check(t), &out)
	if out.Decision != "ask" || out.MatchCode != code {
		t.Errorf("grant %+v, want one approved with code %s", out, code)
	}
	if !strings.Contains(strings.Join(logs, "\n"), "match code "+code) {
		t.Errorf("logs %q", logs)
	}
}

// TestMCPExplainNoRule checks the words for a request that no rule covers:
// it is refused by no rule, which the text says once, and names no empty
// rule.
func TestMCPExplainNoRule(t *testing.T) {
	d := startDaemon(t, journeyPolicy, nil)
	t.Setenv(protocol.SocketEnv, d.sock)
	keyPath, _ := writeAgentKey(t, t.TempDir())
	s := connectMCP(t, keyPath)
	var ex explainOutput
	res := s.call(t, "parley_explain", map[string]any{"can": []string{"weather.read"}}, nil)
	ok(t, res, &ex)
	text := resultText(res)
	if ex.Action != "deny" || ex.Rule != "" || !strings.HasPrefix(text, `Refused: no rule covers "weather.read"`) || strings.Contains(text, `rule ""`) {
		t.Errorf("explain %+v, text %q", ex, text)
	}
}

// TestMCPTypeScriptSkipLine runs the TypeScript client's test where node is
// missing: it skips at once, before it starts a daemon, so the one line it
// leaves is its reason, with no daemon's log lines in it.
func TestMCPTypeScriptSkipLine(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMCPTypeScriptClient$", "-test.v", "-test.count=1")
	cmd.Env = []string{"PATH=" + t.TempDir(), "HOME=" + t.TempDir(), "TMPDIR=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var said []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "=== ") && !strings.HasPrefix(l, "--- ") && l != "PASS" && !strings.HasPrefix(l, "ok ") {
			said = append(said, l)
		}
	}
	if !strings.Contains(string(out), "--- SKIP: TestMCPTypeScriptClient") || len(said) != 1 || !strings.Contains(said[0], "needs node") {
		t.Errorf("the skipped test said %q, want its reason alone:\n%s", said, out)
	}
}

// TestMCPTypeScriptDocumented starts parley-grant mcp from the TypeScript
// SDK as docs/cli.md shows: the socket (not the default one) and the key in
// the arguments, no env, so the server has only the SDK's default
// environment. It reaches the daemon.
func TestMCPTypeScriptDocumented(t *testing.T) {
	t.Parallel()
	requireTSClient(t)
	d := startDaemon(t, journeyPolicy, nil)
	keyPath, _ := writeAgentKey(t, t.TempDir())
	var status *tsLine
	runTSClient(t, "documented", []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(),
		"PARLEY_TEST_SOCKET=" + d.sock, "PARLEY_TEST_KEY=" + keyPath}, func(l tsLine) {
		if l.Step == "status" {
			status = &l
		}
	})
	if status == nil || status.IsError || status.ProtocolError != "" || !strings.Contains(string(status.Structured), d.srv.Principal()) {
		t.Fatalf("parley_status: %+v", status)
	}
}
