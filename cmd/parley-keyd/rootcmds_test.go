package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// TestRootCommandsRefusePlanted is the attack of issue 20, item 5: the
// daemon's user, who owns the state folder, plants a symbolic link into a
// folder only root may write, a named pipe, or a hard link to a file of
// root's, where a command root runs on the folder reads or writes. Every
// such command must refuse at once, saying what it found, and leave
// everything outside the folder as it was: nothing created, written,
// truncated, chowned or chmodded there. Each command also runs on an
// unplanted copy of the folder, as root, and works: acting as the folder's
// owner takes nothing from the admin.
func TestRootCommandsRefusePlanted(t *testing.T) {
	e := newE2E(t)
	e.start() // an audit log, a reported head
	e.stop(syscall.SIGTERM)
	pristine := e.state

	// Root's own folder, outside the state folder: the passphrase and
	// backup files an admin keeps, and the file a hard link reaches.
	root := filepath.Join(e.base, "rootonly")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatal(err)
	}
	bpass := filepath.Join(root, "bpass")
	backup := filepath.Join(root, "backup.age")
	must(t, os.WriteFile(bpass, []byte("a backup passphrase\n"), 0o600))
	e.as(ids{0, 0}, 0, "parley-keyd", "key", "backup", "--state", pristine, "--out", backup, "--backup-passphrase-file", bpass)
	// pair needs the phone page on.
	cfg, err := os.ReadFile(filepath.Join(e.etc, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	pairCfg := filepath.Join(e.etc, "pair.toml")
	on := bytes.Replace(cfg, []byte("[phone]\n"), []byte("[phone]\nlisten = \"127.0.0.1:7450\"\n"), 1)
	on = bytes.Replace(on, []byte("listen = \"\"\n"), nil, 1)
	e.writeOwned(pairCfg, string(on))

	type command struct {
		name  string
		plant string // the name in the state folder the command touches
		args  []string
		clean int // its exit code on an unplanted folder
		prep  func(state string)
		extra func(state string) []string // more arguments, naming files in the folder
	}
	argv := func(c command, state string) []string {
		args := append(append([]string{}, c.args...), "--state", state)
		if c.extra != nil {
			args = append(args, c.extra(state)...)
		}
		return args
	}
	noKey := func(state string) { os.Remove(filepath.Join(state, "principal.key")) }
	commands := []command{
		{"devices-revoke", "phone-devices.lock", []string{"devices", "revoke", "pixel"}, 1, nil, nil},
		{"devices-confirm", "phone-devices.lock", []string{"devices", "confirm", "pixel", "1234"}, 1, nil, nil},
		{"devices-list", "phone-devices.json", []string{"devices"}, 0, nil, nil},
		{"pair", "phone-devices.lock", []string{"pair", "--no-wait", "--config", pairCfg}, 0, nil, nil},
		{"pair-cert", "phone-key.pem", []string{"pair", "--no-wait", "--config", pairCfg}, 0, nil, nil},
		{"key-backup", "principal.key", []string{"key", "backup", "--backup-passphrase-file", bpass}, 0, nil, nil},
		{"key-rotate", "principal.previous", []string{"key", "rotate", "--overlap", "2h"}, 0, nil, nil},
		{"key-restore", "principal.pub", []string{"key", "restore", backup, "--backup-passphrase-file", bpass}, 0, noKey, nil},
		{"audit-verify", "audit.log", []string{"audit", "verify"}, 0, nil, nil},
		{"audit-verify-pub", "principal.pub", []string{"audit", "verify"}, 0, nil, nil},
		{"audit-show", "audit.log", []string{"audit", "show"}, 0, nil, nil},
		{"status", "audit.head", []string{"status", "--skip", "units,socket"}, 0, nil, nil},
		{"status-lock", "locked", []string{"status", "--skip", "units,socket"}, 0, nil, nil},
		{"init", "principal.pub", []string{"init", "--config-dir", e.etc}, 0, nil, nil},
		{"pubkey", "principal.pub", []string{"pubkey"}, 0, nil, nil},
		// A file the admin names, but in the daemon user's folder. (A
		// passphrase file there is refused whole: the daemon's user could
		// change it, filetrust.)
		{"key-restore-file", "backup.age", []string{"key", "restore", "--backup-passphrase-file", bpass}, 0, func(state string) {
			noKey(state)
			copyOwned(t, backup, filepath.Join(state, "backup.age"), e.daemon)
		}, func(state string) []string { return []string{filepath.Join(state, "backup.age")} }},
		// A file witness's checkpoints, in a folder of the daemon's user.
		{"audit-verify-checkpoint", "checkpoints", []string{"audit", "verify"}, 0, func(state string) {
			cp, err := checkpoint.Latest(filepath.Join(state, "audit.log"))
			if err != nil || cp == nil {
				t.Fatalf("the log's last checkpoint: %v", err)
			}
			b, err := json.Marshal(cp)
			must(t, err)
			must(t, os.WriteFile(filepath.Join(state, "checkpoints"), append(b, '\n'), 0o600))
			must(t, os.Chown(filepath.Join(state, "checkpoints"), int(e.daemon.uid), int(e.daemon.gid)))
		}, func(state string) []string { return []string{"--checkpoint", filepath.Join(state, "checkpoints")} }},
	}
	// Each case plants into a state folder of its own, copied from the
	// pristine one, aiming at a root-only folder of its own holding one
	// file of root's.
	plants := []struct {
		kind, says string
		plant      func(path, outside string)
	}{
		{"symlink", "is a symbolic link", func(path, outside string) {
			must(t, os.Symlink(filepath.Join(outside, "made"), path))
			must(t, os.Lchown(path, int(e.daemon.uid), int(e.daemon.gid)))
		}},
		{"fifo", "is a named pipe", func(path, outside string) {
			must(t, syscall.Mkfifo(path, 0o600))
			must(t, os.Chown(path, int(e.daemon.uid), int(e.daemon.gid)))
		}},
		// Made by root here: with fs.protected_hardlinks=1 the daemon's
		// user can link only files it may read and write, but a system
		// without it, or a file it once could write, gives it this.
		{"hardlink", "is a hard link to a file of root", func(path, outside string) {
			must(t, os.Link(filepath.Join(outside, "victim"), path))
		}},
	}
	before := snapshot(t, root)
	n := 0
	copyState := func() (state, outside string) {
		n++
		state = filepath.Join(e.base, fmt.Sprintf("state-%03d", n))
		if out, err := exec.Command("cp", "-a", pristine, state).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v: %s", err, out)
		}
		outside = filepath.Join(e.base, fmt.Sprintf("rootonly-%03d", n))
		must(t, os.Mkdir(outside, 0o700))
		must(t, os.WriteFile(filepath.Join(outside, "victim"), []byte("root's own file\n"), 0o600))
		return state, outside
	}
	for _, c := range commands {
		t.Run(c.name+"/clean", func(t *testing.T) {
			state, _ := copyState()
			if c.prep != nil {
				c.prep(state)
			}
			r := runRoot(t, e, argv(c, state))
			if r.code != c.clean {
				t.Errorf("on an unplanted folder: exit %d, want %d\nstdout: %s\nstderr: %s", r.code, c.clean, r.stdout, r.stderr)
			}
			assertUnchanged(t, root, before)
		})
		for _, p := range plants {
			t.Run(c.name+"/"+p.kind, func(t *testing.T) {
				state, outside := copyState()
				if c.prep != nil {
					c.prep(state)
				}
				path := filepath.Join(state, c.plant)
				os.Remove(path)
				was := snapshot(t, outside)
				p.plant(path, outside)
				r := runRoot(t, e, argv(c, state))
				out := r.stderr
				if c.args[0] == "status" {
					out = r.stdout
				}
				if r.code == 0 || !strings.Contains(out, path+" "+p.says) {
					t.Errorf("%s as root with %s planted: exit %d, want a refusal saying %q\nstdout: %s\nstderr: %s", strings.Join(c.args, " "), p.kind, r.code, path+" "+p.says, r.stdout, r.stderr)
				}
				assertUnchanged(t, root, before)
				assertUnchanged(t, outside, was)
			})
		}
	}
}

