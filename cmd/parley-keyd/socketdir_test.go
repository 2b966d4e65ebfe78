package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testpeer"
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
