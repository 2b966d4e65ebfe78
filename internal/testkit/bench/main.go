// Command bench measures parley-keyd against the floor of its work and
// against OpenSSH's ssh-agent on the same machine in one run, and prints the
// figures of docs/performance.md:
//
//   - the floor of one auto grant, measured here and now (floor.go): an
//     NDJSON echo round trip to another process with frames of a GRANT's
//     size, the Ed25519 work of a grant, and one durable write done the way
//     the audit log does it;
//   - a grant decided by policy (auto) over the real socket, with the audit
//     log fsynced, driven by client.Client (keyd/client) and by a client written from
//     docs/protocol.md: latency p50 and p99 of one client in sequence,
//     throughput with 16 concurrent clients, each on its own connection,
//     and the CPU time of daemon and clients per request;
//   - ssh-agent signing 200 bytes with an Ed25519 key, the same way;
//   - all of it in rounds, interleaved (floor, then each system), and the
//     medians over the rounds of the ratios: issue latency to the floor,
//     the daemon's CPU per grant to its Ed25519 work, throughput to
//     ssh-agent's, client.Client's CPU to the protocol client's;
//   - grant verification of 1-, 3- and 8-block chains: overhead over the
//     bare signature checks, with a warm BlockCache, and next to a chain of
//     JWTs of the same shape; and the cost of grant's defences when it signs
//     (grant's own benchmarks);
//   - the daemon's resident memory idle and with 1000 idle connections, and
//     its time from exec to the first answered HELLO.
//
// It builds the real parley-keyd binary (or takes -keyd), runs it as a child
// process on a temporary state folder, and talks to it only over its Unix
// socket. Usage, from the repository root:
//
//	go run ./internal/testkit/bench [-rounds 5] [-json figures.json] [-perf perf.data]
//
// Needs ssh-agent on the PATH (Debian: openssh-client) and the go command.
package main

import (
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
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"golang.org/x/sys/unix"
)

