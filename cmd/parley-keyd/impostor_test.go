package main

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// impostorHelperEnv tells TestImpostorHelper where to listen.
const impostorHelperEnv = "PARLEY_IMPOSTOR"

// TestImpostorHelper runs as the stranger in a child process: it takes over
// the socket path (removing what is there, which a folder writable by
// others allows), serves it as parley-keyd would, and prints "listening",
// then for every frame a client sends "got VERB" (and "proof" when the
// frame carries a proof of the holder key). It answers HELLO with a
// manifest naming a principal of its own, so that a client goes on to send
// its request.
func TestImpostorHelper(t *testing.T) {
	sock := os.Getenv(impostorHelperEnv)
	if sock == "" {
		return // an ordinary test run: this runs only as a helper process
	}
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Chmod(sock, 0o666)
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		fmt.Printf(format+"\n", args...)
		mu.Unlock()
	}
	say("listening")
	for {
		nc, err := ln.Accept()
		if err != nil {
			os.Exit(0)
		}
		go func() {
			defer nc.Close()
			br := bufio.NewReader(nc)
			for {
				line, err := br.ReadBytes('\n')
				if err != nil {
					return
				}
				var f protocol.Frame
				json.Unmarshal(line, &f)
				if f.Proof != nil {
					say("got %s proof", f.Verb)
				} else {
					say("got %s", f.Verb)
				}
				if f.Verb == protocol.VerbHello {
					data, _ := json.Marshal(protocol.Manifest{Principal: grant.FormatPublicKey(pub), Caller: protocol.ManifestCaller{Roles: []string{"agent", "approver"}}})
					b, _ := protocol.EncodeFrame(&protocol.Frame{ID: "r" + f.ID, Re: f.ID, Kind: protocol.KindBrief, Data: data})
					nc.Write(b)
				}
			}
		}()
	}
}

// TestLimitsImpostor is the other half of item 8: the stranger, a user the
// daemon does not serve, has taken over the socket path. The agent's
// parley-grant, the human's and the MCP binding check who serves the socket
// before they send anything that matters, and say whom they found.
func TestLimitsImpostor(t *testing.T) {
	e := newE2E(t)
	open := filepath.Join(e.base, "open")
	os.Mkdir(open, 0o755)
	os.Chmod(open, 0o777|os.ModeSticky)
	e.sock = filepath.Join(open, "agent.sock")
	imp := &agentRun{t: t, done: make(chan struct{})}
	imp.cmd = testpeer.Helper(t, e.stranger.uid, e.stranger.gid, nil, "TestImpostorHelper", impostorHelperEnv+"="+e.sock)
	out, err := imp.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	imp.cmd.Stderr = os.Stderr
	if err := imp.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(imp.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			imp.mu.Lock()
			imp.lines = append(imp.lines, sc.Text())
			imp.mu.Unlock()
		}
	}()
	t.Cleanup(imp.kill)
	imp.waitLines("the impostor to listen", func(l []string) bool { return countPrefix(l, "listening") > 0 })

	for _, tc := range []struct {
		who  ids
		args []string
	}{
		{e.agent, []string{"issue", "--key", e.agentK, "--svc", "cal.example", "--can", "calendar.*", "--exp", "30m"}},
		{e.agent, []string{"status"}},
		{e.human, []string{"approve", "r_abcdefgh", "--code", "42"}},
		{e.human, []string{"pending"}},
	} {
		r := e.tryFor(10*time.Second, tc.who, "parley-grant", tc.args...)
		if r.code != 8 || !strings.Contains(r.stderr, e2eStrangerUser) {
			t.Errorf("parley-grant %s: exit %d, stderr %q; want 8, naming the user that serves the socket", tc.args[0], r.code, r.stderr)
		}
		if tc.args[0] == "issue" {
			t.Logf("parley-grant issue: %s", r.stderr)
		}
	}
	// The MCP binding, over stdio as an agent client runs it.
	mcp := testpeer.RunAs(e.agent.uid, e.agent.gid, nil, filepath.Join(e.bin, "parley-grant"), "mcp", "--key", e.agentK)
	mcp.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", protocol.SocketEnv + "=" + e.sock, protocol.DaemonUserEnv + "=" + e2eDaemonUser}
	in, err := mcp.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	mcpOut, err := mcp.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := mcp.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Close(); mcp.Wait() }()
	in.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}
{"jsonrpc":"2.0","method":"notifications/initialized"}
{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"parley_status","arguments":{}}}
`))
	answer := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(mcpOut)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), `{"jsonrpc":"2.0","id":2,`) {
				answer <- sc.Text()
				return
			}
		}
		close(answer)
	}()
	select {
	case l, ok := <-answer:
		var m struct {
			Result struct {
				IsError bool `json:"isError"`
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"result"`
		}
		if !ok || json.Unmarshal([]byte(l), &m) != nil || !m.Result.IsError || len(m.Result.Content) == 0 ||
			!strings.Contains(m.Result.Content[0].Text, e2eStrangerUser) {
			t.Errorf("parley_status over MCP: %q; want an error naming the user that serves the socket", l)
		}
	case <-time.After(30 * time.Second):
		t.Error("the MCP binding did not answer parley_status")
	}
	if got := imp.snapshot(); len(got) > 1 {
		t.Errorf("the impostor received: %q", got[1:])
	}
}

// tryFor is try with a deadline: a command still running after d is
// killed and reported with exit code -1.
func (e *e2e) tryFor(d time.Duration, who ids, bin string, args ...string) result {
	cmd := testpeer.RunAs(who.uid, who.gid, nil, filepath.Join(e.bin, bin), args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "USER=x", protocol.SocketEnv + "=" + e.sock, protocol.DaemonUserEnv + "=" + e2eDaemonUser}
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return result{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
	case <-time.After(d):
		cmd.Process.Kill()
		<-done
		return result{out.String(), errb.String() + "(killed after " + d.String() + ")", -1}
	}
}
