package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testdesktop"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// Issue 20 item 7: a client told to trust a socket served by another user
// (PARLEY_KEYD_USER naming it) printed that server's strings as they came.
// Here a real other OS user serves the socket and answers every verb with
// hostile text in every string field; no byte or rune of it that could
// steer a terminal may reach parley-grant's stdout or stderr, an MCP tool
// result, or the desktop approver's notification (DESIGN.md property 13).

// hostile is what the fake server puts in every string: OSC 52 (set the
// clipboard), CSI 2J (clear the screen), BEL, C1 CSI and NEL, bidi
// overrides and isolates, line and paragraph separators, NUL, CR, DEL,
// zero-width and tag characters, and a line break that forges a line.
const hostile = "\x1b]52;c;ZXZpbA==\x07\x1b[2J\u009b31m\u0085\u202eevil\u2066x\u2069\u2028\u2029\x00\r\x7f\u200b\ufeff\U000E0041\nparley-grant: FORGED"

// forbidden reports the first rune in out that could steer a terminal:
// every control but \n and \t, DEL, C1, bidi, separators, zero-width and
// tag characters, and bytes that are not UTF-8.
func forbidden(out string) (rune, int, bool) {
	for i, r := range out {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(out[i:], "\uFFFD"),
			r < 0x20 && r != '\n' && r != '\t',
			r >= 0x7f && r <= 0x9f,
			r >= 0x200b && r <= 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069,
			r == 0x2028, r == 0x2029, r == 0x061c, r == 0xfeff, r >= 0xe0000 && r <= 0xe007f:
			return r, i, true
		}
	}
	return 0, 0, false
}

func checkClean(t *testing.T, what, out string) {
	t.Helper()
	if r, i, bad := forbidden(out); bad {
		t.Errorf("%s: U+%04X reached the output at byte %d: %q", what, r, i, out[max(0, i-40):min(len(out), i+40)])
	}
	if strings.Contains(out, "\nparley-grant: FORGED") {
		t.Errorf("%s: a forged line reached the output: %q", what, out)
	}
}

// fill sets every string reachable from v to hostile, gives every slice
// and map one element, allocates every pointer, and sets numbers to
// something plausible.
func fill(v reflect.Value) {
	now := time.Now().Unix()
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			b, _ := json.Marshal(map[string]any{"summary": hostile, hostile: []any{hostile}})
			v.SetBytes(b)
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0))
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Interface:
		v.Set(reflect.ValueOf(map[string]any{hostile: []any{hostile, map[string]any{"x": hostile}}}))
	case reflect.String:
		v.SetString(hostile)
	case reflect.Int64:
		v.SetInt(now + 600)
	case reflect.Int, reflect.Int32:
		v.SetInt(3)
	case reflect.Uint32, reflect.Uint64:
		v.SetUint(3)
	case reflect.Bool:
		v.SetBool(true)
	}
}

func filled[T any]() T {
	var x T
	fill(reflect.ValueOf(&x).Elem())
	return x
}

func hostileCaveats() []grant.Caveat {
	s, _ := json.Marshal([]string{hostile})
	return []grant.Caveat{{Name: hostile, Value: s}, {Name: "svc", Value: s}, {Name: "can", Value: s}}
}

func hostileView() protocol.PendingView {
	v := filled[protocol.PendingView]()
	v.ID = "r_hostile"
	// Text is a rendering of several lines by contract (its line breaks
	// are kept: display:"lines"); every other control in it is not.
	one := strings.ReplaceAll(hostile, "\n", " ")
	v.Text = one + "\n" + one + "\n"
	v.Lines = 2
	v.Channels = []string{"terminal", "desktop", hostile}
	v.Choices = []string{"31", "47", "82"}
	v.Strong = false
	v.Created = time.Now().Unix()
	v.Scope.Caveats = hostileCaveats()
	return v
}

