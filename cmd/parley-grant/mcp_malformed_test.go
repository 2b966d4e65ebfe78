package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCPMalformedCalls attacks the tools as a confused or hostile client
// would, with the Go SDK's client: each malformed call is a JSON-RPC error
// or a tool error, and the next call is served.
func TestMCPMalformedCalls(t *testing.T) {
	d := startDaemon(t, journeyPolicy, nil)
	t.Setenv("PARLEY_KEYD_SOCKET", d.sock)
	keyPath, _ := writeAgentKey(t, t.TempDir())
	s := connectMCP(t, keyPath)
	served := func(t *testing.T) {
		t.Helper()
		var st statusOutput
		ok(t, s.call(t, "parley_status", map[string]any{}, nil), &st)
		if st.Principal == "" {
			t.Fatalf("status after the bad call: %+v", st)
		}
	}
	cases := []struct {
		name string
		tool string
		args any
	}{
		{"fail/wrong-type", "parley_request_grant", map[string]any{"can": 5}},
		{"fail/wrong-type-in-list", "parley_request_grant", map[string]any{"svc": []any{1, true}}},
		{"fail/missing-required", "parley_inspect", map[string]any{}},
		{"fail/extra-argument", "parley_proof", map[string]any{"aud": "a", "verb": "ASK", "target": "x", "evil": "1"}},
		{"fail/null-argument", "parley_wait", map[string]any{"request": nil}},
		{"fail/wait-out-of-range", "parley_wait", map[string]any{"request": "r_x", "wait": 3600}},
		{"fail/wait-negative", "parley_request_grant", map[string]any{"can": []string{"mail.read"}, "wait": -1}},
		{"fail/wait-not-integer", "parley_request_grant", map[string]any{"wait": 1.5}},
		{"fail/unknown-request", "parley_wait", map[string]any{"request": "r_none"}},
		{"fail/huge-string", "parley_inspect", map[string]any{"token": strings.Repeat("A", 2<<20)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := s.call(t, tc.tool, tc.args, nil)
			text := resultText(res)
			code, _, _ := strings.Cut(text, ": ")
			if !res.IsError || (code != "invalid_params" && code != "not_found") {
				t.Fatalf("got isError=%v %q, want a tool error with a code", res.IsError, text)
			}
			served(t)
		})
	}

	t.Run("fail/unknown-tool", func(t *testing.T) {
		// No tool of that name: a JSON-RPC error (the MCP spec's answer),
		// and the server goes on. This used to panic the server.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: "parley_approve", Arguments: map[string]any{}})
		if err == nil || !strings.Contains(err.Error(), "unknown tool") {
			t.Fatalf("unknown tool: %v, want a JSON-RPC error naming it", err)
		}
		served(t)
	})
}

// rawMCP is parley-grant mcp, the real binary, spoken to in raw JSON-RPC
// lines, as a client nobody tested against might.
type rawMCP struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	lines []map[string]any
	more  chan struct{}
	done  chan struct{}
	err   lockedBuffer
}

func startRawMCP(t *testing.T, env []string) *rawMCP {
	t.Helper()
	r := &rawMCP{t: t, more: make(chan struct{}, 1), done: make(chan struct{})}
	r.cmd = exec.Command(cliBinary(t), "mcp")
	r.cmd.Env = env
	r.cmd.Stderr = &r.err
	var err error
	if r.stdin, err = r.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(r.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 8<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = map[string]any{"unparsable": sc.Text()}
			}
			r.mu.Lock()
			r.lines = append(r.lines, m)
			r.mu.Unlock()
			select {
			case r.more <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() { r.cmd.Process.Kill(); r.cmd.Wait() })
	return r
}

func (r *rawMCP) send(line string) {
	r.t.Helper()
	if _, err := io.WriteString(r.stdin, line+"\n"); err != nil {
		r.t.Fatalf("write to parley-grant mcp: %v (it exited?)\nstderr: %s", err, r.err.String())
	}
}

