// Package testdaemon runs a real parley-keyd daemon in a test process: the
// configuration and policy the test gives, a fresh principal key, the audit
// log in the test's folder, and a real Unix socket at the configuration's
// path. It goes through keyd.New and Daemon.Run, as parley-keyd serve does.
package testdaemon

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd"
	"github.com/parley-keyd/parley-keyd/policies"
)

// Start runs a daemon with cfg and the policy text in state, listening on
// cfg.Socket, and stops it when the test ends. edit, when given, adjusts the
// options before the daemon is made.
func Start(t testing.TB, cfg *keyd.Config, policy, state string, edit ...func(*keyd.Options)) *keyd.Daemon {
	t.Helper()
	pol, err := policies.Parse([]byte(policy), "policy.toml")
	if err != nil {
		t.Fatal(err)
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	o := keyd.Options{Config: cfg, Policy: pol, State: state, Signer: key, Logf: t.Logf}
	for _, f := range edit {
		f(&o)
	}
	d, err := keyd.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx, ln) }()
	// Run writes the log's open checkpoint and start record first: a test
	// reading the log, or calling the daemon without the socket, comes
	// after them, as a request does.
	if l := d.AuditLog(); l != nil {
		select {
		case <-l.Started():
		case <-time.After(15 * time.Second):
			t.Fatal("the daemon's audit log did not start within 15 s")
		}
	}
	t.Cleanup(func() {
		stop()
		select {
		case err := <-ran:
			if err != nil {
				t.Errorf("daemon: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("the daemon did not stop within 15 s")
		}
	})
	return d
}
