package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
)

// TestLimitsSocketFolder is item 8 of the review: a socket folder that
// other users can write lets one of them replace the daemon's socket. The
// daemon refuses to start on one, and says how to fix it.
func TestLimitsSocketFolder(t *testing.T) {
	e := newE2E(t)
	for _, tc := range []struct {
		name string
		mode os.FileMode
	}{
		{"fail/world-writable", 0o777},
		{"fail/sticky-world-writable", 0o777 | os.ModeSticky},
		{"fail/group-writable", 0o775},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(e.base, strings.TrimPrefix(tc.name, "fail/"))
			os.Mkdir(dir, 0o755)
			os.Chown(dir, int(e.daemon.uid), int(e.daemon.gid))
			os.Chmod(dir, tc.mode)
			sock := filepath.Join(dir, "agent.sock")
			cmd := testpeer.RunAs(e.daemon.uid, e.daemon.gid, nil, filepath.Join(e.bin, "parley-keyd"), "serve", "--state", e.state, "--config", filepath.Join(e.etc, "config.toml"), "--socket", sock)
			cmd.Env = []string{"PATH=/usr/bin:/bin"}
			errb := &syncBuffer{}
			cmd.Stderr = errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			deadline := time.After(15 * time.Second)
			for {
				select {
				case err := <-exited:
					if err == nil || !strings.Contains(errb.String(), dir) || !strings.Contains(errb.String(), "chmod") {
						t.Errorf("serve with the socket in a %v folder: %v, stderr %q; want a refusal naming the folder and chmod", tc.mode, err, errb)
					}
					return
				case <-deadline:
					cmd.Process.Kill()
					<-exited
					t.Fatalf("serve neither started nor refused: %s", errb)
				case <-time.After(10 * time.Millisecond):
				}
				if c, err := net.Dial("unix", sock); err == nil {
					c.Close()
					cmd.Process.Kill()
					<-exited
					t.Errorf("the daemon serves a socket in a %v folder", tc.mode)
					return
				}
			}
		})
	}
}

// serveOn runs serve as the daemon's user on sock until it exits or a
// client can connect, and returns its stderr, whether it served, and its
// exit code.
func (e *e2e) serveOn(t *testing.T, sock string) (stderr string, served bool, code int) {
	t.Helper()
	cmd := testpeer.RunAs(e.daemon.uid, e.daemon.gid, nil, filepath.Join(e.bin, "parley-keyd"), "serve", "--state", e.state, "--config", filepath.Join(e.etc, "config.toml"), "--socket", sock)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	errb := &syncBuffer{}
	cmd.Stderr = errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case <-exited:
			return errb.String(), false, cmd.ProcessState.ExitCode()
		case <-deadline:
			cmd.Process.Kill()
			<-exited
			t.Fatalf("serve neither started nor failed: %s", errb)
		case <-time.After(10 * time.Millisecond):
		}
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			cmd.Process.Signal(os.Interrupt)
			<-exited
			return errb.String(), true, cmd.ProcessState.ExitCode()
		}
	}
}

// TestStaleSocketRootFolder is leaving socket activation: a trial with
// systemd-socket-activate, run as root, left /run/parley-keyd root's with
// its socket in it, and the daemon, as its own user, failed with
// "removing the stale socket …: permission denied" and no hint. The hint
// names the owner that is safe (the daemon's user) and keeps the mode;
// following it, the daemon starts. It never suggests opening the folder.
func TestStaleSocketRootFolder(t *testing.T) {
	e := newE2E(t)
	for _, stale := range []bool{true, false} {
		name := "fail/empty-root-folder"
		if stale {
			name = "fail/stale-socket-in-root-folder"
		}
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(e.base, strings.TrimPrefix(name, "fail/"))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			sock := filepath.Join(dir, "agent.sock")
			if stale {
				// As systemd-socket-activate leaves it: a socket file
				// nobody listens on.
				l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
				if err != nil {
					t.Fatal(err)
				}
				l.SetUnlinkOnClose(false)
				l.Close()
			}
			stderr, served, code := e.serveOn(t, sock)
			if served || code != exitFail {
				t.Fatalf("served %v, exit %d: %s", served, code, stderr)
			}
			_, hint, _ := strings.Cut(stderr, "\nhint: ")
			wants := []string{"belongs to root", "mode 0755", "sudo chown " + e2eDaemonUser + ": " + dir, "keeping its mode"}
			if stale {
				wants = append(wants, "sudo rm "+sock)
			}
			for _, want := range wants {
				if !strings.Contains(hint, want) {
					t.Errorf("the hint does not say %q:\n%s", want, stderr)
				}
			}
			if strings.Contains(hint, "chmod") || strings.Contains(hint, "777") {
				t.Errorf("the hint suggests a wider mode:\n%s", stderr)
			}
			// Following the hint starts the daemon.
			os.Remove(sock)
			os.Chown(dir, int(e.daemon.uid), int(e.daemon.gid))
			if stderr, served, _ := e.serveOn(t, sock); !served {
				t.Errorf("after the hint's fix, serve failed: %s", stderr)
			}
		})
	}
}
