package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// TestMCPRemembered: once the human approved a grant request with
// remember, parley_request_grant within it returns a fresh grant at once
// (decision remembered, its id and end), parley_remembered lists the
// agent's own, parley_forget ends it, and the next request waits for a
// human again. Forgetting an id that is not the agent's is not_found.
func TestMCPRemembered(t *testing.T) {
	d := startDaemon(t, rememberPolicy, nil)
	t.Setenv(protocol.SocketEnv, d.sock)
	keyPath, key := writeAgentKey(t, t.TempDir())
	s := connectMCP(t, keyPath)
	args := map[string]any{"svc": []string{"mail.example"}, "can": []string{"mail.read"}, "exp": "5m", "wait": 20}

	first := s.start("parley_request_grant", args, "g1")
	id, code := matchFromProgress(t, s, "g1")
	human, err := client.Dial(d.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer human.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := human.ApproveWith(ctx, id, code, "terminal", client.ApproveOptions{Remember: "1h"}); err != nil {
		t.Fatal(err)
	}
	var out grantOutput
	ok(t, (<-first).check(t), &out)

	start := time.Now()
	ok(t, s.call(t, "parley_request_grant", args, nil), &out)
	if out.Status != statusIssued || out.Decision != "remembered" || !strings.HasPrefix(out.Remembered, "m_") || out.Until < start.Unix()+3500 {
		t.Fatalf("under the remembered approval: %+v", out)
	}
	if tok, err := grant.Decode(out.Token); err != nil || tok.Holder() != pubOf(key) {
		t.Fatalf("token: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("the remembered grant took %s", time.Since(start))
	}

	var list rememberedOutput
	ok(t, s.call(t, "parley_remembered", map[string]any{}, nil), &list)
	if len(list.Remembered) != 1 || list.Remembered[0].ID != out.Remembered || list.Remembered[0].Agent != "mailer" || list.Remembered[0].Issued < 1 {
		t.Fatalf("parley_remembered: %+v", list)
	}

	toolErr(t, s.call(t, "parley_forget", map[string]any{"id": "m_notmine"}, nil), string(protocol.CodeNotFound))
	var f forgetOutput
	ok(t, s.call(t, "parley_forget", map[string]any{"id": out.Remembered, "reason": "task done"}, nil), &f)
	ok(t, s.call(t, "parley_remembered", map[string]any{}, nil), &list)
	if len(list.Remembered) != 0 {
		t.Fatalf("still remembered after parley_forget: %+v", list)
	}
	args["wait"] = 1
	var again grantOutput
	ok(t, s.call(t, "parley_request_grant", args, nil), &again)
	if again.Status != statusWaiting {
		t.Fatalf("after forget: %+v", again)
	}
}