// hostileReplies answers one request frame: in mode "ok" with a reply of
// the kind the verb expects, in mode "error" with an ERROR.
func hostileReplies(f protocol.Frame, mode, principal string) []*protocol.Frame {
	data := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	reply := func(kind string, d any) *protocol.Frame {
		return &protocol.Frame{Parley: 1, ID: "s" + f.ID, Re: f.ID, Kind: kind, Message: hostile, Data: data(d)}
	}
	event := func() *protocol.Frame {
		ev := filled[protocol.Event]()
		ev.Code = hostile
		return &protocol.Frame{Parley: 1, ID: "e" + f.ID, Re: f.ID, Kind: protocol.KindEvent, Message: hostile, Data: data(ev)}
	}
	if f.Verb == protocol.VerbHello {
		m := filled[protocol.Manifest]()
		m.Principal = principal
		m.Protocol = 1
		return []*protocol.Frame{reply("HELLO", m)}
	}
	if mode == "error" {
		var out []*protocol.Frame
		if f.Verb == protocol.VerbGrant || f.Verb == protocol.VerbConsent {
			out = append(out, event())
		}
		for _, code := range []protocol.Code{protocol.CodeDenied} {
			out = append(out, &protocol.Frame{Parley: 1, ID: "x" + f.ID, Re: f.ID, Kind: protocol.KindError, Code: code,
				Message: hostile, Fix: hostile, Rule: hostile, Retry: 3})
		}
		return out
	}
	switch f.Verb {
	case protocol.VerbGrant, protocol.VerbConsent:
		res := filled[protocol.GrantResult]()
		res.Caveats = hostileCaveats()
		res.Decision = "ask"
		return []*protocol.Frame{event(), reply(protocol.KindGrant, res)}
	case protocol.VerbExplain:
		e := filled[protocol.Explanation]()
		e.Caveats = hostileCaveats()
		return []*protocol.Frame{reply(protocol.KindExplain, e)}
	case protocol.VerbPending:
		return []*protocol.Frame{reply(protocol.KindPending, map[string]any{"pending": []protocol.PendingView{hostileView()}})}
	case protocol.VerbAudit:
		p := filled[protocol.AuditPage]()
		p.More = false
		return []*protocol.Frame{reply(protocol.KindAudit, p)}
	case protocol.VerbLock:
		return []*protocol.Frame{reply("OK", filled[protocol.LockView]())}
	case protocol.VerbWatch:
		v := hostileView()
		return []*protocol.Frame{
			{Parley: 1, ID: "w1", Re: f.ID, Kind: protocol.KindEvent, Message: "pending", Data: data(v)},
		}
	}
	return []*protocol.Frame{reply("OK", nil)}
}

// TestHostileServerHelper is the fake server, run by TestHostileServer as
// another OS user. It is not a test of its own.
func TestHostileServerHelper(t *testing.T) {
	sock := os.Getenv("PARLEY_HOSTILE_SOCK")
	if sock == "" {
		t.Skip("run by TestHostileServer")
	}
	mode, principal := os.Getenv("PARLEY_HOSTILE_MODE"), os.Getenv("PARLEY_HOSTILE_PRINCIPAL")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(sock, 0o777)
	fmt.Println("ready")
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			r := bufio.NewReader(c)
			for {
				line, err := r.ReadBytes('\n')
				if err != nil {
					return
				}
				var f protocol.Frame
				if json.Unmarshal(line, &f) != nil {
					continue
				}
				for _, rf := range hostileReplies(f, mode, principal) {
					b, _ := json.Marshal(rf)
					c.Write(append(b, '\n'))
				}
			}
		}()
	}
}

// startHostileServer runs the fake server as a new OS user and returns its
// socket and the user's name.
func startHostileServer(t *testing.T, mode, principal string) (sock, name string) {
	t.Helper()
	testpeer.RequirePeers(t)
	name = testpeer.Name("evil")
	uid, gid := testpeer.EnsureUser(t, name)
	dir := filepath.Join(testpeer.SharedDir(t), mode)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(dir, int(uid), int(gid))
	sock = filepath.Join(dir, "agent.sock")
	cmd := testpeer.Helper(t, uid, gid, nil, "TestHostileServerHelper",
		"PARLEY_HOSTILE_SOCK="+sock, "PARLEY_HOSTILE_MODE="+mode, "PARLEY_HOSTILE_PRINCIPAL="+principal)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if s.Text() == "ready" {
				ready <- s.Text()
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("the hostile server did not start")
	}
	return sock, name
}

