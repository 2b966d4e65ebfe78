// Package clitest gives the command-line testscript files of parley-grant
// and parley-keyd (cmd/*/testdata/script) what they need beyond the
// testscript builtins: the other binary, a real daemon, background
// programs whose output can be waited on, and exit codes.
//
// Each cmd package's TestMain makes its own test binary the real binary
// (testscript.Main); Build compiles the other one, and Setup puts it on the
// scripts' PATH. The daemon in a script is the real "parley-keyd serve", on
// a socket in $WORK: "keyd start" waits for its sd_notify READY=1 on a
// socket of its own (the same readiness systemd waits for with Type=notify),
// "keyd reload" sends SIGHUP and waits for RELOADING=1 and READY=1, and
// "keyd stop" sends SIGTERM and waits for the exit. Nothing sleeps: every
// wait is on a condition, with a deadline.
//
// The commands, for scripts:
//
//	rc CODE PROG [ARGS...]     run PROG and check its exit code; stdout and
//	                           stderr are then checked as after exec
//	keyd start [SERVE-ARGS...] start parley-keyd serve in the background; its
//	                           stderr goes to $WORK/keyd.log
//	keyd reload|stop|kill      SIGHUP and wait; SIGTERM and wait (exit 0);
//	                           SIGKILL and wait
//	bg NAME PROG [ARGS...]     start PROG in the background; its output goes
//	                           to $WORK/NAME.stdout and $WORK/NAME.stderr
//	bgwait NAME CODE           wait for NAME to exit with CODE
//	waitfor FILE REGEXP [VAR...] wait until FILE matches REGEXP, and set VARs
//	                           to its groups
//	replace FILE OLD NEW       replace the one occurrence of OLD in FILE
//	envfile VAR FILE           set VAR to FILE's content, trimmed
//	[!] filemode FILE MODE     check FILE's permission bits (octal)
//	fileowner FILE USER GROUP  check FILE's owner and group (names)
//	pick FILE OUT N...         write lines N... of FILE (from 1, in that
//	                           order) to OUT: a log with one removed, two
//	                           swapped
package clitest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

// Deadline bounds every wait of a script command.
const Deadline = 60 * time.Second

// envNames are the variables a background program gets from the script.
// testscript lists no environment, so the list is fixed here.
var envNames = []string{
	"PATH", "HOME", "USER", "TMPDIR", "WORK", "LANG", "XDG_CONFIG_HOME",
	"PARLEY_KEYD_STATE", "PARLEY_KEYD_CONFIG_DIR", "PARLEY_KEYD_SOCKET",
	"PARLEY_KEYD_PASSPHRASE_FILE", "PARLEY_AGENT_KEY", "PARLEY_KEYD_USER",
	"GORACE",
}

var (
	buildMu  sync.Mutex
	builtDir = map[string]string{}
	buildErr = map[string]error{}
)

// Build compiles the named commands of this module (such as "parley-keyd")
// once per process into a folder every user can read, and returns it.
func Build(names ...string) (string, error) {
	key := strings.Join(names, " ")
	buildMu.Lock()
	defer buildMu.Unlock()
	if d, ok := builtDir[key]; ok || buildErr[key] != nil {
		return d, buildErr[key]
	}
	dir, err := os.MkdirTemp("", "parley-clitest-bin-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err == nil {
		args := []string{"build", "-o", dir + "/"}
		for _, n := range names {
			args = append(args, "github.com/parley-keyd/parley-keyd/cmd/"+n)
		}
		var out []byte
		if out, err = exec.Command("go", args...).CombinedOutput(); err != nil {
			err = fmt.Errorf("go build %s: %v: %s", key, err, out)
		}
	}
	builtDir[key], buildErr[key] = dir, err
	return dir, err
}

// Cleanup removes what Build made. Call it from TestMain after the tests.
func Cleanup() {
	buildMu.Lock()
	defer buildMu.Unlock()
	for _, d := range builtDir {
		os.RemoveAll(d)
	}
}