func main() {
	// The bench re-executes itself as the floor server, and as the echo
	// process of the floor.
	floorServerMain()
	if sock := os.Getenv(echoEnv); sock != "" {
		n, _ := strconv.Atoi(os.Getenv(echoReplyEnv))
		fmt.Fprintf(os.Stderr, "bench echo: %v\n", serveEcho(sock, n))
		os.Exit(1)
	}
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

type options struct {
	keydBin, sshAgentBin, dir, jsonOut, perfOut string
	cpuProfile, daemonProfile, base             string
	n, warm, clients, readyRuns, conns, rounds  int
	floorGroup                                  int
	duration                                    time.Duration
	verifyTime                                  string
	verify                                      bool
	signers                                     string
	tmpfs                                       string // a tmpfs folder for the daemons' twins there (tmpfs.go)
	startup                                     string // record counts for the start-up figures (startup.go)
	scrub, scrubRate                            int    // -scrub: records of the log whose scrub is measured (scrub.go)
}

// The bench's own systems.
const (
	sysKeyd     = "parley-keyd, client.Client"
	sysKeydDocs = "parley-keyd, protocol client"
	sysSSH      = "ssh-agent"
)

// Figures is everything one run measured; -json writes it.
type Figures struct {
	Env struct {
		Go, OS, CPU, FS string
		CPUs            int
		Time            string
	}
	Systems []string
	// GrantSystems are the systems whose requests are auto grants.
	GrantSystems []string
	// Sizes of a GRANT frame, its reply and an audit issue record, with
	// their newlines: the floor uses lines of these sizes.
	RequestBytes, ReplyBytes, RecordBytes int
	Rounds                                []round
	Summary                               summary
	Verify                                []verifyRow
	VerifyMethod                          string
	Compare                               []compareRow
	SignCheck                             map[string]float64
	IdleRSSKiB                            int
	ConnsRSSKiB                           int   // the larger of ConnsRounds
	ConnsRounds                           []int // resident memory with Conns idle connections, first and second time
	Conns                                 int
	SSHIdleRSSKiB                         int
	ReadyMedian                           time.Duration
	// ReadyLogMedian is the start-up time again, with the audit log of
	// ReadyLogRecords records that the load left behind.
	ReadyLogMedian  time.Duration
	ReadyLog        []time.Duration
	ReadyLogRecords int
	Ready           []time.Duration
	AuditRecords    string
	// AuditBatch is the mean number of issue records committed by one
	// write and fsync during the throughput runs with client.Client: the
	// records of one group commit share their time stamp.
	AuditBatch float64
	// Signers are the GRANT figures through each key backend (-signers).
	Signers []signerRow  `json:",omitempty"`
	Startup []startupRow // start-up against the audit log's length
}

func run() error {
	var o options
	flag.StringVar(&o.keydBin, "keyd", "", "parley-keyd binary (default: build ./cmd/parley-keyd)")
	flag.StringVar(&o.sshAgentBin, "ssh-agent", "ssh-agent", "OpenSSH ssh-agent binary")
	flag.StringVar(&o.dir, "dir", "", "folder for the state folder, sockets and the floor's files; its filesystem decides the cost of fsync (default: $TMPDIR)")
	flag.StringVar(&o.jsonOut, "json", "", "also write the figures to this file as JSON")
	flag.StringVar(&o.perfOut, "perf", "", "after the rounds, record perf profiles of the daemon under the protocol clients' load into this file, and in sequence into FILE.seq (needs perf)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the bench process (the clients) during the rounds to this file; samples carry the labels system and phase")
	flag.StringVar(&o.daemonProfile, "pprof", "", "write a CPU profile of the daemon (Go's pprof, from its start to its stop, the rounds most of it) to this file: the bench builds the daemon with the build tag profile and sets "+keydProfileEnv+" (with -keyd, build it so yourself)")
	flag.StringVar(&o.base, "base", "", "a parley-keyd binary to measure in every round next to this one, as a baseline: another commit's, built with go build -o")
	flag.IntVar(&o.rounds, "rounds", 5, "rounds of floor and systems, interleaved; the figures are medians over them")
	flag.IntVar(&o.n, "n", 2000, "requests timed in sequence per system and round for the latency figures")
	flag.IntVar(&o.warm, "warm", 200, "untimed requests per system before the first round")
	flag.IntVar(&o.clients, "clients", 16, "concurrent clients for the throughput figures")
	flag.IntVar(&o.floorGroup, "floorgroup", 0, "the most requests the floor server makes durable with one fdatasync (0: all that are queued), e.g. the daemon's records per group commit")
	flag.DurationVar(&o.duration, "duration", 3*time.Second, "how long each throughput run lasts")
	flag.IntVar(&o.readyRuns, "ready-runs", 9, "daemon starts timed for the ready figure")
	flag.IntVar(&o.conns, "conns", 1000, "idle connections for the memory figure")
	flag.StringVar(&o.verifyTime, "verify-benchtime", "1s", "-benchtime of grant's verification benchmarks")
	flag.BoolVar(&o.verify, "verify", true, "run grant's verification and signing benchmarks")
	flag.StringVar(&o.tmpfs, "tmpfs", "/dev/shm", "a tmpfs folder where this daemon (and -base) runs a second time, for the daemon's durable write: its p50 on disk less its p50 there (empty: none)")
	flag.StringVar(&o.signers, "signers", "", `key backends too: "also" after the main figures, "only" for them alone (needs SoftHSM2)`)
	flag.StringVar(&o.startup, "startup", "1000,100000,1000000", "audit log lengths for the start-up figures (empty: none)")
	flag.IntVar(&o.scrub, "scrub", 0, "only the audit log scrub's cost, on a log of this many records (docs/performance.md): rounds of -n requests while it runs and after")
	flag.IntVar(&o.scrubRate, "scrub-rate", 0, "scrub_rate in MiB/s for -scrub (0: the daemon's default)")
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
		if bin, err = buildKeyd(dir, o.daemonProfile != ""); err != nil {
			return err
		}
	} else if bin, err = installCopy(bin, dir); err != nil {
		return err
	}
	if o.base != "" {
		if o.base, err = installCopy(o.base, dir); err != nil {
			return err
		}
	}
	if o.signers == "only" {
		rows, err := measureSigners(o, bin, dir)
		reportSigners(os.Stdout, rows)
		return err
	}
	if o.scrub > 0 {
		rows, err := measureScrub(bin, o.base, dir, o.scrub, o.rounds, o.n, o.scrubRate)
		reportScrub(os.Stdout, rows)
		if err == nil && o.jsonOut != "" {
			b, _ := json.MarshalIndent(rows, "", "  ")
			err = os.WriteFile(o.jsonOut, b, 0o644)
		}
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

	env := []string{"PATH=/usr/bin:/bin"}
	if o.daemonProfile != "" {
		abs, err := filepath.Abs(o.daemonProfile)
		if err != nil {
			return err
		}
		env = append(env, keydProfileEnv+"="+abs)
	}
	d, err := startDaemonEnv(bin, state, sock, env)
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

	a, err := startSSHAgent(sshBin, dir)
	if err != nil {
		return err
	}
	defer a.stop()
	if fig.SSHIdleRSSKiB, err = rssKiB(a.pid()); err != nil {
		return err
	}

	systems := []*system{
		{name: sysKeyd, pid: pid, grants: true, connect: func(n int) ([]op, func(), error) { return keydClients(sock, n) }},
		{name: sysKeydDocs, pid: pid, grants: true, connect: func(n int) ([]op, func(), error) { return rawClients(sock, n) }},
		{name: sysSSH, pid: a.pid(), connect: func(n int) ([]op, func(), error) { return sshClients(a, n) }},
	}
	benv := &benchEnv{bin: bin, dir: dir, clients: o.clients, base: o.base, tmpfs: o.tmpfs}
	for _, add := range extraSystems {
		more, err := add(benv)
		if err != nil {
			return err
		}
		systems = append(systems, more...)
	}
	defer func() {
		for _, s := range systems {
			if s.close != nil {
				s.close()
			}
			if s.stop != nil {
				s.stop()
			}
		}
	}()
	for _, s := range systems {
		fig.Systems = append(fig.Systems, s.name)
		if s.grants {
			fig.GrantSystems = append(fig.GrantSystems, s.name)
		}
		if s.ops, s.close, err = s.connect(o.clients); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		step("%s: %d requests to warm up", s.name, o.warm)
		for i := 0; i < o.warm; i++ {
			if err := s.ops[0](); err != nil {
				return fmt.Errorf("%s: warm-up request %d: %w", s.name, i+1, err)
			}
		}
	}

	// The floor's frames and record have the sizes of the real ones.
	probe, err := dialRaw(sock)
	if err != nil {
		return err
	}
	err = probe.grant()
	probe.close()
	if err != nil {
		return err
	}
	fig.RequestBytes, fig.ReplyBytes = probe.lastReq, probe.lastReply
	if fig.RecordBytes, err = lastIssueRecord(filepath.Join(state, "audit.log")); err != nil {
		return err
	}
	step("floor: echo frames of %d and %d bytes, audit records of %d bytes", fig.RequestBytes, fig.ReplyBytes, fig.RecordBytes)
	fl, err := startFloor(dir, fig.RequestBytes, fig.ReplyBytes, fig.RecordBytes)
	if err != nil {
		return err
	}
	defer fl.stop()
	fs, err := startFloorServer(dir, fig.ReplyBytes, fig.RecordBytes, o.floorGroup)
	if err != nil {
		return err
	}
	fsys := &system{name: sysFloorServer, pid: fs.cmd.Process.Pid, stop: fs.stop,
		groups:  func() (int64, int64, error) { return floorStats(fs.sock) },
		connect: func(n int) ([]op, func(), error) { return floorClients(fs.sock, fl.request, n) }}
	if fsys.ops, fsys.close, err = fsys.connect(o.clients); err != nil {
		fs.stop()
		return fmt.Errorf("%s: %w", fsys.name, err)
	}
	systems = append(systems, fsys)
	fig.Systems = append(fig.Systems, fsys.name)
	for i := 0; i < o.warm; i++ {
		if err := fsys.ops[0](); err != nil {
			return fmt.Errorf("%s: warm-up request %d: %w", fsys.name, i+1, err)
		}
	}

	stopProfile, err := startCPUProfile(o.cpuProfile)
	if err != nil {
		return err
	}
	fig.Rounds, err = runRounds(systems, fl, o.rounds, o.n, o.duration)
	stopProfile()
	if err != nil {
		return err
	}
	if o.perfOut != "" {
		if err := profileDaemon(o.perfOut, pid, systems[1], o.n, o.duration); err != nil {
			return err
		}
	}
	for _, s := range systems {
		s.close()
		s.close = nil
	}
	if err := d.stop(); err != nil {
		return err
	}
	var windows [][2]time.Time
	for _, r := range fig.Rounds {
		t := r.Throughput[sysKeyd]
		windows = append(windows, [2]time.Time{t.Start, t.End})
	}
	if fig.AuditBatch, err = auditBatch(filepath.Join(state, "audit.log"), windows); err != nil {
		return err
	}
	out, err := exec.Command(bin, "audit", "verify", "--state", state).CombinedOutput()
	fig.AuditRecords = strings.TrimSpace(string(out))
	if err != nil {
		return fmt.Errorf("audit log after the run: %v: %s", err, out)
	}
	// The daemon verifies its audit log before it accepts, so its start-up
	// time may grow with the log: time it again with the run's log.
	step("timing daemon starts with the audit log of the run")
	if fig.ReadyLog, fig.ReadyLogMedian, err = timeStarts(bin, state, sock, max(1, o.readyRuns/3)); err != nil {
		return err
	}
	if fig.ReadyLogRecords, err = countRecords(filepath.Join(state, "audit.log")); err != nil {
		return err
	}
	a.stop()
	fl.stop()

	if o.verify {
		step("grant verification and signing benchmarks")
		if fig.Verify, fig.VerifyMethod, err = measureVerify(o.verifyTime); err != nil {
			return err
		}
		if fig.Compare, err = measureCompare(o.verifyTime); err != nil {
			return err
		}
		if fig.SignCheck, err = measureSignCheck(o.verifyTime); err != nil {
			return err
		}
	}
	if o.signers == "also" {
		step("key backends")
		if fig.Signers, err = measureSigners(o, bin, dir); err != nil {
			return err
		}
	}
	if sizes, err := parseSizes(o.startup); err != nil {
		return err
	} else if fig.Startup, err = measureStartup(bin, dir, sizes, 9); err != nil {
		return err
	}
	fig.Summary = summarize(&fig)

	report(os.Stdout, &fig)
	reportWrite(os.Stdout, &fig)
	reportCPUFloor(os.Stdout, &fig)
	reportBase(os.Stdout, &fig)
	reportSigners(os.Stdout, fig.Signers)
	reportStartup(os.Stdout, fig.Startup)
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
	return grantClients(sock, n, "auto", nil)
}

// grantClients connects n typed clients, each with its own holder key, each
// asking for the bench's calendar grant (benchCaveats) and expecting it
// decided by want; events goes to client.Grant as it is.
func grantClients(sock string, n int, want string, events func(protocol.Event)) ([]op, func(), error) {
	var ops []op
	var clients []*client.Client
	closeAll := func() {
		for _, c := range clients {
			c.Close()
		}
	}
	cavs := benchCaveats()
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
		// No deadline, like the protocol client: the two cost the same
		// but for the client itself.
		ops = append(ops, func() error {
			res, err := c.Grant(context.Background(), key, cavs, events)
			if err == nil && res.Decision != want {
				err = fmt.Errorf("grant decided by %q, want %s", res.Decision, want)
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

// countRecords counts the records of the audit log, every segment of it.
func countRecords(path string) (int, error) {
	n := 0
	err := audit.Read(path, audit.Filter{}, func([]byte, *audit.Record) error { n++; return nil })
	return n, err
}

// auditBatch reads the audit log, every segment of it, and returns the
// mean number of issue records per group commit among those written within
// the windows.
func auditBatch(path string, windows [][2]time.Time) (float64, error) {
	records := 0
	groups := map[string]bool{}
	err := audit.Read(path, audit.Filter{}, func(_ []byte, rec *audit.Record) error {
		t, err := time.Parse(time.RFC3339Nano, rec.Time)
		if err != nil || rec.Kind != audit.KindIssue {
			return nil
		}
		if !slices.ContainsFunc(windows, func(w [2]time.Time) bool { return !t.Before(w[0]) && !t.After(w[1]) }) {
			return nil
		}
		records++
		groups[rec.Time] = true
		return nil
	})
	if err != nil {
		return 0, err
	}
	if len(groups) == 0 {
		return 0, fmt.Errorf("%s: no records written during the throughput runs", path)
	}
	return float64(records) / float64(len(groups)), nil
}

// lastIssueRecord returns the length, with its newline, of the last issue
// record in the audit log.
func lastIssueRecord(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	lines := bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		var rec struct{ Kind string }
		if json.Unmarshal(lines[i], &rec) == nil && rec.Kind == audit.KindIssue {
			return len(lines[i]) + 1, nil
		}
	}
	return 0, fmt.Errorf("%s: no issue record", path)
}

// profileDaemon records perf profiles of the daemon: under the load of s's
// clients for twice d into out, and under n requests of one client in
// sequence into out.seq. Read them with perf report -i FILE --children.
func profileDaemon(out string, pid int, s *system, n int, d time.Duration) error {
	step("perf: the daemon under %d clients for %v, then %d requests in sequence", len(s.ops), 2*d, n)
	stop, err := startPerf(out, pid)
	if err != nil {
		return err
	}
	_, err = measureThroughput(pid, s.ops, 2*d)
	stop()
	if err != nil {
		return err
	}
	if stop, err = startPerf(out+".seq", pid); err != nil {
		return err
	}
	_, err = measureLatency(pid, s.ops[0], 0, n)
	stop()
	return err
}

// startPerf records the daemon's CPU profile with perf until the returned
// function is called.
func startPerf(out string, pid int) (func(), error) {
	cmd := exec.Command("perf", "record", "-F", "999", "-g", "-p", fmt.Sprint(pid), "-o", out)
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf: %w", err)
	}
	// perf needs a moment to attach before the load starts.
	time.Sleep(300 * time.Millisecond)
	return func() {
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
	}, nil
}

// startCPUProfile profiles this process until the returned function is
// called. No file name, no profile.
func startCPUProfile(out string) (func(), error) {
	if out == "" {
		return func() {}, nil
	}
	f, err := os.Create(out)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
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
