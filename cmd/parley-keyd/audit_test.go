package main

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"

	"github.com/rogpeppe/go-internal/testscript"
)

var updateScripts = flag.Bool("update", false, "rewrite the cmp files of testdata/audit from the actual output")

// TestAuditScripts runs the audit command's scripts in testdata/audit
// against the real parley-keyd binary, on logs that mklog writes with the
// audit package, a fixed key and a fixed clock, so that the output is the
// same bytes in every run.
func TestAuditScripts(t *testing.T) {
	bin := binaries(t)
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/audit",
		RequireExplicitExec: true,
		UpdateScripts:       *updateScripts,
		Setup: func(env *testscript.Env) error {
			env.Setenv("PATH", bin+":/usr/bin:/bin")
			env.Setenv("PARLEY_KEYD_STATE", env.WorkDir+"/state")
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"rc":            cmdRC,
			"mklog":         cmdMklog,
			"tamper":        cmdTamper,
			"segcheckpoint": cmdSegCheckpoint,
		},
	})
}

// scriptClock tells the time from the log's head: a second a record after
// a fixed time, so that the log is the same bytes in every run, whenever
// its writer reads the clock (a checkpoint or a new segment after a record
// is written, a tick).
type scriptClock struct {
	mu   sync.Mutex
	log  *audit.Log
	seq  uint64 // the head when no log is open
	base time.Time
}

func (c *scriptClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	seq := c.seq
	if c.log != nil {
		seq = c.log.Head().Seq
	}
	return c.base.Add(time.Duration(seq) * time.Second)
}

func (c *scriptClock) use(l *audit.Log) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.log != nil {
		c.seq = c.log.Head().Seq + 1
	}
	c.log = l
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func scriptKey(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("parley-keyd audit script key " + name))
	return ed25519.NewKeyFromSeed(seed[:])
}

// cmdMklog writes an audit log as the daemon would, in runs that each end
// with the stop checkpoint, and principal.pub next to it:
//
//	mklog DIR [-runs N] [-records N] [-segment BYTES] [-witness FILE] [-killed] [-key NAME]
//
// Each run appends a start record, issue records (grant ids g-1, g-2, …,
// holder and message with spaces and a terminal escape), a deny, and a stop
// record. -killed leaves the last run without its stop checkpoint.
func cmdMklog(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 {
		ts.Fatalf("usage: mklog DIR [flags]")
	}
	fs := flag.NewFlagSet("mklog", flag.ContinueOnError)
	runs := fs.Int("runs", 1, "runs")
	records := fs.Int("records", 3, "issue records a run")
	segment := fs.Int64("segment", 0, "segment size")
	witness := fs.String("witness", "", "file witness")
	killed := fs.Bool("killed", false, "the last run ends without its stop checkpoint")
	keyName := fs.String("key", "daemon", "key name")
	ts.Check(fs.Parse(args[1:]))
	dir := ts.MkAbs(args[0])
	ts.Check(os.MkdirAll(dir, 0o700))
	key := scriptKey(*keyName)
	pub := checkpoint.FormatKey(key.Public().(ed25519.PublicKey))
	ts.Check(os.WriteFile(filepath.Join(dir, "principal.pub"), []byte(pub+"\n"), 0o644))
	clock := &scriptClock{base: time.Date(2030, 5, 6, 7, 0, 0, 0, time.UTC)}
	o := audit.Options{Signer: key, Now: clock.Now, Rand: zeros{}, SegmentSize: *segment, CheckpointEvery: 1e6, CheckpointInterval: 24 * time.Hour}
	if *witness != "" {
		o.Witnesses = []audit.Witness{audit.FileWitness{Path: ts.MkAbs(*witness)}}
	}
	n := 0
	for run := 0; run < *runs; run++ {
		clock.use(nil)
		l, err := o.Open(filepath.Join(dir, "audit.log"))
		// A test binary forking meanwhile (another script's exec) holds
		// the lock of the run before until its child execs.
		for deadline := time.Now().Add(10 * time.Second); errors.Is(err, audit.ErrInUse) && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			l, err = o.Open(filepath.Join(dir, "audit.log"))
		}
		ts.Check(err)
		clock.use(l)
		app := func(r audit.Record) {
			_, err := l.Append(r)
			ts.Check(err)
		}
		app(audit.Record{Kind: audit.KindStart, Message: fmt.Sprintf("run %d", run+1)})
		for i := 0; i < *records; i++ {
			n++
			app(audit.Record{Kind: audit.KindIssue, RequestID: fmt.Sprintf("r_%d", n),
				Caller: &audit.Caller{UID: 1000, GID: 1000, PID: int32(4000 + n), User: "bot", Unit: "agent.service"},
				Holder: "ed25519:3Ue1sJbM4YyOIX7oWo9e_ZlPCbLDBYyFU0ePhTy7jqo", Decision: "auto",
				DecidedBy: &audit.Decider{Rule: "calendar auto"}, GrantID: fmt.Sprintf("g-%d", n), Expiry: 1904000000,
				Requested: []byte(`[{"can":["calendar.*"]}]`), Issued: []byte(`[{"can":["calendar.*"]},{"exp":1904000000}]`)})
		}
		app(audit.Record{Kind: audit.KindDeny, RequestID: "r_evil\x1b[2J decision=allow", Caller: &audit.Caller{UID: 1001, PID: 7},
			Decision: "deny", DecidedBy: &audit.Decider{Rule: "no-shop"}, Message: "no rule allows shop.order"})
		if run == *runs-1 && *killed {
			l.Checkpoint()
			app(audit.Record{Kind: audit.KindIssue, RequestID: "r_after", GrantID: "g-after"})
			continue // never closed: like a kill -9
		}
		app(audit.Record{Kind: audit.KindStop, Message: "terminated"})
		ts.Check(l.Close())
	}
}

