// Command bench measures parley-keyd against OpenSSH's ssh-agent on the same
// machine in one run, and prints the figures of docs/performance.md:
//
//   - a grant decided by policy (auto) over the real socket, with the audit
//     log fsynced: latency p50 and p99 of one client in sequence, and
//     throughput with 16 concurrent clients, each on its own connection;
//   - the same for ssh-agent signing 200 bytes with an Ed25519 key over its
//     socket, driven by golang.org/x/crypto/ssh/agent;
//   - the ratios of the two;
//   - grant verification of 1-, 3- and 8-block chains next to the bare
//     signature checks (grant's own benchmarks);
//   - the daemon's resident memory idle and with 1000 idle connections, and
//     its time from exec to the first answered HELLO (median of several
//     starts).
//
// It builds the real parley-keyd binary (or takes -keyd), runs it as a child
// process on a temporary state folder, and talks to it only over its Unix
// socket. Usage, from the repository root:
//
//	go run ./internal/bench [-json figures.json] [-perf perf.data]
//
// Needs ssh-agent on the PATH (Debian: openssh-client) and the go command.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/client"

	"github.com/parley-keyd/parley-keyd/keyd/audit"

	"github.com/parley-keyd/parley-keyd/grant"
	"golang.org/x/sys/unix"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

type options struct {
	keydBin, sshAgentBin, dir, jsonOut, perfOut string
	n, warm, clients, readyRuns, conns          int
	duration                                    time.Duration
	verifyTime                                  string
	verify                                      bool
	signers                                     string
}

// Figures is everything one run measured; -json writes it.
type Figures struct {
	Env struct {
		Go, OS, CPU, FS string
		CPUs            int
		Time            string
	}
	KeydLatency     latency
	KeydThroughput  throughput
	SSHLatency      latency
	SSHThroughput   throughput
	LatencyRatio    float64 // ssh-agent p50 / parley-keyd p50; goal ≥ 2
	ThroughputRatio float64 // parley-keyd / ssh-agent with 16 clients; goal ≥ 5
	Verify          []verifyRow
	VerifyMethod    string
	IdleRSSKiB      int
	ConnsRSSKiB     int   // the larger of ConnsRounds
	ConnsRounds     []int // resident memory with Conns idle connections, first and second time
	Conns           int
	SSHIdleRSSKiB   int
	ReadyMedian     time.Duration
	// ReadyLogMedian is the start-up time again, with the audit log of
	// ReadyLogRecords records that the load left behind.
	ReadyLogMedian  time.Duration
	ReadyLog        []time.Duration
	ReadyLogRecords int
	Ready           []time.Duration
	AuditRecords    string
	// AuditBatch is the mean number of issue records committed by one
	// write and fsync during the throughput run: the records of one group
	// commit share their time stamp.
	AuditBatch float64
	// Signers are the GRANT figures through each key backend (-signers).
	Signers []signerRow `json:",omitempty"`
}