// next waits for the first line after the first `after` lines that match
// accepts, and returns it with its index.
func (r *rawMCP) next(after int, what string, accepts func(map[string]any) bool) (map[string]any, int) {
	r.t.Helper()
	deadline := time.After(20 * time.Second)
	ended := false
	for {
		r.mu.Lock()
		for i := after; i < len(r.lines); i++ {
			if accepts(r.lines[i]) {
				m := r.lines[i]
				r.mu.Unlock()
				return m, i
			}
		}
		lines := slices.Clone(r.lines)
		r.mu.Unlock()
		if ended {
			r.t.Fatalf("parley-grant mcp closed stdout before %s; lines: %v\nstderr: %s", what, lines, r.err.String())
		}
		select {
		case <-r.more:
		case <-r.done:
			ended = true // look once more at what it wrote
		case <-deadline:
			r.t.Fatalf("no %s from parley-grant mcp; lines: %v\nstderr: %s", what, lines, r.err.String())
		}
	}
}

// reply waits for the response to request id.
func (r *rawMCP) reply(id any) map[string]any {
	r.t.Helper()
	want, _ := json.Marshal(id)
	m, _ := r.next(0, fmt.Sprintf("reply to %s", want), func(m map[string]any) bool {
		_, hasMethod := m["method"]
		got, _ := json.Marshal(m["id"])
		return !hasMethod && string(got) == string(want)
	})
	return m
}

func (r *rawMCP) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.lines)
}

// callTool sends tools/call and returns the reply.
func (r *rawMCP) callTool(id int, name string, args any) map[string]any {
	r.t.Helper()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call",
		"params": map[string]any{"name": name, "arguments": args}})
	r.send(string(b))
	return r.reply(id)
}

// toolText returns a tools/call reply's text and whether it is a tool
// error; a JSON-RPC error fails the test.
func toolText(t *testing.T, m map[string]any) (string, bool) {
	t.Helper()
	res, ok := m["result"].(map[string]any)
	if !ok {
		t.Fatalf("not a tool result: %v", m)
	}
	var b strings.Builder
	for _, c := range res["content"].([]any) {
		b.WriteString(c.(map[string]any)["text"].(string))
	}
	isErr, _ := res["isError"].(bool)
	return b.String(), isErr
}

func rpcErrorCode(m map[string]any) float64 {
	e, ok := m["error"].(map[string]any)
	if !ok {
		return 0
	}
	c, _ := e["code"].(float64)
	return c
}

