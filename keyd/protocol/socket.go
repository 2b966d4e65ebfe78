package protocol

import "os"

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
