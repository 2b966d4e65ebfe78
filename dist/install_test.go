package dist

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
)

// testUnavailable skips, or fails under PARLEY_REQUIRE_PEERS=1.
func testUnavailable(t *testing.T, reason string) { t.Helper(); testpeer.Unavailable(t, reason) }

// requireContainer returns only where a container with systemd can boot.
func requireContainer(t *testing.T) {
	t.Helper()
	testpeer.RequireRoot(t)
	for _, tool := range []string{"systemd-nspawn", "debootstrap", "nsenter", "make"} {
		if _, err := exec.LookPath(tool); err != nil {
			testUnavailable(t, "needs "+tool+" to boot a container with systemd (apt-get install systemd-container debootstrap)")
		}
	}
}

// TestPackageUnderSystemd is issue 21: the Debian package that make deb
// builds, installed with dpkg -i on a clean bookworm whose PID 1 is
// systemd, and nothing more than the README's init line.
func TestPackageUnderSystemd(t *testing.T) {
	requireContainer(t)
	testpeer.LockTree(t)
	out, err := exec.Command("make", "-C", "..", "deb").CombinedOutput()
	if err != nil {
		t.Fatalf("make deb: %v\n%s", err, out)
	}
	debs, _ := filepath.Glob("../build/parley-keyd_*.deb")
	if len(debs) != 1 {
		t.Fatalf("make deb made %q, want one package", debs)
	}
	// lintian meanwhile: clean, but for the overrides the package explains
	// (dist/debian/lintian-overrides).
	lint := make(chan string, 1)
	go func() {
		out, err := exec.Command("lintian", "--fail-on", "error,warning", debs[0]).CombinedOutput()
		if _, lookErr := exec.LookPath("lintian"); lookErr != nil {
			lint <- "lintian is not installed"
		} else if err != nil {
			lint <- fmt.Sprintf("lintian %s: %v\n%s", debs[0], err, out)
		}
		close(lint)
	}()
	defer func() {
		if msg, ok := <-lint; ok {
			if msg == "lintian is not installed" {
				testUnavailable(t, msg)
			}
			t.Error(msg)
		}
	}()
	c := newContainer(t)
	copyFile(t, debs[0], filepath.Join(c.root, "root/parley-keyd.deb"))
	c.sh("dpkg -i /root/parley-keyd.deb")
	i := &install{c: c, bin: "/usr/bin"}
	i.exercise(t)

	// Remove keeps the key, the log and the configuration; purge deletes
	// them. Nothing of the package is left.
	key := c.sh("cat /var/lib/parley-keyd/principal.pub")
	c.sh("dpkg -r parley-keyd")
	for _, gone := range []string{"/usr/bin/parley-keyd", "/usr/bin/parley-grant", "/lib/systemd/system/parley-keyd.service", "/run/parley-keyd/agent.sock"} {
		if out, err := c.try(10*time.Second, "test ! -e "+gone); err != nil {
			t.Errorf("after dpkg -r, %s is still there %s", gone, out)
		}
	}
	for _, kept := range []string{"/var/lib/parley-keyd/principal.key", "/var/lib/parley-keyd/audit.log", "/etc/parley-keyd/config.toml", "/etc/parley-keyd/policy.toml"} {
		if out, err := c.try(10*time.Second, "test -f "+kept); err != nil {
			t.Errorf("dpkg -r removed %s %s", kept, out)
		}
	}
	if got := c.sh("cat /var/lib/parley-keyd/principal.pub"); got != key {
		t.Errorf("after dpkg -r the public key is %q, was %q", got, key)
	}
	if s := c.sh("systemctl is-active parley-keyd.socket parley-keyd.service || true"); has(strings.Fields(s), "active") {
		t.Errorf("after dpkg -r the units are still active: %s", s)
	}
	c.sh("dpkg -P parley-keyd")
	for _, gone := range []string{"/var/lib/parley-keyd", "/etc/parley-keyd", "/etc/systemd/system/sockets.target.wants/parley-keyd.socket"} {
		if out, err := c.try(10*time.Second, "test ! -e "+gone+" && test ! -L "+gone); err != nil {
			t.Errorf("after dpkg -P, %s is still there %s", gone, out)
		}
	}
	if out, err := c.try(10*time.Second, "dpkg -L parley-keyd"); err == nil {
		t.Errorf("after dpkg -P, dpkg still knows the package:\n%s", out)
	}
}

