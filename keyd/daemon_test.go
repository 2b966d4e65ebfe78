package keyd

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
	"github.com/parley-keyd/parley-keyd/policies"
)

// TestAuditWitnessFromConfig runs a daemon whose configuration names a
// witness file: the checkpoints of its start and stop reach the file, signed
// by the principal key, and the last one covers the log's last record.
func TestAuditWitnessFromConfig(t *testing.T) {
	dir := t.TempDir()
	witness := filepath.Join(t.TempDir(), "checkpoints")
	sock := filepath.Join(dir, "agent.sock")
	u := me(t)
	text := DefaultConfig(sock, u, u) + "\n" // [audit] is the last table
	text = strings.Replace(text, "# witness_file = \"/var/log/parley-keyd/checkpoints\"", "witness_file = \""+witness+"\"", 1)
	cfg, err := ParseConfig([]byte(text), filepath.Join(dir, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policies.Parse([]byte(testPolicy), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{Config: cfg, Policy: pol, Signer: key, State: dir})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx, ln) }()
	stop()
	select {
	case err := <-ran:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the daemon did not stop")
	}

	f, err := os.Open(witness)
	if err != nil {
		t.Fatalf("the witness file was not written: %v", err)
	}
	defer f.Close()
	var cps []*checkpoint.Checkpoint
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cp, err := checkpoint.Parse(sc.Bytes())
		if err != nil {
			t.Fatalf("witness line %q: %v", sc.Text(), err)
		}
		if cp.Key != checkpoint.FormatKey(pub) {
			t.Errorf("checkpoint signed by %s, want the principal %s", cp.Key, checkpoint.FormatKey(pub))
		}
		cps = append(cps, cp)
	}
	if len(cps) < 2 {
		t.Fatalf("the witness holds %d checkpoints, want those of the start and the stop", len(cps))
	}
	last := cps[len(cps)-1]
	rep, err := audit.Verify(filepath.Join(dir, "audit.log"), audit.VerifyOptions{Checkpoints: cps})
	if err != nil {
		t.Fatalf("the log does not verify against its witness: %v", err)
	}
	if rep == nil || last.Reason != checkpoint.ReasonStop {
		t.Errorf("last checkpoint %+v, report %+v; want one made at close", last, rep)
	}
}

func TestAuditConfigRefusals(t *testing.T) {
	for _, tc := range []struct{ name, table, want string }{
		{"fail/relative-witness", `witness_file = "checkpoints"`, "absolute path"},
		{"fail/relative-command", `witness_command = ["ship"]`, "absolute path"},
		{"fail/negative", `checkpoint_every = -1`, "negative"},
		{"fail/negative-scrub-rate", `scrub_rate = -1`, "cannot be turned off"},
		{"fail/negative-scrub-interval", `scrub_interval = "-1h"`, "must be positive"},
		{"fail/unknown-key", `witness = "/x"`, "unknown key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte("[audit]\n"+tc.table+"\n"), "c.toml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}
