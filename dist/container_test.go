package dist

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The container: a Debian bookworm (debootstrap's minbase and what the
// include list adds) whose PID 1 is systemd, in systemd-nspawn. The base is
// made once and kept in baseCache, outside the repository; each run boots a
// copy of it, which the test removes.
const (
	baseCache   = "/var/cache/parley-ci"
	baseName    = "bookworm-minbase-1" // bump when the include list changes
	baseInclude = "systemd,systemd-sysv,dbus,libpam-systemd,make"
	suite       = "bookworm"
)

// container is one booted copy of the base.
type container struct {
	t      *testing.T
	root   string
	name   string
	cmd    *exec.Cmd
	exited chan error
	leader int // the container's PID 1, as the host sees it
	log    *os.File
}

// boot starts systemd in the container and waits until it reports the
// system running. --keep-unit and --register=no: the host's PID 1 need not
// be systemd; CAP_IPC_LOCK for the daemon's mlock.
func (c *container) boot() {
	c.t.Helper()
	cmd := exec.Command("systemd-nspawn", "--quiet", "--boot", "--directory", c.root, "--machine", c.name,
		"--keep-unit", "--register=no", "--private-network", "--capability=CAP_IPC_LOCK", "--console=passive")
	cmd.Stdout, cmd.Stderr = c.log, c.log
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("systemd-nspawn: %v", err)
	}
	c.cmd = cmd
	c.exited = make(chan error, 1)
	go func() { c.exited <- cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for c.leader = 0; c.leader == 0; {
		select {
		case err := <-c.exited:
			c.cmd = nil
			c.t.Fatalf("the container did not boot: systemd-nspawn: %v\n%s", err, c.logTail())
		default:
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the container's systemd did not start in 60 s\n%s", c.logTail())
		}
		c.leader = childNamed(cmd.Process.Pid, "systemd")
		time.Sleep(50 * time.Millisecond)
	}
	// Until systemd listens on its private bus, systemctl cannot ask.
	for {
		out, _ := c.try(90*time.Second, "systemctl is-system-running --wait")
		state := strings.TrimSpace(out)
		if state == "running" || state == "degraded" {
			break
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the container's systemd is %q, not running\n%s", state, c.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// childNamed returns the child process of ppid whose command is name, or 0.
func childNamed(ppid int, name string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		j := strings.IndexByte(s, '(')
		if i < 0 || j < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) && s[j+1:i] == name {
			return pid
		}
	}
	return 0
}

func (c *container) logTail() string {
	b, _ := os.ReadFile(c.log.Name())
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

// try runs a shell script in the container (all its namespaces, as root),
// with a deadline, and returns its output, stdout and stderr together.
func (c *container) try(d time.Duration, script string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", "--target", strconv.Itoa(c.leader), "--all", "--",
		"/usr/bin/env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8",
		"/bin/sh", "-c", script)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		err = fmt.Errorf("still running after %v: %w", d, err)
	}
	return string(out), err
}

// sh runs a script that must succeed, and returns its output.
func (c *container) sh(script string) string {
	c.t.Helper()
	out, err := c.try(2*time.Minute, script)
	if err != nil {
		c.t.Fatalf("in the container: %s\n%v\n%s", script, err, out)
	}
	return strings.TrimSpace(out)
}

// as runs a command as user in the container, from its home, and returns
// its output and exit status.
func (c *container) as(user, command string) (string, int) {
	out, err := c.try(30*time.Second, "cd ~"+user+" && exec runuser -u "+user+" -- sh -c '"+command+"'")
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out, 0
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return out, ee.ExitCode()
	}
	return out + err.Error(), -1
}

// prop returns a property of a unit, as systemctl show says it.
func (c *container) prop(unit, name string) string {
	c.t.Helper()
	return c.sh("systemctl show --property " + name + " --value " + unit)
}

// waitFor waits until cond holds, failing the test after d.
func (c *container) waitFor(what string, d time.Duration, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: not within %v\n%s", what, d, c.sh("systemctl status --no-pager --lines 30 parley-keyd.socket parley-keyd.service || true"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stop powers the container off (reboot: reboots it and boots it again).
func (c *container) stop(reboot bool) {
	c.t.Helper()
	verb := "poweroff"
	if reboot {
		verb = "reboot"
	}
	c.try(10*time.Second, "systemctl --no-block "+verb)
	select {
	case <-c.exited:
	case <-time.After(90 * time.Second):
		c.kill()
		c.t.Errorf("the container did not %s in 90 s", verb)
	}
	c.cmd = nil
	if reboot {
		c.boot()
	}
}

// kill ends the container at once: its PID 1 first, with which the kernel
// ends every process of its PID namespace (nspawn killed alone would leave
// them running), then nspawn.
func (c *container) kill() {
	if c.leader != 0 {
		syscall.Kill(c.leader, syscall.SIGKILL)
	}
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		<-c.exited
	}
}