// TestMakeInstallUnderSystemd is the source install of the README, make
// install in a tree where make build has run, on a machine without Go, then
// the same checks as the package's, then make uninstall.
func TestMakeInstallUnderSystemd(t *testing.T) {
	requireContainer(t)
	c := newContainer(t)
	src := filepath.Join(c.root, "root/src")
	os.MkdirAll(filepath.Join(src, "bin"), 0o755)
	func() {
		// The tree's lock only while make build runs and its output is
		// copied.
		defer testpeer.LockTree(t)()
		if out, err := exec.Command("make", "-C", "..", "build", "bin/docs").CombinedOutput(); err != nil {
			t.Fatalf("make build: %v\n%s", err, out)
		}
		for _, f := range []string{"Makefile", "dist", "bin/parley-keyd", "bin/parley-grant", "bin/docs"} {
			if out, err := exec.Command("cp", "-a", filepath.Join("..", f), filepath.Join(src, f)).CombinedOutput(); err != nil {
				t.Fatalf("cp %s: %v\n%s", f, err, out)
			}
		}
	}()
	if out, err := c.try(5*time.Second, "command -v go"); err == nil {
		t.Fatalf("the container has Go: %s", out)
	}
	before := c.sh("find /usr/local /etc/systemd | sort")
	c.sh("make -C /root/src install")
	// The README's steps after make install.
	c.sh("systemd-tmpfiles --create parley-keyd.conf && systemctl daemon-reload && systemctl enable --now parley-keyd.socket")
	i := &install{c: c, bin: "/usr/local/bin"}
	i.exercise(t)

	c.sh("systemctl disable --now parley-keyd.socket parley-keyd.service")
	c.sh("make -C /root/src uninstall")
	if after := c.sh("find /usr/local /etc/systemd | sort"); after != before {
		t.Errorf("make uninstall left behind what make install put in place:\n%s", diffLines(before, after))
	}
	for _, kept := range []string{"/var/lib/parley-keyd/principal.key", "/etc/parley-keyd/config.toml"} {
		if out, err := c.try(10*time.Second, "test -f "+kept); err != nil {
			t.Errorf("make uninstall removed %s %s", kept, out)
		}
	}
}

// install is one installation in a container, checked as an admin would.
type install struct {
	c   *container
	bin string
}

// The users of the checks: two agents and the human, in parley-agents as
// the README says; created in the container only.
var agents = []string{"calbot", "mailbot"}

func (i *install) exercise(t *testing.T) {
	c := i.c
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"users", i.users},
		{"init", i.init},
		{"two-agents", i.twoAgents},
		{"after-restart", func(t *testing.T) { c.sh("systemctl restart parley-keyd.service"); i.twoAgents(t) }},
		{"after-reboot", func(t *testing.T) { c.stop(true); i.twoAgents(t) }},
		{"status", i.status},
		{"reload", i.reload},
		{"limits", i.limits},
		{"credential", i.credential},
		{"watchdog", i.watchdog},
		{"crash", i.crash},
		{"journal", i.journal},
		{"config-error", i.configError},
		{"start-limit", i.startLimit},
	}
	for _, s := range steps {
		c.t = t
		ok := t.Run(s.name, func(t *testing.T) {
			c.t = t
			s.run(t)
		})
		c.t = t
		if !ok && (s.name == "users" || s.name == "init") {
			t.Fatalf("%s failed: the checks after it need it", s.name)
		}
	}
}

func (i *install) users(t *testing.T) {
	c := i.c
	if got := c.sh("getent passwd parley-keyd | cut -d: -f6,7"); got != "/var/lib/parley-keyd:/usr/sbin/nologin" {
		t.Errorf("the user parley-keyd: home and shell %q", got)
	}
	if got := c.sh("id -nG parley-keyd"); !strings.Contains(" "+got+" ", " parley-agents ") {
		t.Errorf("parley-keyd is in %q, not in parley-agents", got)
	}
	if got := c.sh("stat -c '%U:%G %a' /var/lib/parley-keyd /etc/parley-keyd"); got != "parley-keyd:parley-keyd 700\nroot:parley-keyd 750" {
		t.Errorf("the folders: %q", got)
	}
	if got := c.sh("systemctl is-enabled parley-keyd.socket; systemctl is-active parley-keyd.socket"); got != "enabled\nactive" {
		t.Errorf("the socket unit is %q, want enabled and active", got)
	}
	for _, u := range append(agents, "alice") {
		c.sh("id " + u + " >/dev/null 2>&1 || useradd --create-home --groups parley-agents " + u)
	}
}