// Setup prepares a script's environment: bin (from Build) first on PATH,
// HOME in $WORK/home, the daemon's state, configuration and socket in
// $WORK, so that "parley-keyd init" and "keyd start" need no flags, and
// USER and MYUID naming the user the tests run as.
func Setup(env *testscript.Env, bin string) error {
	env.Setenv("PATH", bin+string(os.PathListSeparator)+env.Getenv("PATH"))
	env.Setenv("HOME", env.WorkDir+"/home")
	env.Setenv("XDG_CONFIG_HOME", "")
	env.Setenv("PARLEY_AGENT_KEY", "")
	env.Setenv("PARLEY_KEYD_STATE", env.WorkDir+"/state")
	env.Setenv("PARLEY_KEYD_CONFIG_DIR", env.WorkDir+"/etc")
	env.Setenv("PARLEY_KEYD_SOCKET", env.WorkDir+"/agent.sock")
	env.Setenv("PARLEY_KEYD_PASSPHRASE_FILE", "")
	u, err := user.Current()
	if err != nil {
		return err
	}
	env.Setenv("USER", u.Username)
	env.Setenv("MYUID", u.Uid)
	return nil
}

// Cmds returns the script commands described in the package comment.
func Cmds() map[string]func(ts *testscript.TestScript, neg bool, args []string) {
	return map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"rc":        cmdRC,
		"keyd":      cmdKeyd,
		"bg":        cmdBg,
		"bgwait":    cmdBgwait,
		"waitfor":   cmdWaitfor,
		"replace":   cmdReplace,
		"envfile":   cmdEnvfile,
		"filemode":  cmdFilemode,
		"fileowner": cmdFileowner,
		"pick":      cmdPick,
	}
}

// cmdReplace edits a file as an admin would: replace FILE OLD NEW. OLD must
// occur exactly once, so that a script cannot edit the wrong line.
func cmdReplace(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: replace FILE OLD NEW")
	}
	path := ts.MkAbs(args[0])
	b, err := os.ReadFile(path)
	ts.Check(err)
	if n := bytes.Count(b, []byte(args[1])); n != 1 {
		ts.Fatalf("replace: %q occurs %d times in %s", args[1], n, args[0])
	}
	fi, err := os.Stat(path)
	ts.Check(err)
	ts.Check(os.WriteFile(path, bytes.Replace(b, []byte(args[1]), []byte(args[2]), 1), fi.Mode().Perm()))
}

// cmdEnvfile sets an environment variable to a file's content without
// surrounding white space: envfile VAR FILE.
func cmdEnvfile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: envfile VAR FILE")
	}
	ts.Setenv(args[0], strings.TrimSpace(ts.ReadFile(args[1])))
}

func environ(ts *testscript.TestScript) []string {
	var env []string
	for _, n := range envNames {
		if v := ts.Getenv(n); v != "" {
			env = append(env, n+"="+v)
		}
	}
	return env
}

func lookPath(ts *testscript.TestScript, prog string) string {
	if strings.Contains(prog, "/") {
		return prog
	}
	for _, dir := range filepath.SplitList(ts.Getenv("PATH")) {
		p := filepath.Join(dir, prog)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	ts.Fatalf("%s is not on the script's PATH", prog)
	return ""
}

// cmdRC runs a program and checks its exit code: rc CODE PROG [ARGS...].
func cmdRC(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: rc CODE PROG [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("rc: bad code %q", args[0])
	}
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		got = ee.ExitCode()
	case err != nil:
		ts.Fatalf("rc: %v", err)
	}
	if got != want {
		ts.Fatalf("exit code %d, want %d", got, want)
	}
}

