package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/pelletier/go-toml/v2"
)

// configDirEnv names the folder of the daemon's configuration, as for
// parley-keyd.
const configDirEnv = "PARLEY_KEYD_CONFIG_DIR"

// socketPath is the daemon's socket for every command (see findSocket).
func socketPath() string { return findSocket(socketFlag) }

// findSocket finds the daemon's socket where nothing else need say it, as
// for an MCP client that starts parley-grant mcp with an environment of its
// own: --socket, else $PARLEY_KEYD_SOCKET, else the socket key of the
// installed configuration ($PARLEY_KEYD_CONFIG_DIR/config.toml, else
// /etc/parley-keyd/config.toml) where this user may read it, else the
// default socket when it exists, else the socket systemd's
// parley-keyd.socket listens on, else the default. A wrong guess costs
// nothing: dial refuses a socket served by any user but the daemon's.
func findSocket(flag string) string {
	if flag != "" {
		return flag
	}
	if s := os.Getenv(protocol.SocketEnv); s != "" {
		return s
	}
	if s := configSocket(); s != "" {
		return s
	}
	if _, err := os.Stat(protocol.DefaultSocket); err == nil {
		return protocol.DefaultSocket
	}
	if s := systemdSocket(); s != "" {
		return s
	}
	return protocol.DefaultSocket
}

// configSocket is the socket key of the installed configuration, or ""
// when it cannot be read (by default it is root:parley-keyd 0640, in a
// folder of the same group) or names none.
func configSocket() string {
	dir := os.Getenv(configDirEnv)
	if dir == "" {
		dir = "/etc/parley-keyd"
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.toml"))
	if err != nil {
		return ""
	}
	var c struct {
		Socket string `toml:"socket"`
	}
	if toml.Unmarshal(b, &c) != nil || !filepath.IsAbs(c.Socket) {
		return ""
	}
	return c.Socket
}

// systemdSocket asks systemd, which any user may, where parley-keyd.socket
// listens: under socket activation that unit, not the configuration,
// decides the path. "" without systemd, the unit, or an answer in time.
func systemdSocket() string {
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "systemctl", "show", "--property=Listen", "--value", "parley-keyd.socket").Output()
	if err != nil {
		return ""
	}
	return listenPath(string(out))
}

// listenPath is the first socket path in systemctl's Listen property,
// which reads "/run/parley-keyd/agent.sock (Stream)", one such entry after
// another.
func listenPath(s string) string {
	p, _, ok := strings.Cut(s, " (Stream)")
	if !ok {
		return ""
	}
	p = strings.TrimSpace(p)
	if i := strings.LastIndexAny(p, " \n"); i >= 0 {
		p = p[i+1:]
	}
	if !filepath.IsAbs(p) {
		return ""
	}
	return p
}
