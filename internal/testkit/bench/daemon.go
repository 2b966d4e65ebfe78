package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/client"
)

// benchPolicy issues calendar grants at once to any caller. The rate is the
// policy's maximum, so that the limiter, which runs on every request, never
// refuses one during a run.
const benchPolicy = `version = 1
[[agent]]
name = "bench"
any = true
rate = 100000
pending = 8

[[rule]]
name = "calendar-auto"
agents = ["bench"]
action = "auto"
svc = ["cal.example"]
can = ["calendar.*"]
max_exp = "1h"
`

// keydProfileEnv names the file parley-keyd serve writes a CPU profile of
// its run to (cmd/parley-keyd); the bench sets it with -pprof.
const keydProfileEnv = "PARLEY_KEYD_CPUPROFILE"

// daemon is a parley-keyd serve process started from the real binary.
type daemon struct {
	bin, state, sock string
	cmd              *exec.Cmd
	exited           chan error
	stderr           bytes.Buffer
	stopped          bool
	stopErr          error
}

// buildKeyd builds cmd/parley-keyd into dir and returns the binary's path.
// With profile, the binary has the profiler that -pprof asks for (build tag
// "profile", cmd/parley-keyd/profile.go).
func buildKeyd(dir string, profile bool) (string, error) {
	args := []string{"build", "-o", filepath.Join(dir, "build") + "/"}
	if profile {
		args = append(args, "-tags", "profile")
	}
	out, err := exec.Command("go", append(args, "github.com/parley-keyd/parley-keyd/cmd/parley-keyd")...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build parley-keyd: %v: %s", err, out)
	}
	return installCopy(filepath.Join(dir, "build", "parley-keyd"), dir)
}

// installCopy copies the binary bin into dir as install(1) does, which is
// what make install runs, and returns the copy's path. The daemon's
// resident memory is mostly its binary's pages, and how many of them the
// kernel maps into the process depends on how the file came into the page
// cache: the same bytes run at 17.9 MiB idle as the Go linker or one large
// write(2) left them, at 14.7 MiB as install(1) or cp(1) (copy_file_range)
// left them (docs/performance.md). Deployments run installed binaries.
func installCopy(bin, dir string) (string, error) {
	dst := filepath.Join(dir, filepath.Base(bin))
	for i := 2; ; i++ {
		if _, err := os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
			break
		}
		dst = filepath.Join(dir, fmt.Sprintf("%s-%d", filepath.Base(bin), i))
	}
	out, err := exec.Command("install", "-m", "0755", bin, dst).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("install %s: %v: %s", bin, err, out)
	}
	return dst, nil
}

// initState creates a state folder with a new principal key, a configuration
// that lets the current user connect as an agent, and benchPolicy.
func initState(bin, dir string) (state, sock string, err error) {
	u, err := user.Current()
	if err != nil {
		return "", "", err
	}
	state = filepath.Join(dir, "state")
	sock = filepath.Join(dir, "keyd.sock")
	if err := os.Mkdir(state, 0o700); err != nil {
		return "", "", err
	}
	out, err := exec.Command(bin, "init", "--state", state, "--config-dir", state, "--socket", sock, "--agent-user", u.Username).CombinedOutput()
	if err != nil {
		return "", "", fmt.Errorf("parley-keyd init: %v: %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(state, "policy.toml"), []byte(benchPolicy), 0o640); err != nil {
		return "", "", err
	}
	return state, sock, nil
}

// startDaemon runs parley-keyd serve and returns once it has answered a
// HELLO, with the time from exec to that answer.
func startDaemon(bin, state, sock string) (*daemon, time.Duration, error) {
	d := &daemon{bin: bin, state: state, sock: sock, exited: make(chan error, 1)}
	d.cmd = exec.Command(bin, "serve", "--state", state, "--config", filepath.Join(state, "config.toml"))
	d.cmd.Stderr = &d.stderr
	d.cmd.Env = []string{"PATH=/usr/bin:/bin"}
	t0 := time.Now()
	if err := d.cmd.Start(); err != nil {
		return nil, 0, err
	}
	go func() { d.exited <- d.cmd.Wait() }()
	deadline := t0.Add(10 * time.Second)
	for {
		select {
		case err := <-d.exited:
			return nil, 0, fmt.Errorf("parley-keyd serve exited: %v\n%s", err, d.stderr.String())
		default:
		}
		if ok := helloOnce(sock); ok {
			return d, time.Since(t0), nil
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, 0, fmt.Errorf("parley-keyd did not answer within 10s\n%s", d.stderr.String())
		}
		// Polling the socket: the daemon offers no readiness signal but
		// accepting. The step bounds the measurement's resolution.
		time.Sleep(200 * time.Microsecond)
	}
}

// helloOnce connects and completes one HELLO.
func helloOnce(sock string) bool {
	c, err := client.Dial(sock)
	if err != nil {
		return false
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.Hello(ctx)
	return err == nil
}

// stop ends the daemon with SIGTERM and waits for it. Calling it again
// returns the first result.
func (d *daemon) stop() error {
	if d.stopped {
		return d.stopErr
	}
	d.stopped = true
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case d.stopErr = <-d.exited:
	case <-time.After(15 * time.Second):
		d.cmd.Process.Kill()
		<-d.exited
		d.stopErr = errors.New("parley-keyd did not stop on SIGTERM")
	}
	return d.stopErr
}

// rssKiB reads a process's resident set size from /proc: the memory the
// kernel counts against it, binary pages touched included.
func rssKiB(pid int) (int, error) {
	return procStatus(pid, "VmRSS")
}

// cpuTime returns the user and system CPU time a process has used, from
// /proc/PID/stat (fields 14 and 15, in clock ticks of 1/100 s on Linux).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad times %q %q", pid, f[11], f[12])
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

func procStatus(pid int, field string) (int, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		v, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/status %s: %q", pid, field, rest)
		}
		return v, nil
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// openIdle opens n connections that each complete one HELLO and then stay
// idle, and returns them for the caller to close.
func openIdle(sock string, n int) ([]net.Conn, error) {
	conns := make([]net.Conn, 0, n)
	hello := []byte(`{"parley":1,"id":"1","verb":"HELLO"}` + "\n")
	for i := 0; i < n; i++ {
		nc, err := net.Dial("unix", sock)
		if err != nil {
			closeAll(conns)
			return nil, fmt.Errorf("connection %d: %w", i+1, err)
		}
		conns = append(conns, nc)
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Write(hello); err != nil {
			closeAll(conns)
			return nil, fmt.Errorf("connection %d: %w", i+1, err)
		}
		line, err := bufio.NewReader(nc).ReadBytes('\n')
		if err != nil || !bytes.Contains(line, []byte(`"kind":"BRIEF"`)) {
			closeAll(conns)
			return nil, fmt.Errorf("connection %d: HELLO answered %q: %v", i+1, line, err)
		}
		nc.SetDeadline(time.Time{})
	}
	return conns, nil
}

func closeAll(conns []net.Conn) {
	for _, c := range conns {
		c.Close()
	}
}

// cpuTimeFine returns the CPU time the threads of a process have used so
// far, in nanoseconds, from /proc/PID/task/*/schedstat: precise where
// cpuTime counts ticks of 10 ms, for short phases such as the floor's echo
// round trips. Threads that have exited are not counted.
func cpuTimeFine(pid int) (time.Duration, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // exited meanwhile
		}
		f := strings.Fields(string(b))
		if len(f) < 1 {
			continue
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/task/%s/schedstat: %q", pid, t.Name(), b)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}
