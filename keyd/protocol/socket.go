package protocol

import (
	"os"
	"strings"
)

// DefaultSocket is where the daemon listens and clients look when neither
// --socket nor PARLEY_KEYD_SOCKET says otherwise.
const DefaultSocket = "/run/parley-keyd/agent.sock"

// SocketEnv names the environment variable clients read for the socket path.
const SocketEnv = "PARLEY_KEYD_SOCKET"

// SocketPath returns the socket a client should use: flag, then
// PARLEY_KEYD_SOCKET, then DefaultSocket.
func SocketPath(flag string) string {
	if flag != "" {
		return flag
	}
	if s := os.Getenv(SocketEnv); s != "" {
		return s
	}
	return DefaultSocket
}

// DefaultDaemonUser is the OS user the installed daemon runs as
// (dist/sysusers.d). Clients talk only to a socket served by this user, by
// root or by themselves, unless PARLEY_KEYD_USER says otherwise.
const DefaultDaemonUser = "parley-keyd"

// DaemonUserEnv names the environment variable that tells clients which
// users may serve the socket: names or uids, separated by commas.
const DaemonUserEnv = "PARLEY_KEYD_USER"

// DaemonUsers returns the users a client accepts as the daemon, besides
// root and itself: flag, then PARLEY_KEYD_USER, then DefaultDaemonUser;
// each a comma-separated list of names or uids.
func DaemonUsers(flag string) []string {
	v := flag
	if v == "" {
		v = os.Getenv(DaemonUserEnv)
	}
	if v == "" {
		return []string{DefaultDaemonUser}
	}
	var out []string
	for _, u := range strings.Split(v, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}
