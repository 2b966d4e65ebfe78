// Package peercred says who is at the other end of a Unix socket, as the
// kernel reports it.
//
// It guarantees that the uid, gid, pid and groups of an Identity come from
// the kernel (SO_PEERCRED, SO_PEERGROUPS) as they were when the peer
// connected, never from anything the peer sends; the informative fields
// read from /proc (executable, systemd unit) are left empty when the
// process that connected can no longer be shown to be the one read.
package peercred
