package keyd

import (
	"fmt"
	"os"
	"os/user"
	"reflect"
	"strconv"
	"strings"
)

// keepRestartOnly copies into next the settings of cur that a reload cannot
// change, because they belong to a socket or a listener that is already
// open, and returns the names of those that next's file changed. So the
// configuration in force always describes what runs: a phone link in a
// pending request points at the page that is really listening.
func keepRestartOnly(cur, next *Config) []string {
	var changed []string
	if next.fileSocket != cur.fileSocket {
		changed = append(changed, "socket")
	}
	if next.SocketMode != cur.SocketMode {
		changed = append(changed, "socket_mode")
	}
	if next.SocketGroup != cur.SocketGroup {
		changed = append(changed, "socket_group")
	}
	if next.Phone != cur.Phone {
		changed = append(changed, "[phone]")
	}
	if !reflect.DeepEqual(next.Key, cur.Key) {
		// The signer is opened once, at start (docs/key-service.md).
		changed = append(changed, "[key]")
	}
	next.Socket, next.fileSocket = cur.Socket, cur.fileSocket
	next.SocketMode, next.SocketGroup = cur.SocketMode, cur.SocketGroup
	next.Phone, next.Key = cur.Phone, cur.Key
	return changed
}

// restartNote says which settings wait for a restart.
func restartNote(changed []string) string {
	verb := "changed and takes"
	if len(changed) > 1 {
		verb = "changed and take"
	}
	return fmt.Sprintf("%s %s effect only after a restart (systemctl restart parley-keyd); until then the old values stay in force",
		strings.Join(changed, ", "), verb)
}

// SocketGroupError says that the socket could not be given its configured
// group.
type SocketGroupError struct {
	Group string
	Err   error
}

func (e *SocketGroupError) Error() string {
	return fmt.Sprintf("cannot give the socket to group %q (socket_group): %v", e.Group, e.Err)
}

func (e *SocketGroupError) Unwrap() error { return e.Err }

// chownSocketGroup gives the socket at path to group, a name or a gid. An
// empty group leaves the socket with the daemon's own group.
func chownSocketGroup(path, group string) error {
	if group == "" {
		return nil
	}
	gid, err := lookupGroup(group)
	if err == nil {
		err = os.Chown(path, -1, gid)
	}
	if err != nil {
		return &SocketGroupError{Group: group, Err: err}
	}
	return nil
}

// lookupGroup returns the gid of a group given by name or number.
func lookupGroup(group string) (int, error) {
	if n, err := strconv.ParseUint(group, 10, 31); err == nil {
		return int(n), nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return 0, fmt.Errorf("no such group")
	}
	n, err := strconv.Atoi(g.Gid)
	if err != nil {
		return 0, fmt.Errorf("group %q has the gid %q", group, g.Gid)
	}
	return n, nil
}