// init is the README's line, with the second agent.
func (i *install) init(t *testing.T) {
	out := i.c.sh(i.bin + "/parley-keyd init --user parley-keyd --agent-user calbot --agent-user mailbot --approver-user alice")
	if !strings.Contains(out, "ed25519:") {
		t.Errorf("init printed no public key:\n%s", out)
	}
	for _, a := range agents {
		i.c.as(a, "test -f agent.key || parley-grant keygen --out agent.key")
	}
}

// twoAgents is issue 21's item 1: the first agent's connection starts the
// daemon; then the socket must still be parley-agents', and every other
// agent served too.
func (i *install) twoAgents(t *testing.T) {
	c := i.c
	for round := 0; round < 2; round++ {
		for _, a := range agents {
			if out, code := c.as(a, "parley-grant status"); code != 0 {
				t.Errorf("round %d: parley-grant status as %s: exit %d\n%s", round, a, code, out)
			}
		}
	}
	if got := c.sh("stat -c '%U:%G %a' /run/parley-keyd/agent.sock"); got != "parley-keyd:parley-agents 660" {
		t.Errorf("with the daemon running the socket is %q, want parley-keyd:parley-agents 660", got)
	}
	if got := c.prop("parley-keyd.service", "ActiveState"); got != "active" {
		t.Errorf("the service is %s after the agents' requests", got)
	}
}

// status is parley-keyd status on the install, and its socket check
// failing, with a hint that mends it, when the socket loses its group.
func (i *install) status(t *testing.T) {
	c := i.c
	if out, err := c.try(30*time.Second, i.bin+"/parley-keyd status"); err != nil {
		t.Errorf("parley-keyd status: %v\n%s", err, out)
	}
	c.sh("chgrp parley-keyd /run/parley-keyd/agent.sock")
	out, err := c.try(30*time.Second, i.bin+"/parley-keyd status")
	if err == nil || !strings.Contains(out, "fail  socket") || !strings.Contains(out, "systemctl restart parley-keyd.socket") {
		t.Errorf("parley-keyd status with the socket in group parley-keyd: %v, want a failed socket check with a hint to restart the socket\n%s", err, out)
	}
	c.sh("systemctl stop parley-keyd.service parley-keyd.socket && systemctl start parley-keyd.socket")
	if out, err := c.try(30*time.Second, i.bin+"/parley-keyd status"); err != nil {
		t.Errorf("parley-keyd status after the hint's restart: %v\n%s", err, out)
	}
}

const denyAll = `version = 1
[[agent]]
name = "bots"
user = ["calbot", "mailbot"]

[[rule]]
name = "nothing-today"
agents = ["bots"]
action = "deny"
`

// reload: systemctl reload applies a new policy; an invalid one leaves the
// old in force.
func (i *install) reload(t *testing.T) {
	c := i.c
	explain := "parley-grant explain --key agent.key --svc cal.example --can calendar.find"
	if out, code := c.as("calbot", explain); code != 0 {
		t.Fatalf("explain under the default policy: exit %d\n%s", code, out)
	}
	pid := c.prop("parley-keyd.service", "MainPID")
	c.sh("cp -p /etc/parley-keyd/policy.toml /root/policy.toml && cat > /etc/parley-keyd/policy.toml <<'EOF'\n" + denyAll + "EOF\nsystemctl reload parley-keyd.service")
	if out, code := c.as("calbot", explain); code != 4 {
		t.Errorf("explain after reloading a policy that denies: exit %d, want 4\n%s", code, out)
	}
	c.sh("echo 'version = [' > /etc/parley-keyd/policy.toml && systemctl reload parley-keyd.service")
	if out, code := c.as("calbot", explain); code != 4 {
		t.Errorf("explain after reloading an invalid policy: exit %d, want 4 (the old policy)\n%s", code, out)
	}
	c.sh("cp -p /root/policy.toml /etc/parley-keyd/policy.toml && systemctl reload parley-keyd.service")
	if out, code := c.as("calbot", explain); code != 0 {
		t.Errorf("explain after restoring the policy: exit %d\n%s", code, out)
	}
	if got := c.prop("parley-keyd.service", "MainPID"); got != pid {
		t.Errorf("reload restarted the daemon: pid %s, was %s", got, pid)
	}
}

