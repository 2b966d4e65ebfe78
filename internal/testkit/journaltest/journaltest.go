// Package journaltest runs a test against a real systemd-journald: it runs
// the test binary again in a private mount namespace, where a journald of
// its own listens at /run/systemd/journal and writes to a tmpfs, and reads
// the entries back with journalctl. systemd need not be PID 1.
//
// It needs root, unshare, /lib/systemd/systemd-journald and journalctl; a
// missing one skips the test, or fails it under PARLEY_REQUIRE_PEERS=1
// (see testpeer).
package journaltest

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
)

const envHelper = "PARLEY_JOURNALTEST_HELPER"

const unavailableMark = "JOURNAL-UNAVAILABLE: "

// InHelper reports whether this process is the helper Run started.
func InHelper() bool { return os.Getenv(envHelper) != "" }

// Run runs the test named helper of this test binary in a private mount
// namespace and fails t when it fails. The helper calls Start first.
func Run(t *testing.T, helper string) {
	t.Helper()
	testpeer.RequireRoot(t)
	for _, tool := range []string{"unshare", "/lib/systemd/systemd-journald", "journalctl"} {
		if _, err := exec.LookPath(tool); err != nil {
			testpeer.Unavailable(t, "needs "+tool)
		}
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", os.Args[0], "-test.run=^"+helper+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), envHelper+"=1")
	out, err := cmd.CombinedOutput()
	if i := bytes.Index(out, []byte(unavailableMark)); i >= 0 {
		testpeer.Unavailable(t, string(out[i:]))
	}
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+helper)) {
		t.Fatalf("%s in a private mount namespace: %v\n%s", helper, err, out)
	}
	t.Logf("%s", out)
}

// Start mounts a tmpfs on /run/systemd and /run/log (in the helper's own
// mount namespace), starts journald, waits for its socket, and returns the
// folder its journal files go to. journald stops when the test ends.
func Start(t *testing.T) string {
	t.Helper()
	if !InHelper() {
		t.Fatal("journaltest.Start outside journaltest.Run")
	}
	os.MkdirAll("/run/log", 0o755)
	for _, dir := range []string{"/run/systemd", "/run/log"} {
		if out, err := exec.Command("mount", "-t", "tmpfs", "tmpfs", dir).CombinedOutput(); err != nil {
			t.Fatalf(unavailableMark+"mount %s: %v: %s", dir, err, out)
		}
	}
	os.MkdirAll("/run/systemd/journal", 0o755)
	jd := exec.Command("/lib/systemd/systemd-journald")
	var out bytes.Buffer
	jd.Stdout, jd.Stderr = &out, &out
	if err := jd.Start(); err != nil {
		t.Fatalf(unavailableMark+"start journald: %v", err)
	}
	t.Cleanup(func() { jd.Process.Kill(); jd.Wait() })
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := os.Stat("/run/systemd/journal/socket"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("journald did not open its socket: %s", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	machine, _ := os.ReadFile("/etc/machine-id")
	return filepath.Join("/run/log/journal", strings.TrimSpace(string(machine)))
}

// Entries returns the entries of the journal in dir that match the
// journalctl matches (FIELD=value), once there are at least min of them
// (waiting up to 20 seconds), as journalctl -o json gives them.
func Entries(t *testing.T, dir string, min int, matches ...string) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		args := append([]string{"--directory", dir, "-o", "json", "--no-pager"}, matches...)
		out, err := exec.Command("journalctl", args...).Output()
		var entries []map[string]any
		if err == nil {
			for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
				var e map[string]any
				if json.Unmarshal(line, &e) == nil {
					entries = append(entries, e)
				}
			}
		}
		if len(entries) >= min || time.Now().After(deadline) {
			return entries
		}
		time.Sleep(10 * time.Millisecond)
	}
}
