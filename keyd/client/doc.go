// Package client speaks the daemon protocol (keyd/protocol) to a running
// parley-keyd over its Unix socket, for agents (GRANT, CONSENT, EXPLAIN)
// and approvers (PENDING, WATCH, APPROVE, DENY, LOCK, AUDIT) alike.
//
// Dial and DialWith connect and, before they return, check with
// SO_PEERCRED that the socket is served by the daemon's user, root or the
// caller's own user (CheckServer), so that a socket another local user put
// in the daemon's place receives nothing. A refusal comes back as a
// *protocol.Error with the daemon's stable code.
package client