// proc is a background program of a script.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func start(ts *testscript.TestScript, stdout, stderr string, extraEnv []string, prog string, args ...string) *proc {
	cmd := exec.Command(lookPath(ts, prog), args...)
	cmd.Dir = ts.Getenv("WORK")
	cmd.Env = append(environ(ts), extraEnv...)
	open := func(name string) *os.File {
		f, err := os.OpenFile(ts.MkAbs(name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		ts.Check(err)
		return f
	}
	out, errf := open(stdout), open(stderr)
	cmd.Stdout, cmd.Stderr = out, errf
	ts.Check(cmd.Start())
	out.Close()
	errf.Close()
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	ts.Defer(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for p to exit within the deadline and returns its exit code.
func (p *proc) wait(ts *testscript.TestScript, what string) int {
	select {
	case <-p.done:
	case <-time.After(Deadline):
		ts.Fatalf("%s did not exit within %v", what, Deadline)
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0
	case errors.As(p.err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	ts.Fatalf("%s: %v", what, p.err)
	return -1
}

func cmdBg(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: bg NAME PROG [ARGS...]")
	}
	name := args[0]
	if bgProcs.Load(ts, name) != nil {
		ts.Fatalf("bg %s is already running", name)
	}
	p := start(ts, name+".stdout", name+".stderr", nil, args[1], args[2:]...)
	bgProcs.Store(ts, name, p)
}

func cmdBgwait(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: bgwait NAME CODE")
	}
	p, ok := bgProcs.Load(ts, args[0]).(*proc)
	if !ok {
		ts.Fatalf("no background program %s", args[0])
	}
	want, err := strconv.Atoi(args[1])
	ts.Check(err)
	if got := p.wait(ts, args[0]); got != want {
		ts.Fatalf("%s exited with %d, want %d\nstderr:\n%s", args[0], got, want, ts.ReadFile(args[0]+".stderr"))
	}
	bgProcs.Delete(ts, args[0])
}

func cmdWaitfor(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: waitfor FILE REGEXP [VAR...]")
	}
	re, err := regexp.Compile(`(?m)` + args[1])
	ts.Check(err)
	if re.NumSubexp() < len(args)-2 {
		ts.Fatalf("waitfor: %d variables but the pattern has %d groups", len(args)-2, re.NumSubexp())
	}
	path := ts.MkAbs(args[0])
	deadline := time.Now().Add(Deadline)
	for {
		b, _ := os.ReadFile(path)
		if m := re.FindSubmatch(b); m != nil {
			for i, v := range args[2:] {
				ts.Setenv(v, string(m[i+1]))
			}
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("%s did not match %q within %v; it holds:\n%s", args[0], args[1], Deadline, b)
		}
		time.Sleep(10 * time.Millisecond) // a file has nothing to wait on
	}
}

// bgProcs holds each script's background programs by name.
var bgProcs = &registry{m: map[*testscript.TestScript]map[string]any{}}

type registry struct {
	mu sync.Mutex
	m  map[*testscript.TestScript]map[string]any
}

func (r *registry) Store(ts *testscript.TestScript, name string, v any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m[ts] == nil {
		r.m[ts] = map[string]any{}
		ts.Defer(func() {
			r.mu.Lock()
			delete(r.m, ts)
			r.mu.Unlock()
		})
	}
	r.m[ts][name] = v
}

func (r *registry) Load(ts *testscript.TestScript, name string) any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[ts][name]
}

func (r *registry) Delete(ts *testscript.TestScript, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m[ts], name)
}

// daemon is a script's running parley-keyd.
type daemon struct {
	p      *proc
	notify *net.UnixConn
	dir    string
}

const daemonName = "\x00keyd"

// cmdKeyd starts, reloads and stops the script's daemon.
func cmdKeyd(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: keyd start [SERVE-ARGS...] | reload | stop | kill")
	}
	d, _ := bgProcs.Load(ts, daemonName).(*daemon)
	if args[0] != "start" && d == nil {
		ts.Fatalf("keyd %s: no daemon was started", args[0])
	}
	switch args[0] {
	case "start":
		if d != nil {
			ts.Fatalf("keyd start: a daemon runs already")
		}
		startDaemon(ts, args[1:])
	case "reload":
		ts.Check(d.p.cmd.Process.Signal(syscall.SIGHUP))
		d.expect(ts, "RELOADING=1")
		d.expect(ts, "READY=1")
	case "stop":
		ts.Check(d.p.cmd.Process.Signal(syscall.SIGTERM))
		if code := d.p.wait(ts, "parley-keyd"); code != 0 {
			ts.Fatalf("parley-keyd exited with %d after SIGTERM:\n%s", code, ts.ReadFile("keyd.log"))
		}
		d.close(ts)
	case "kill":
		ts.Check(d.p.cmd.Process.Signal(syscall.SIGKILL))
		d.p.wait(ts, "parley-keyd")
		d.close(ts)
	default:
		ts.Fatalf("keyd: unknown subcommand %q", args[0])
	}
}