func TestHostileServer(t *testing.T) {
	agentKey := newTestKey(t)
	principal := pubOf(newTestKey(t))
	keyPath, _ := writeAgentKey(t, t.TempDir())
	dir := t.TempDir()
	proposal := `{"id":"p1","capability":"shop.order","summary":"x","effects":[],"cost":null,"risk":"low","undo":null,"expires":` +
		fmt.Sprint(time.Now().Unix()+600) + `}`
	hash, _ := grant.ProposalHash([]byte(proposal))
	consent := fmt.Sprintf(`{"proposal":"p1","hash":%q,"service":"shop.example","capability":"shop.order","principal":%q,"summary":"x","expires":%d}`,
		hash, principal, time.Now().Unix()+600)
	consentFile, proposalFile := filepath.Join(dir, "consent.json"), filepath.Join(dir, "proposal.json")
	os.WriteFile(consentFile, []byte(consent), 0o600)
	os.WriteFile(proposalFile, []byte(proposal), 0o600)
	_ = agentKey

	commands := [][]string{
		{"issue", "--svc", "shop.example", "--can", "shop.*"},
		{"issue", "--json", "--svc", "shop.example", "--can", "shop.*"},
		{"explain", "--svc", "shop.example", "--can", "shop.*"},
		{"explain", "--json", "--svc", "shop.example", "--can", "shop.*"},
		{"consent", "--service", "shop.example", "--consent", consentFile, "--proposal", proposalFile},
		{"consent", "--json", "--service", "shop.example", "--consent", consentFile, "--proposal", proposalFile},
		{"status"},
		{"status", "--json"},
		{"pending"},
		{"pending", "--json"},
		{"approve", "r_hostile", "--code", "47"},
		{"deny", "r_hostile"},
		{"audit"},
		{"audit", "--json"},
		{"lock", "--reason", "test"},
		{"unlock"},
	}
	for _, mode := range []string{"ok", "error"} {
		t.Run(mode, func(t *testing.T) {
			sock, user := startHostileServer(t, mode, principal)
			env := append(cliEnv(t, sock, keyPath), protocol.DaemonUserEnv+"="+user)
			shown := 0
			defer func() {
				// Most commands show some of what the server said; if
				// none did, the checks above checked nothing.
				if shown < len(commands)/2 {
					t.Errorf("only %d of %d commands showed the server's text", shown, len(commands))
				}
			}()
			for _, args := range commands {
				t.Run(strings.Join(args, " "), func(t *testing.T) {
					cmd := exec.Command(cliBinary(t), args...)
					cmd.Env = env
					var stdout, stderr strings.Builder
					cmd.Stdout, cmd.Stderr = &stdout, &stderr
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					cmd.Start()
					done := make(chan error, 1)
					go func() { done <- cmd.Wait() }()
					select {
					case err := <-done:
						t.Logf("exit %v\nstdout: %q\nstderr: %q", err, stdout.String(), stderr.String())
					case <-ctx.Done():
						cmd.Process.Kill()
						<-done
						t.Fatalf("did not finish\nstdout: %q\nstderr: %q", stdout.String(), stderr.String())
					}
					if strings.Contains(stdout.String()+stderr.String(), "evil") {
						shown++
					}
					checkClean(t, "stdout", stdout.String())
					checkClean(t, "stderr", stderr.String())
					if slicesContains(args, "--json") && strings.TrimSpace(stdout.String()) != "" {
						dec := json.NewDecoder(strings.NewReader(stdout.String()))
						for dec.More() {
							var x any
							if err := dec.Decode(&x); err != nil {
								t.Errorf("--json output is not JSON: %v\n%s", err, stdout.String())
								break
							}
						}
					}
				})
			}
		})
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestHostileServerMCP: the MCP tools' results carry no such character
// either, in their text or their structured content, as the MCP client
// decodes them.
func TestHostileServerMCP(t *testing.T) {
	principal := pubOf(newTestKey(t))
	keyPath, _ := writeAgentKey(t, t.TempDir())
	proposal := map[string]any{"id": "p1", "capability": "shop.order", "summary": "x", "effects": []any{}, "cost": nil,
		"risk": "low", "undo": nil, "expires": time.Now().Unix() + 600}
	pb, _ := json.Marshal(proposal)
	hash, _ := grant.ProposalHash(pb)
	consent := map[string]any{"proposal": "p1", "hash": hash, "service": "shop.example", "capability": "shop.order",
		"principal": principal, "summary": "x", "expires": time.Now().Unix() + 600}
	calls := []struct {
		tool string
		args map[string]any
	}{
		{"parley_status", map[string]any{}},
		{"parley_request_grant", map[string]any{"svc": []string{"shop.example"}, "can": []string{"shop.*"}}},
		{"parley_explain", map[string]any{"svc": []string{"shop.example"}, "can": []string{"shop.*"}}},
		{"parley_request_consent", map[string]any{"service": "shop.example", "consent": consent, "proposal": proposal}},
	}
	for _, mode := range []string{"ok", "error"} {
		t.Run(mode, func(t *testing.T) {
			sock, user := startHostileServer(t, mode, principal)
			t.Setenv(protocol.SocketEnv, sock)
			t.Setenv(protocol.DaemonUserEnv, user)
			s := connectMCP(t, keyPath)
			for _, c := range calls {
				res := s.call(t, c.tool, c.args, nil)
				var all []string
				for _, ct := range res.Content {
					b, _ := json.Marshal(ct)
					var x any
					json.Unmarshal(b, &x)
					collectStrings(x, &all)
				}
				collectStrings(res.StructuredContent, &all)
				all = append(all, s.messages())
				joined := strings.Join(all, "\n")
				t.Logf("%s: %q", c.tool, joined)
				if !strings.Contains(joined, "evil") {
					t.Errorf("%s: the hostile text was not in the result at all: %q", c.tool, joined)
				}
				for _, str := range all {
					checkClean(t, c.tool, str)
				}
			}
		})
	}
}

func collectStrings(v any, out *[]string) {
	switch x := v.(type) {
	case string:
		*out = append(*out, x)
	case []any:
		for _, e := range x {
			collectStrings(e, out)
		}
	case map[string]any:
		for k, e := range x {
			*out = append(*out, k)
			collectStrings(e, out)
		}
	default:
		if v != nil {
			b, _ := json.Marshal(v)
			var y any
			if json.Unmarshal(b, &y) == nil && !reflect.DeepEqual(y, v) {
				collectStrings(y, out)
			}
		}
	}
}

// TestHostileServerApprover: the desktop approver, watching the hostile
// server, shows its request on a real notification server (dunst on a
// real session bus) with no such character in the summary or body.
func TestHostileServerApprover(t *testing.T) {
	principal := pubOf(newTestKey(t))
	sock, user := startHostileServer(t, "ok", principal)
	s := testdesktop.Start(t)
	env := append(cliEnv(t, sock, ""), protocol.DaemonUserEnv+"="+user, "XDG_STATE_HOME="+t.TempDir(), "XDG_RUNTIME_DIR="+t.TempDir())
	env = append(env, s.Env()...)
	cmd := exec.Command(cliBinary(t), "approver")
	cmd.Env = env
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	s.WaitDisplayed(t, 1)
	s.CloseAll(t)
	var bodies []string
	for _, h := range s.History(t) {
		bodies = append(bodies, h.Summary, h.Body)
	}
	joined := strings.Join(bodies, "\n")
	t.Logf("notifications: %q\napprover: %s", joined, stderr.String())
	if !strings.Contains(joined, "evil") {
		t.Fatalf("the hostile request was not shown: %q", joined)
	}
	for _, b := range bodies {
		checkClean(t, "notification", b)
	}
	checkClean(t, "approver stderr", stderr.String())
}