// cmdTamper changes a log file as someone who can write it would:
//
//	tamper FILE cut N            keep the first N lines
//	tamper FILE drop N           remove line N
//	tamper FILE edit N OLD NEW   replace OLD with NEW in line N
//	tamper FILE append TEXT      add a line
//	tamper FILE empty            make it empty
func cmdTamper(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: tamper FILE OP ARGS...")
	}
	path := ts.MkAbs(args[0])
	data, err := os.ReadFile(path)
	ts.Check(err)
	lines := strings.SplitAfter(string(data), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	num := func(s string) int {
		n, err := strconv.Atoi(s)
		ts.Check(err)
		if n < 1 || n > len(lines) {
			ts.Fatalf("line %d of %d", n, len(lines))
		}
		return n
	}
	switch args[1] {
	case "cut":
		lines = lines[:num(args[2])]
	case "drop":
		n := num(args[2])
		lines = append(lines[:n-1], lines[n:]...)
	case "edit":
		n := num(args[2])
		if !strings.Contains(lines[n-1], args[3]) {
			ts.Fatalf("line %d has no %q", n, args[3])
		}
		lines[n-1] = strings.Replace(lines[n-1], args[3], args[4], 1)
	case "append":
		lines = append(lines, args[2]+"\n")
	case "empty":
		lines = nil
	default:
		ts.Fatalf("tamper: unknown op %q", args[1])
	}
	fi, err := os.Stat(path)
	ts.Check(err)
	os.Chmod(path, 0o600)
	ts.Check(os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600))
	os.Chmod(path, fi.Mode().Perm())
}

// TestCLIAuditShowFollow: show --follow prints what is in the log, then the
// records a daemon appends, until interrupted.
func TestCLIAuditShowFollow(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	l, err := audit.Options{Signer: scriptKey("daemon"), Preallocate: 4 << 10}.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Append(audit.Record{Kind: audit.KindStart, Message: "before"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binaries(t), "parley-keyd"), "audit", "show", "--follow", path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	want := func(substr string) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("show --follow ended before %q", substr)
				}
				if strings.Contains(line, substr) {
					return
				}
			case <-deadline:
				t.Fatalf("show --follow did not print %q", substr)
			}
		}
	}
	want("start -- before")
	for i := range 30 {
		l.Append(audit.Record{Kind: audit.KindIssue, GrantID: fmt.Sprintf("g-%d", i)})
	}
	want("grant=g-29")
	cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); err != nil {
		t.Errorf("show --follow after SIGINT: %v", err)
	}
}

// cmdSegCheckpoint writes the checkpoint a segment starts with (its first
// record covers the segment before it) to OUT, one JSON line, as a witness
// keeps it:
//
//	segcheckpoint SEGMENT OUT
//
// Taken from the log, not from a witness: a witness is handed the latest
// checkpoint and may skip one that a later one covers.
func cmdSegCheckpoint(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: segcheckpoint SEGMENT OUT")
	}
	data, err := os.ReadFile(ts.MkAbs(args[0]))
	ts.Check(err)
	first, _, _ := strings.Cut(string(data), "\n")
	var rec audit.Record
	ts.Check(json.Unmarshal([]byte(first), &rec))
	if rec.Checkpoint == nil {
		ts.Fatalf("%s does not start with a checkpoint: %s", args[0], first)
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), append(rec.Checkpoint.Marshal(), '\n'), 0o600))
}
