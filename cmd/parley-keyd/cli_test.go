package main

import (
	"bytes"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The admin's command lines are tested by the scripts in testdata/script
// (TestScripts). What stays in Go needs what a script cannot have: other
// OS users (e2e_test.go), or a phone's HTTP client (phone_test.go).

// keydCmd runs the real parley-keyd binary as the current user.
func keydCmd(t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.Command(filepath.Join(binaries(t), "parley-keyd"), args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{out.String(), errb.String(), code}
}

// waitForSocket waits until the daemon accepts on sock.
func waitForSocket(t *testing.T, sock string, log *syncBuffer) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not accept on %s:\n%s", sock, log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
