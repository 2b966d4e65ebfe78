package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// TestListenPath reads the socket out of what systemctl show prints for
// a socket unit's Listen property.
func TestListenPath(t *testing.T) {
	for in, want := range map[string]string{
		"/run/parley-keyd/agent.sock (Stream)\n":                  "/run/parley-keyd/agent.sock",
		"/run/a/agent.sock (Stream) /run/b/agent.sock (Stream)\n": "/run/a/agent.sock",
		"":                       "",
		"\n":                     "",
		"127.0.0.1:7 (Stream)\n": "",
		"/run/parley-keyd/agent.sock (Datagram)\n": "",
		"relative.sock (Stream)\n":                 "",
	} {
		if got := listenPath(in); got != want {
			t.Errorf("listenPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestFindSocketOrder checks what comes first: the flag, the environment,
// then the configuration's socket key, and a configuration that cannot be
// parsed or names a relative path is passed over.
func TestFindSocketOrder(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(configDirEnv, dir)
	t.Setenv(protocol.SocketEnv, "")
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("socket = \"/srv/keyd/agent.sock\"\nsocket_group = \"parley-agents\"\n")
	if got := findSocket(""); got != "/srv/keyd/agent.sock" {
		t.Errorf("from the configuration: %q", got)
	}
	t.Setenv(protocol.SocketEnv, "/env/agent.sock")
	if got := findSocket(""); got != "/env/agent.sock" {
		t.Errorf("with the environment: %q", got)
	}
	if got := findSocket("/flag/agent.sock"); got != "/flag/agent.sock" {
		t.Errorf("with the flag: %q", got)
	}
	t.Setenv(protocol.SocketEnv, "")
	for _, bad := range []string{"socket = \"relative.sock\"\n", "socket = [\n", ""} {
		write(bad)
		if got := findSocket(""); got == "relative.sock" || got == "" {
			t.Errorf("configuration %q: %q", bad, got)
		}
	}
}