// newContainer copies the base and boots it; the test's end powers it off
// and removes it, and the cgroups its systemd made on the host.
func newContainer(t *testing.T) *container {
	t.Helper()
	base := baseRootfs(t)
	dir := t.TempDir()
	c := &container{t: t, root: filepath.Join(dir, "root"), name: fmt.Sprintf("parleyci%d", os.Getpid())}
	if out, err := exec.Command("cp", "-a", "--reflink=auto", base, c.root).CombinedOutput(); err != nil {
		t.Fatalf("copying the base: %v\n%s", err, out)
	}
	log, err := os.Create(filepath.Join(dir, "console.log"))
	if err != nil {
		t.Fatal(err)
	}
	c.log = log
	before := hostCgroups()
	t.Cleanup(func() {
		if c.cmd != nil {
			c.try(10*time.Second, "systemctl --no-block poweroff")
			select {
			case <-c.exited:
			case <-time.After(60 * time.Second):
				c.kill()
			}
		}
		removeNewCgroups(before)
		if t.Failed() {
			if dst := os.Getenv("PARLEY_ARTIFACTS"); dst != "" {
				exec.Command("cp", log.Name(), filepath.Join(dst, "container-"+strings.ReplaceAll(t.Name(), "/", "-")+".log")).Run()
			}
		}
		log.Close()
	})
	c.boot()
	return c
}

// hostCgroups lists the cgroup folders of the host's v1 hierarchies that
// the container's systemd may write into (it has no cgroup namespace).
func hostCgroups() map[string]bool {
	seen := map[string]bool{}
	for _, h := range []string{"memory", "pids", "systemd", "unified"} {
		filepath.WalkDir("/sys/fs/cgroup/"+h, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				seen[path] = true
			}
			return nil
		})
	}
	return seen
}

// removeNewCgroups removes the (empty) cgroups the container left behind.
func removeNewCgroups(before map[string]bool) {
	var fresh []string
	for path := range hostCgroups() {
		if !before[path] {
			fresh = append(fresh, path)
		}
	}
	// Deepest first.
	for len(fresh) > 0 {
		longest := 0
		for i, p := range fresh {
			if len(p) > len(fresh[longest]) {
				longest = i
			}
		}
		syscall.Rmdir(fresh[longest])
		fresh = append(fresh[:longest], fresh[longest+1:]...)
	}
}

// baseRootfs returns the kept base, made first with debootstrap from the
// Debian mirror the host's apt uses when it is not there.
func baseRootfs(t *testing.T) string {
	t.Helper()
	base := filepath.Join(baseCache, baseName)
	if _, err := os.Stat(filepath.Join(base, "usr/lib/systemd/systemd")); err == nil {
		return base
	}
	if err := os.MkdirAll(baseCache, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(baseCache, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(base, "usr/lib/systemd/systemd")); err == nil {
		return base // another test process made it meanwhile
	}
	mirror, err := aptMirror()
	if err != nil {
		testUnavailable(t, "no Debian mirror for debootstrap: "+err.Error())
	}
	tmp := base + ".new"
	os.RemoveAll(tmp)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--include="+baseInclude, suite, tmp, mirror).CombinedOutput()
	if err != nil {
		os.RemoveAll(tmp)
		if len(out) > 4000 {
			out = out[len(out)-4000:]
		}
		t.Fatalf("debootstrap: %v\n%s", err, out)
	}
	// The container's own: no host name, no machine id, no apt lists.
	os.WriteFile(filepath.Join(tmp, "etc/hostname"), []byte("parleyci\n"), 0o644)
	os.WriteFile(filepath.Join(tmp, "etc/machine-id"), nil, 0o444)
	if err := os.Rename(tmp, base); err != nil {
		t.Fatal(err)
	}
	t.Logf("made the base %s with debootstrap in %v", base, time.Since(start).Round(time.Second))
	return base
}

// aptMirror reads, from the host's apt sources, the first URI that serves
// the suite's main component (deb822 .sources files, then one-line lists).
func aptMirror() (string, error) {
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, stanza := range strings.Split(string(data), "\n\n") {
			fields := map[string][]string{}
			for _, l := range strings.Split(stanza, "\n") {
				if k, v, ok := strings.Cut(l, ":"); ok && !strings.HasPrefix(l, "#") {
					fields[strings.ToLower(strings.TrimSpace(k))] = strings.Fields(v)
				}
			}
			if has(fields["types"], "deb") && has(fields["suites"], suite) && has(fields["components"], "main") && len(fields["uris"]) > 0 {
				return fields["uris"][0], nil
			}
		}
	}
	lists, _ := filepath.Glob("/etc/apt/sources.list.d/*.list")
	for _, f := range append([]string{"/etc/apt/sources.list"}, lists...) {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			w := strings.Fields(sc.Text())
			// deb [options] URI suite components...
			if len(w) > 0 && w[0] == "deb" {
				w = w[1:]
				if len(w) > 0 && strings.HasPrefix(w[0], "[") {
					for len(w) > 0 && !strings.HasSuffix(w[0], "]") {
						w = w[1:]
					}
					w = w[1:]
				}
				if len(w) >= 3 && w[1] == suite && has(w[2:], "main") {
					fh.Close()
					return w[0], nil
				}
			}
		}
		fh.Close()
	}
	return "", fmt.Errorf("no apt source serves %s main", suite)
}

func has(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