// journal: the daemon's entries carry its identifier, priorities and
// fields: the audit records at notice with their sequence numbers, what it
// says of its work at info, and the watchdog's stop (above) at crit.
func (i *install) journal(t *testing.T) {
	out := i.c.sh("journalctl --unit parley-keyd.service --output json --no-pager")
	var audit, info, crit int
	for _, line := range strings.Split(out, "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) != nil || e["SYSLOG_IDENTIFIER"] != "parley-keyd" {
			continue
		}
		switch prio := str(e["PRIORITY"]); {
		case prio == "5" && str(e["PARLEY_AUDIT_SEQ"]) != "":
			audit++
		case prio == "6":
			info++
		case prio == "2" && strings.Contains(str(e["MESSAGE"]), "SIGABRT"):
			crit++
		}
	}
	if audit == 0 || info == 0 || crit == 0 {
		t.Errorf("the journal has %d audit entries at notice with PARLEY_AUDIT_SEQ, %d entries at info, %d watchdog stops at crit; want each\n%.3000s", audit, info, crit, out)
	}
}

func str(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return ""
}

// limits: MemoryMax= and TasksMax= reach the kernel. nspawn mounts the v1
// memory and pids controllers read-only; once they are writable, systemd
// re-executed applies the limits to the daemon's cgroup.
func (i *install) limits(t *testing.T) {
	c := i.c
	c.sh("mount -o remount,bind,rw /sys/fs/cgroup/memory && mount -o remount,bind,rw /sys/fs/cgroup/pids && systemctl daemon-reexec")
	c.sh("systemctl restart parley-keyd.service")
	cg := c.prop("parley-keyd.service", "ControlGroup")
	if got := c.sh("cat /sys/fs/cgroup/memory" + cg + "/memory.limit_in_bytes /sys/fs/cgroup/pids" + cg + "/pids.max"); got != strconv.Itoa(512<<20)+"\n128" {
		t.Errorf("the daemon's cgroup %s limits memory and tasks to %q, want 512 MiB and 128", cg, got)
	}
	pid := c.prop("parley-keyd.service", "MainPID")
	if got := c.sh("grep -c . /sys/fs/cgroup/pids" + cg + "/tasks; grep -x " + pid + " /sys/fs/cgroup/memory" + cg + "/tasks"); !strings.HasSuffix(got, "\n"+pid) {
		t.Errorf("the daemon (pid %s) is not in its limited cgroups: %q", pid, got)
	}
}

// credential: LoadCredentialEncrypted= with a credential sealed to the
// host key reaches the sandboxed daemon, as the key service's token would.
func (i *install) credential(t *testing.T) {
	c := i.c
	c.sh(`mkdir -p /etc/credstore.encrypted /etc/systemd/system/parley-keyd.service.d &&
printf %s 'token-for-the-test' | systemd-creds encrypt --with-key=host --name=bao-token - /etc/credstore.encrypted/bao-token &&
printf '[Service]\nLoadCredentialEncrypted=bao-token\n' > /etc/systemd/system/parley-keyd.service.d/credential.conf &&
systemctl daemon-reload && systemctl restart parley-keyd.service`)
	pid := c.prop("parley-keyd.service", "MainPID")
	if got := c.sh("cat /proc/" + pid + "/root/run/credentials/parley-keyd.service/bao-token; echo; stat -c '%U %a' /run/credentials/parley-keyd.service/bao-token"); got != "token-for-the-test\nparley-keyd 400" {
		t.Errorf("the daemon's credential: %q", got)
	}
	c.sh("rm -r /etc/systemd/system/parley-keyd.service.d /etc/credstore.encrypted && systemctl daemon-reload && systemctl restart parley-keyd.service")
}

// restarted waits until the service runs again under another pid than old.
func (i *install) restarted(what, old string, d time.Duration) {
	c := i.c
	c.waitFor(what, d, func() bool {
		pid := c.prop("parley-keyd.service", "MainPID")
		return pid != "0" && pid != old && c.prop("parley-keyd.service", "ActiveState") == "active"
	})
}

