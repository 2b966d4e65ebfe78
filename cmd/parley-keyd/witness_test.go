package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
)

// TestE2EHungWitnessStop: issue 20 item 6. A witness_command that never
// lets go (a child holding its stdout, as ssh in a wrapper does; SIGTERM
// ignored; standard input never read) must not wedge the daemon's stop:
// SIGTERM completes within the witness timeout and a small margin, and
// nothing of any witness run's process group survives (DESIGN.md property
// 13). The real daemon runs as its own user, the witness as that user too.
func TestE2EHungWitnessStop(t *testing.T) {
	tests := []struct{ name, body string }{
		// Exits 0 at once, but its child keeps stdout open.
		{"grandchild-holds-stdout", `sleep 1000 &
echo "$pgid $$ $!" >> "$out"
echo ok`},
		// Ignores SIGTERM (and HUP, INT), with a child holding stdout.
		{"ignores-sigterm", `trap '' TERM HUP INT
sleep 1000 &
echo "$pgid $$ $!" >> "$out"
while :; do sleep 1; done`},
		// Never reads its standard input, never exits.
		{"never-reads-stdin", `echo "$pgid $$ -" >> "$out"
exec sleep 1000`},
	}
	for _, tt := range tests {
		t.Run("fail/"+tt.name, func(t *testing.T) {
			t.Parallel()
			e := newE2E(t)
			// The witness and its folder belong to root and are not
			// writable by others, as a program the daemon runs must be;
			// what it writes goes to a folder of the daemon's user.
			bin := filepath.Join(e.base, "witness-bin")
			outDir := filepath.Join(e.base, "witness-out")
			for _, d := range []string{bin, outDir} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			os.Chown(outDir, int(e.daemon.uid), int(e.daemon.gid))
			out := filepath.Join(outDir, "runs")
			script := filepath.Join(bin, "witness")
			body := "#!/bin/sh\nout=" + strconv.Quote(out) + "\npgid=$(cut -d' ' -f5 /proc/$$/stat)\n" + tt.body + "\n"
			if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
				t.Fatal(err)
			}
			cfgPath := filepath.Join(e.etc, "config.toml")
			cfg, err := os.ReadFile(cfgPath)
			if err != nil {
				t.Fatal(err)
			}
			old := []byte(`# witness_command = ["/usr/local/bin/ship-checkpoint"]`)
			if !bytes.Contains(cfg, old) {
				t.Fatalf("config.toml has no witness_command line to set:\n%s", cfg)
			}
			e.writeOwned(cfgPath, string(bytes.Replace(cfg, old, []byte(`witness_command = [`+strconv.Quote(script)+`]`), 1)))

			e.start()
			// Every run recorded: "pgid pid child".
			var runs [][]string
			t.Cleanup(func() {
				for _, r := range runs {
					for _, p := range r[1:] {
						if pid, err := strconv.Atoi(p); err == nil && pid > 1 {
							syscall.Kill(pid, syscall.SIGKILL)
						}
					}
				}
			})
			readRuns := func() {
				b, _ := os.ReadFile(out)
				runs = runs[:0]
				for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
					if f := strings.Fields(l); len(f) == 3 {
						runs = append(runs, f)
					}
				}
			}
			deadline := time.Now().Add(15 * time.Second)
			for readRuns(); len(runs) == 0; readRuns() {
				if time.Now().After(deadline) {
					t.Fatalf("the witness never ran:\n%s", e.stderr)
				}
				time.Sleep(10 * time.Millisecond)
			}

			start := time.Now()
			e.proc.Process.Signal(syscall.SIGTERM)
			bound := audit.DefaultWitnessTimeout + 3*time.Second
			select {
			case <-e.exited:
				e.proc = nil
			case <-time.After(bound):
				readRuns()
				t.Fatalf("SIGTERM did not stop the daemon within %v (witness timeout %v); witness runs %v\n%s",
					bound, audit.DefaultWitnessTimeout, runs, e.stderr)
			}
			took := time.Since(start)
			readRuns()
			t.Logf("stopped in %v; witness runs (pgid pid child): %v", took.Round(time.Millisecond), runs)
			for _, r := range runs {
				pgid, _ := strconv.Atoi(r[0])
				if r[0] != r[1] || pgid == syscall.Getpgrp() {
					t.Errorf("witness pid %s ran in process group %s, not in one of its own", r[1], r[0])
					continue
				}
				if left := testpeer.WaitGroupGone(pgid, 2*time.Second); len(left) > 0 {
					t.Errorf("processes %v of witness group %d outlived the daemon", left, pgid)
				}
			}
		})
	}
}
