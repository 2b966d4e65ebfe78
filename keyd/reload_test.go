package keyd

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/policies"
)

// TestReloadKeepsRestartOnlySettings: a reload that changes the phone page
// or the socket says that those wait for a restart, and the configuration
// in force keeps describing what runs.
func TestReloadKeepsRestartOnlySettings(t *testing.T) {
	h := newHarness(t)
	if err := os.WriteFile(h.cfg.PolicyPath(), []byte(testPolicy), 0o640); err != nil {
		t.Fatal(err)
	}
	text := DefaultConfig(h.sock+".new", me(t), me(t))
	text = strings.Replace(text, `listen = ""`, `listen = "192.0.2.7:7450"`, 1)
	text = strings.Replace(text, `socket_mode = "0660"`, `socket_mode = "0600"`, 1)
	if err := os.WriteFile(h.cfg.path, []byte(text), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Reload(); err != nil {
		t.Fatal(err)
	}
	cur := h.srv.cfg.Load()
	if cur.Phone.Listen != "" || cur.PhoneURL() != "" || cur.Socket != h.sock || cur.SocketMode != "0660" {
		t.Errorf("in force after reload: phone %q, socket %q mode %s", cur.Phone.Listen, cur.Socket, cur.SocketMode)
	}
	want := "socket, socket_mode, [phone] changed and take effect only after a restart (systemctl restart parley-keyd)"
	// Run writes its start record concurrently: look for the reload
	// records by kind, not by position.
	reloads := func() []audit.Record {
		var out []audit.Record
		for _, r := range auditRecords(t, h) {
			if r.Kind == audit.KindPolicyReload {
				out = append(out, r)
			}
		}
		return out
	}
	if r := reloads(); len(r) != 1 || r[0].Decision != "loaded" || !strings.Contains(r[0].Message, want) {
		t.Errorf("reload records %+v, want one saying %q", r, want)
	}
	// A second reload of the same files: what still differs from what
	// runs still waits for a restart.
	if err := h.srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if r := reloads(); len(r) != 2 || !strings.Contains(r[1].Message, want) {
		t.Errorf("second reload records %+v", r)
	}
}

func daemonFor(t *testing.T, edit func(*Config)) *Daemon {
	t.Helper()
	dir := t.TempDir()
	cfg, err := ParseConfig([]byte(DefaultConfig(filepath.Join(dir, "agent.sock"), me(t), me(t))), filepath.Join(dir, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	edit(cfg)
	pol, err := policies.Parse([]byte(testPolicy), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	d, err := New(Options{Config: cfg, Policy: pol, Signer: key, State: dir, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.closeLog)
	return d
}

func TestSocketGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving a socket to any group needs root")
	}
	g, err := user.LookupGroup("nogroup")
	if err != nil {
		t.Skipf("no group nogroup: %v", err)
	}
	gid, _ := strconv.Atoi(g.Gid)
	for _, spec := range []string{"nogroup", g.Gid} {
		d := daemonFor(t, func(c *Config) { c.SocketGroup = spec })
		ln, err := d.Listen()
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(d.cfg.Load().Socket)
		ln.Close()
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Gid) != gid || fi.Mode().Perm() != 0o660 {
			t.Errorf("socket_group %q: socket gid %d mode %v, want %d 0660", spec, st.Gid, fi.Mode().Perm(), gid)
		}
	}
	d := daemonFor(t, func(c *Config) { c.SocketGroup = "parley-no-such-group" })
	_, err = d.Listen()
	var ge *SocketGroupError
	if !errors.As(err, &ge) || !strings.Contains(err.Error(), `cannot give the socket to group "parley-no-such-group" (socket_group): no such group`) {
		t.Errorf("unknown group: %v", err)
	}
	if _, serr := os.Lstat(d.cfg.Load().Socket); err != nil && serr == nil {
		t.Error("the socket stayed after the group could not be set")
	}
}