// watchdog is item 4: a stopped daemon is killed by the watchdog and
// restarted, and the journal gets one line of it, not every goroutine.
func (i *install) watchdog(t *testing.T) {
	c := i.c
	i.twoAgents(t)
	pid := c.prop("parley-keyd.service", "MainPID")
	restarts, _ := strconv.Atoi(c.prop("parley-keyd.service", "NRestarts"))
	c.sh("kill -STOP " + pid)
	i.restarted("a restart by the watchdog", pid, 90*time.Second)
	if n, _ := strconv.Atoi(c.prop("parley-keyd.service", "NRestarts")); n != restarts+1 {
		t.Errorf("NRestarts is %d, want %d", n, restarts+1)
	}
	lines := c.sh("journalctl --no-pager --output cat _PID=" + pid + " | grep -c . || true")
	if n, _ := strconv.Atoi(lines); n > 20 {
		t.Errorf("the wedged daemon wrote %d lines to the journal", n)
	}
	if out := c.sh("journalctl --no-pager --output cat _PID=" + pid + " | tail -3"); !strings.Contains(out, "SIGABRT") {
		t.Errorf("the journal does not say the watchdog stopped the daemon:\n%s", out)
	}
	if out, err := c.try(10*time.Second, "grep -q '^goroutine ' /var/lib/parley-keyd/watchdog.dump"); err != nil {
		t.Errorf("no goroutine stacks in the state folder: %v %s", err, out)
	}
	i.twoAgents(t)
}

// crash: a daemon killed outright is restarted and serves.
func (i *install) crash(t *testing.T) {
	pid := i.c.prop("parley-keyd.service", "MainPID")
	i.c.sh("kill -KILL " + pid)
	i.restarted("a restart after kill -9", pid, 30*time.Second)
	i.twoAgents(t)
}

// configError is item 2: a configuration error is not restarted; the agent
// is told at once; fixed, the daemon serves.
func (i *install) configError(t *testing.T) {
	c := i.c
	c.sh("cp -p /etc/parley-keyd/config.toml /root/config.toml && echo 'no_such_key = 1' >> /etc/parley-keyd/config.toml")
	c.try(30*time.Second, "systemctl restart parley-keyd.service")
	c.waitFor("the daemon failed", 30*time.Second, func() bool { return c.prop("parley-keyd.service", "ActiveState") == "failed" })
	if got := c.prop("parley-keyd.service", "ExecMainStatus"); got != "5" {
		t.Errorf("serve with an invalid configuration exited %s, want 5", got)
	}
	// RestartSec=2s: a restart would have come by now.
	restarts := c.prop("parley-keyd.service", "NRestarts")
	time.Sleep(4 * time.Second)
	if got := c.prop("parley-keyd.service", "NRestarts"); got != restarts || c.prop("parley-keyd.service", "ActiveState") != "failed" {
		t.Errorf("a configuration error was restarted: NRestarts %s, then %s", restarts, got)
	}
	start := time.Now()
	if out, code := c.as("calbot", "timeout 30 parley-grant status"); code == 0 || code == 124 {
		t.Errorf("parley-grant status with the daemon failed: exit %d\n%s", code, out)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("the agent waited %v to learn the daemon does not start", d)
	}
	c.sh("cp -p /root/config.toml /etc/parley-keyd/config.toml && systemctl reset-failed parley-keyd.service parley-keyd.socket; systemctl restart parley-keyd.socket")
	i.twoAgents(t)
}

// startLimit is item 2: a daemon that fails in a way a restart might mend
// is tried a few times, then left failed, socket included.
func (i *install) startLimit(t *testing.T) {
	c := i.c
	c.sh("chmod 0644 /var/lib/parley-keyd/principal.key")
	start := time.Now()
	c.try(30*time.Second, "systemctl restart parley-keyd.service")
	c.waitFor("the start limit", 90*time.Second, func() bool {
		return c.prop("parley-keyd.socket", "Result") == "service-start-limit-hit" && c.prop("parley-keyd.service", "ActiveState") == "failed"
	})
	t.Logf("start limit hit after %v, %s restarts", time.Since(start).Round(time.Second), c.prop("parley-keyd.service", "NRestarts"))
	if n, _ := strconv.Atoi(c.prop("parley-keyd.service", "NRestarts")); n > 5 {
		t.Errorf("%d restarts before the limit, want at most 5", n)
	}
	if out, code := c.as("calbot", "timeout 30 parley-grant status"); code == 0 || code == 124 {
		t.Errorf("parley-grant status with the daemon failed: exit %d\n%s", code, out)
	}
	c.sh("chmod 0600 /var/lib/parley-keyd/principal.key && systemctl reset-failed parley-keyd.service parley-keyd.socket; systemctl restart parley-keyd.socket")
	i.twoAgents(t)
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp %s: %v\n%s", src, err, out)
	}
}

// diffLines lists the lines only in a and only in b.
func diffLines(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var out []string
	for l := range mb {
		if !ma[l] {
			out = append(out, "+ "+l)
		}
	}
	for l := range ma {
		if !mb[l] {
			out = append(out, "- "+l)
		}
	}
	return strings.Join(out, "\n")
}