// TestMCPRawJSONRPC sends the real binary what no SDK client would: lines
// that are not JSON, not one message, or not JSON-RPC; a tool name that does
// not exist; arguments of every wrong shape; a call cancelled while it waits
// for a human, and calls after it. Every line gets its JSON-RPC error or
// tool error and the server serves the next one; it never crashes, and it
// exits cleanly when stdin ends.
func TestMCPRawJSONRPC(t *testing.T) {
	d := startDaemon(t, journeyPolicy, nil)
	keyPath, _ := writeAgentKey(t, t.TempDir())
	r := startRawMCP(t, cliEnv(t, d.sock, keyPath))
	r.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if _, ok := r.reply(0)["result"]; !ok {
		t.Fatal("no initialize result")
	}
	r.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	id := 0
	served := func(t *testing.T) {
		t.Helper()
		id++
		text, isErr := toolText(t, r.callTool(id, "parley_status", map[string]any{}))
		if isErr || !strings.Contains(text, "principal ed25519:") {
			t.Fatalf("status after the bad line: %q", text)
		}
	}

	lines := []struct {
		name string
		line string
		code float64 // the JSON-RPC error code, with id null
	}{
		{"fail/not-json", `garbage{`, -32700},
		{"fail/two-values", `{"jsonrpc":"2.0"}{"x":1}`, -32700},
		{"fail/batch", `[{"jsonrpc":"2.0","id":99,"method":"tools/list"}]`, -32600},
		{"fail/empty-batch", `[]`, -32600},
		{"fail/scalar", `42`, -32600},
		{"fail/no-version", `{"id":98,"method":"tools/list"}`, -32600},
		{"fail/object-id", `{"jsonrpc":"2.0","id":{},"method":"tools/list"}`, -32600},
		{"fail/invalid-utf8", "{\"jsonrpc\":\"2.0\",\"id\":97,\"method\":\"\xff\"}", -32601},
	}
	for _, tc := range lines {
		t.Run(tc.name, func(t *testing.T) {
			n := r.count()
			r.send(tc.line)
			m, _ := r.next(n, "an error for the line", func(m map[string]any) bool { return m["error"] != nil })
			if got := rpcErrorCode(m); got != tc.code {
				t.Errorf("error %v, want code %v", m, tc.code)
			}
			served(t)
		})
	}

	t.Run("fail/too-long", func(t *testing.T) {
		n := r.count()
		r.send(`{"jsonrpc":"2.0","id":96,"method":"tools/list","params":{"x":"` + strings.Repeat("A", maxMCPLine) + `"}}`)
		m, _ := r.next(n, "an error for the line", func(m map[string]any) bool { return m["error"] != nil })
		if rpcErrorCode(m) != -32600 || !strings.Contains(fmt.Sprint(m), "too large") {
			t.Errorf("error %v, want message too large", m)
		}
		served(t)
	})

	calls := []struct {
		name     string
		params   string // the params object, raw
		rpcCode  float64
		toolCode string
	}{
		{"fail/unknown-tool", `{"name":"parley_approve","arguments":{}}`, -32602, ""},
		{"fail/params-not-object", `"parley_status"`, -32602, ""},
		{"fail/arguments-not-object", `{"name":"parley_inspect","arguments":[1,2]}`, 0, "invalid_params"},
		{"fail/missing-arguments", `{"name":"parley_inspect"}`, 0, "invalid_params"},
		{"fail/wrong-type", `{"name":"parley_inspect","arguments":{"token":5}}`, 0, "invalid_params"},
		{"fail/extra-argument", `{"name":"parley_status","arguments":{"as":"root"}}`, 0, "invalid_params"},
		{"fail/bad-caveat", `{"name":"parley_request_grant","arguments":{"exp":"soon"}}`, 0, "invalid_params"},
		{"fail/no-such-request", `{"name":"parley_wait","arguments":{"request":"r_0"}}`, 0, "not_found"},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			id++
			r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":%s}`, id, tc.params))
			m := r.reply(id)
			if tc.rpcCode != 0 {
				if got := rpcErrorCode(m); got != tc.rpcCode {
					t.Errorf("reply %v, want JSON-RPC error %v", m, tc.rpcCode)
				}
			} else if text, isErr := toolText(t, m); !isErr || !strings.HasPrefix(text, tc.toolCode+": ") {
				t.Errorf("reply %q (isError %v), want a tool error %s", text, isErr, tc.toolCode)
			}
			served(t)
		})
	}

	t.Run("ok/cancel-then-call", func(t *testing.T) {
		// A call that waits for a human, cancelled by the client: the
		// request still waits, and the calls after it are served: a
		// second cancel, a cancel of nothing, a status, and a wait that
		// gets the grant once the human approves.
		id++
		waitID := id
		n := r.count()
		r.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"parley_request_grant","arguments":{"can":["mail.read"]},"_meta":{"progressToken":"pt"}}}`, waitID))
		m, _ := r.next(n, "a progress notification", func(m map[string]any) bool { return m["method"] == "notifications/progress" })
		p := progressCode.FindStringSubmatch(fmt.Sprint(m["params"].(map[string]any)["message"]))
		if p == nil {
			t.Fatalf("progress without the match code: %v", m)
		}
		req, code := p[1], p[2]
		r.send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d,"reason":"user stop"}}`, waitID))
		r.send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`, waitID))
		r.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"nobody"}}`)
		served(t)
		if !isPending(t, d, req) {
			t.Fatalf("request %s was withdrawn with the call", req)
		}
		approve(t, d, req, code, true)
		id++
		if text, isErr := toolText(t, r.callTool(id, "parley_wait", map[string]any{"request": req})); isErr || !strings.Contains(text, "token: pg1.") {
			t.Fatalf("wait after approval: %q", text)
		}
		// The cancelled call's answer, if the client still reads it, is a
		// tool error that says what became of the request.
		text, isErr := toolText(t, r.reply(waitID))
		if !isErr || !strings.HasPrefix(text, "cancelled: ") || !strings.Contains(text, "still waits") {
			t.Errorf("the cancelled call answered %q", text)
		}
	})

	// End of input: the server exits, cleanly.
	r.stdin.Close()
	select {
	case <-r.done:
	case <-time.After(20 * time.Second):
		t.Fatal("parley-grant mcp did not exit at the end of its input")
	}
	if err := r.cmd.Wait(); err != nil {
		t.Errorf("parley-grant mcp: %v\nstderr: %s", err, r.err.String())
	}
	if strings.Contains(r.err.String(), "panic") || strings.Contains(r.err.String(), "internal error") {
		t.Errorf("stderr: %s", r.err.String())
	}
}