func run() error {
	var o options
	flag.StringVar(&o.keydBin, "keyd", "", "parley-keyd binary (default: build ./cmd/parley-keyd)")
	flag.StringVar(&o.sshAgentBin, "ssh-agent", "ssh-agent", "OpenSSH ssh-agent binary")
	flag.StringVar(&o.dir, "dir", "", "folder for the state folder and sockets; its filesystem decides the cost of fsync (default: $TMPDIR)")
	flag.StringVar(&o.jsonOut, "json", "", "also write the figures to this file as JSON")
	flag.StringVar(&o.perfOut, "perf", "", "record a perf profile of the daemon during its load phases into this file (needs perf)")
	flag.IntVar(&o.n, "n", 2000, "requests timed in sequence for the latency figures")
	flag.IntVar(&o.warm, "warm", 200, "untimed requests before the latency run")
	flag.IntVar(&o.clients, "clients", 16, "concurrent clients for the throughput figures")
	flag.DurationVar(&o.duration, "duration", 3*time.Second, "how long each throughput run lasts")
	flag.IntVar(&o.readyRuns, "ready-runs", 9, "daemon starts timed for the ready figure")
	flag.IntVar(&o.conns, "conns", 1000, "idle connections for the memory figure")
	flag.StringVar(&o.verifyTime, "verify-benchtime", "1s", "-benchtime of grant's verification benchmarks")
	flag.BoolVar(&o.verify, "verify", true, "run grant's verification benchmarks")
	flag.StringVar(&o.signers, "signers", "", `key backends too: "also" after the main figures, "only" for them alone (needs SoftHSM2)`)
	flag.Parse()

	sshBin, err := exec.LookPath(o.sshAgentBin)
	if err != nil {
		return fmt.Errorf("%v (install OpenSSH's client tools: Debian package openssh-client)", err)
	}
	dir, err := os.MkdirTemp(o.dir, "parley-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// A Unix socket path must fit in 108 bytes.
	if len(filepath.Join(dir, "ssh-agent.sock")) > 100 {
		return fmt.Errorf("folder %s is too deep for a Unix socket path; pass a shorter -dir", dir)
	}

	var fig Figures
	fig.Env.Go, fig.Env.OS, fig.Env.CPUs = runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH, runtime.NumCPU()
	fig.Env.CPU, fig.Env.FS = cpuModel(), fsType(dir)
	fig.Env.Time = time.Now().UTC().Format(time.RFC3339)

	bin := o.keydBin
	if bin == "" {
		step("building parley-keyd")
		if bin, err = buildKeyd(dir); err != nil {
			return err
		}
	}
	if o.signers == "only" {
		rows, err := measureSigners(o, bin, dir)
		reportSigners(os.Stdout, rows)
		return err
	}
	state, sock, err := initState(bin, dir)
	if err != nil {
		return err
	}

	step("timing %d daemon starts", o.readyRuns)
	if fig.Ready, fig.ReadyMedian, err = timeStarts(bin, state, sock, o.readyRuns); err != nil {
		return err
	}

	d, _, err := startDaemon(bin, state, sock)
	if err != nil {
		return err
	}
	defer d.stop()
	pid := d.cmd.Process.Pid
	if fig.IdleRSSKiB, err = rssKiB(pid); err != nil {
		return err
	}
	// Twice: the second time, the daemon reuses the memory the first
	// connections freed, which the allocator zeroes, so it is all resident.
	step("opening %d idle connections, twice", o.conns)
	fig.Conns = o.conns
	for round := 0; round < 2; round++ {
		idle, err := openIdle(sock, o.conns)
		if err != nil {
			return err
		}
		kib, err := rssKiB(pid)
		closeAll(idle)
		if err != nil {
			return err
		}
		fig.ConnsRounds = append(fig.ConnsRounds, kib)
		fig.ConnsRSSKiB = max(fig.ConnsRSSKiB, kib)
	}

	stopPerf, err := startPerf(o.perfOut, pid)
	if err != nil {
		return err
	}
	step("parley-keyd: %d grants in sequence, then %d clients for %v", o.n, o.clients, o.duration)
	ops, closeOps, err := keydClients(sock, o.clients)
	if err != nil {
		stopPerf()
		return err
	}
	fig.KeydLatency, err = measureLatency(pid, ops[0], o.warm, o.n)
	if err == nil {
		fig.KeydThroughput, err = measureThroughput(pid, ops, o.duration)
	}
	closeOps()
	stopPerf()
	if err != nil {
		return fmt.Errorf("parley-keyd: %w", err)
	}
	if err := d.stop(); err != nil {
		return err
	}
	if fig.AuditBatch, err = auditBatch(filepath.Join(state, "audit.log"), fig.KeydThroughput.Start, fig.KeydThroughput.End); err != nil {
		return err
	}
	out, err := exec.Command(bin, "audit", "verify", "--state", state).CombinedOutput()
	fig.AuditRecords = strings.TrimSpace(string(out))
	if err != nil {
		return fmt.Errorf("audit log after the run: %v: %s", err, out)
	}
	// The daemon verifies its whole audit log before it accepts, so its
	// start-up time grows with the log: time it again with the run's log.
	step("timing daemon starts with the audit log of the run")
	if fig.ReadyLog, fig.ReadyLogMedian, err = timeStarts(bin, state, sock, max(1, o.readyRuns/3)); err != nil {
		return err
	}
	if fig.ReadyLogRecords, err = countLines(filepath.Join(state, "audit.log")); err != nil {
		return err
	}

	step("ssh-agent: %d signatures in sequence, then %d clients for %v", o.n, o.clients, o.duration)
	a, err := startSSHAgent(sshBin, dir)
	if err != nil {
		return err
	}
	defer a.stop()
	if fig.SSHIdleRSSKiB, err = rssKiB(a.pid()); err != nil {
		return err
	}
	sops, closeSSH, err := sshClients(a, o.clients)
	if err != nil {
		return err
	}
	fig.SSHLatency, err = measureLatency(a.pid(), sops[0], o.warm, o.n)
	if err == nil {
		fig.SSHThroughput, err = measureThroughput(a.pid(), sops, o.duration)
	}
	closeSSH()
	if err != nil {
		return fmt.Errorf("ssh-agent: %w", err)
	}
	a.stop()

	if o.verify {
		step("grant verification benchmarks")
		if fig.Verify, fig.VerifyMethod, err = measureVerify(o.verifyTime); err != nil {
			return err
		}
	}
	if o.signers == "also" {
		step("key backends")
		if fig.Signers, err = measureSigners(o, bin, dir); err != nil {
			return err
		}
	}
	fig.LatencyRatio = float64(fig.SSHLatency.P50) / float64(fig.KeydLatency.P50)
	fig.ThroughputRatio = fig.KeydThroughput.PerSec / fig.SSHThroughput.PerSec

	report(os.Stdout, &fig)
	reportSigners(os.Stdout, fig.Signers)
	if o.jsonOut != "" {
		b, err := json.MarshalIndent(&fig, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func step(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// keydClients connects n typed clients, each with its own holder key, each
// asking for a calendar grant the bench policy issues at once.
func keydClients(sock string, n int) ([]op, func(), error) {
	var ops []op
	var clients []*client.Client
	closeAll := func() {
		for _, c := range clients {
			c.Close()
		}
	}
	exp := time.Now().Unix() + 3600
	cavs := []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find"), grant.Exp(exp)}
	for i := 0; i < n; i++ {
		c, err := client.Dial(sock)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		clients = append(clients, c)
		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		ops = append(ops, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := c.Grant(ctx, key, cavs, nil)
			if err == nil && res.Decision != "auto" {
				err = fmt.Errorf("grant decided by %q, want auto", res.Decision)
			}
			return err
		})
	}
	return ops, closeAll, nil
}

// sshClients connects n ssh-agent clients that each sign 200 bytes.
func sshClients(a *sshAgent, n int) ([]op, func(), error) {
	var ops []op
	var clients []sshClient
	closeAll := func() {
		for _, c := range clients {
			c.close()
		}
	}
	msg := make([]byte, 200)
	rand.Read(msg)
	for i := 0; i < n; i++ {
		c, err := a.dial()
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		clients = append(clients, c)
		ops = append(ops, func() error {
			sig, err := c.Sign(a.pub, msg)
			if err == nil && sig.Format != "ssh-ed25519" {
				err = fmt.Errorf("signature format %q", sig.Format)
			}
			return err
		})
	}
	return ops, closeAll, nil
}

// timeStarts starts and stops the daemon n times and returns the times from
// exec to the first answered HELLO, and their median.
func timeStarts(bin, state, sock string, n int) ([]time.Duration, time.Duration, error) {
	var times []time.Duration
	for i := 0; i < n; i++ {
		d, ready, err := startDaemon(bin, state, sock)
		if err != nil {
			return nil, 0, err
		}
		times = append(times, ready)
		if err := d.stop(); err != nil {
			return nil, 0, err
		}
	}
	sorted := slices.Clone(times)
	slices.Sort(sorted)
	return times, sorted[len(sorted)/2], nil
}

func countLines(path string) (int, error) {
	b, err := os.ReadFile(path)
	return bytes.Count(b, []byte("\n")), err
}

// auditBatch reads the audit log and returns the mean number of issue
// records per group commit among those written between from and to.
func auditBatch(path string, from, to time.Time) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 4<<20)
	records := 0
	groups := map[string]bool{}
	for sc.Scan() {
		var rec struct{ Kind, Time string }
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		t, err := time.Parse(time.RFC3339Nano, rec.Time)
		if err != nil || rec.Kind != audit.KindIssue || t.Before(from) || t.After(to) {
			continue
		}
		records++
		groups[rec.Time] = true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if len(groups) == 0 {
		return 0, fmt.Errorf("%s: no records written during the throughput run", path)
	}
	return float64(records) / float64(len(groups)), nil
}

// startPerf records the daemon's CPU profile with perf until the returned
// function is called. No file name, no profile.
func startPerf(out string, pid int) (func(), error) {
	if out == "" {
		return func() {}, nil
	}
	cmd := exec.Command("perf", "record", "-F", "999", "-g", "-p", fmt.Sprint(pid), "-o", out)
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf: %w", err)
	}
	return func() {
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
	}, nil
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// fsType names the filesystem dir is on, which decides what fsync costs.
func fsType(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return "unknown"
	}
	names := map[int64]string{
		unix.EXT4_SUPER_MAGIC: "ext4", unix.TMPFS_MAGIC: "tmpfs", unix.XFS_SUPER_MAGIC: "xfs",
		unix.BTRFS_SUPER_MAGIC: "btrfs", unix.OVERLAYFS_SUPER_MAGIC: "overlayfs",
	}
	if n, ok := names[int64(st.Type)]; ok {
		return n
	}
	return fmt.Sprintf("0x%x", st.Type)
}