// runRoot runs parley-keyd as root, as an admin does, and fails the test
// when it does not end within its deadline (a named pipe it opened).
func runRoot(t *testing.T, e *e2e, args []string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(e.bin, "parley-keyd"), args...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/root", protocol.SocketEnv + "=" + e.sock, "PARLEY_KEYD_CONFIG_DIR=" + e.etc}
	cmd.Stdin = strings.NewReader("")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("parley-keyd %s hung (killed after 30 s)\nstderr: %s", strings.Join(args, " "), errb.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{out.String(), errb.String(), code}
}

// fileState is what a command might change of a file outside the folder.
type fileState struct {
	mode          os.FileMode
	uid, gid      uint32
	size, mtimeNs int64
	content       string
}

func snapshot(t *testing.T, dir string) map[string]fileState {
	t.Helper()
	out := map[string]fileState{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range entries {
		path := filepath.Join(dir, ent.Name())
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		b, _ := os.ReadFile(path)
		out[ent.Name()] = fileState{fi.Mode(), st.Uid, st.Gid, fi.Size(), st.Mtim.Nano(), string(b)}
	}
	return out
}

func assertUnchanged(t *testing.T, dir string, before map[string]fileState) {
	t.Helper()
	now := snapshot(t, dir)
	for name, was := range before {
		if is, ok := now[name]; !ok || is != was {
			t.Errorf("%s changed outside the state folder: was %+v, now %+v", filepath.Join(dir, name), was, is)
		}
	}
	for name := range now {
		if _, ok := before[name]; !ok {
			t.Errorf("%s was created outside the state folder", filepath.Join(dir, name))
		}
	}
}

// copyOwned copies the file src to dst, as who's.
func copyOwned(t *testing.T, src, dst string, who ids) {
	t.Helper()
	b, err := os.ReadFile(src)
	must(t, err)
	must(t, os.WriteFile(dst, b, 0o600))
	must(t, os.Chown(dst, int(who.uid), int(who.gid)))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
