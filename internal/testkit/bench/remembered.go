package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// sysRemembered is a GRANT issued under a remembered approval (issue 24):
// the rule asks a human, who approved one request and had it remembered,
// so that the same request is issued at once. Its latency, set against
// the auto grants of sysKeyd, is the cost of the check.
const sysRemembered = "parley-keyd, remembered approval"

// rememberedPolicy is the bench policy with the calendar rule asking a
// human and allowing approvals to be remembered.
var rememberedPolicy = strings.Replace(benchPolicy, `action = "auto"`, `action = "ask"
remember = "8h"
remember_exp = "10m"`, 1)

func init() { extraSystems = append(extraSystems, rememberedSystems) }

// rememberedSystems starts a daemon of its own, whose user is both agent
// and approver, has one calendar request approved and remembered, and
// measures the same request under it.
func rememberedSystems(e *benchEnv) ([]*system, error) {
	u, err := user.Current()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(e.dir, "remembered")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	state, sock, err := initState(e.bin, dir)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(state, "config.toml")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, err
	}
	who := fmt.Sprintf("[%q]", u.Username)
	text := strings.Replace(string(cfg), "approver_users = []", "approver_users = "+who, 1)
	text = strings.Replace(text, "dual_role_users = []", "dual_role_users = "+who, 1)
	if err := os.WriteFile(cfgPath, []byte(text), 0o640); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(state, "policy.toml"), []byte(rememberedPolicy), 0o640); err != nil {
		return nil, err
	}
	d, err := startDaemonEnv(e.bin, state, sock, []string{"PATH=/usr/bin:/bin"})
	if err != nil {
		return nil, err
	}
	if err := rememberOne(sock); err != nil {
		d.stop()
		return nil, fmt.Errorf("%s: %w", sysRemembered, err)
	}
	return []*system{{name: sysRemembered, pid: d.cmd.Process.Pid, grants: true,
		connect: func(n int) ([]op, func(), error) { return rememberedClients(sock, n) },
		stop:    func() { d.stop() }}}, nil
}

// benchCaveats is the request of the bench's clients.
func benchCaveats() []grant.Caveat {
	return []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find"), grant.Exp(time.Now().Unix() + 3600)}
}

// rememberOne asks for the bench's request, approves it with remember as
// a human would, and waits for its grant.
func rememberOne(sock string) error {
	agent, err := client.Dial(sock)
	if err != nil {
		return err
	}
	defer agent.Close()
	human, err := client.Dial(sock)
	if err != nil {
		return err
	}
	defer human.Close()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	approved := make(chan error, 1)
	res, err := agent.Grant(ctx, key, benchCaveats(), func(ev protocol.Event) {
		go func() {
			approved <- human.ApproveWith(ctx, ev.Request, ev.Code, "terminal", client.ApproveOptions{Remember: "8h"})
		}()
	})
	if err != nil {
		return err
	}
	if err := <-approved; err != nil {
		return err
	}
	if res.Remembered == "" {
		return fmt.Errorf("the approved grant names no remembered approval")
	}
	return nil
}

// rememberedClients connects n clients, each with its own holder key, each
// asking for the request the human had remembered.
func rememberedClients(sock string, n int) ([]op, func(), error) {
	return grantClients(sock, n, "remembered", func(protocol.Event) {})
}