func startDaemon(ts *testscript.TestScript, args []string) {
	// The notify socket's path must fit in sun_path (108 bytes): a short
	// folder of its own rather than one in $WORK.
	dir, err := os.MkdirTemp("", "kn")
	ts.Check(err)
	path := filepath.Join(dir, "n")
	nc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	ts.Check(err)
	d := &daemon{notify: nc, dir: dir}
	d.p = start(ts, "keyd.stdout", "keyd.log", []string{"NOTIFY_SOCKET=" + path}, "parley-keyd", append([]string{"serve"}, args...)...)
	bgProcs.Store(ts, daemonName, d)
	ts.Defer(func() { d.close(ts) })
	d.expect(ts, "READY=1")
}

// expect waits for a notification whose first line is state, skipping
// others, and fails when the daemon exits first.
func (d *daemon) expect(ts *testscript.TestScript, state string) {
	deadline := time.Now().Add(Deadline)
	buf := make([]byte, 4096)
	for {
		select {
		case <-d.p.done:
			ts.Fatalf("parley-keyd exited before %s:\n%s", state, ts.ReadFile("keyd.log"))
		default:
		}
		// Short reads, so that an exit is noticed while waiting.
		d.notify.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, err := d.notify.Read(buf)
		if err == nil {
			if first, _, _ := bytes.Cut(buf[:n], []byte("\n")); string(first) == state {
				return
			}
			continue
		}
		if time.Now().After(deadline) {
			ts.Fatalf("no %s from parley-keyd within %v:\n%s", state, Deadline, ts.ReadFile("keyd.log"))
		}
	}
}

func (d *daemon) close(ts *testscript.TestScript) {
	if d.notify != nil {
		d.notify.Close()
		os.RemoveAll(d.dir)
		d.notify = nil
	}
	bgProcs.Delete(ts, daemonName)
}

// cmdFilemode checks a file's permission bits: filemode FILE MODE (octal).
func cmdFilemode(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: filemode FILE MODE")
	}
	want, err := strconv.ParseUint(args[1], 8, 32)
	ts.Check(err)
	fi, err := os.Stat(ts.MkAbs(args[0]))
	ts.Check(err)
	got := uint64(fi.Mode().Perm())
	if (got == want) == neg {
		ts.Fatalf("%s has mode %s, want %s%s", args[0], fmt.Sprintf("%#o", got), map[bool]string{true: "not ", false: ""}[neg], args[1])
	}
}

// cmdFileowner checks a file's owner and group by name: fileowner FILE
// USER GROUP.
func cmdFileowner(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: fileowner FILE USER GROUP")
	}
	fi, err := os.Stat(ts.MkAbs(args[0]))
	ts.Check(err)
	st := fi.Sys().(*syscall.Stat_t)
	u, err := user.LookupId(strconv.FormatUint(uint64(st.Uid), 10))
	ts.Check(err)
	g, err := user.LookupGroupId(strconv.FormatUint(uint64(st.Gid), 10))
	ts.Check(err)
	if u.Username != args[1] || g.Name != args[2] {
		ts.Fatalf("%s belongs to %s:%s, want %s:%s", args[0], u.Username, g.Name, args[1], args[2])
	}
}

func cmdPick(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 3 {
		ts.Fatalf("usage: pick FILE OUT N...")
	}
	lines := strings.SplitAfter(ts.ReadFile(args[0]), "\n")
	var out strings.Builder
	for _, a := range args[2:] {
		n, err := strconv.Atoi(a)
		if err != nil || n < 1 || n > len(lines) || lines[n-1] == "" {
			ts.Fatalf("pick: %s has no line %s", args[0], a)
		}
		out.WriteString(lines[n-1])
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), []byte(out.String()), 0o600))
}

// Condition answers the scripts' own conditions: [root] holds when the
// tests run as root.
func Condition(cond string) (bool, error) {
	switch cond {
	case "root":
		return os.Geteuid() == 0, nil
	}
	return false, fmt.Errorf("unknown condition %q", cond)
}
