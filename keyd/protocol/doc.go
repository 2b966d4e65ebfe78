// Package protocol is the daemon protocol's wire format: one JSON object per
// line on the Unix socket, with Parley's framing (§2) and the daemon's verbs
// (HELLO, GRANT, CONSENT, EXPLAIN, PENDING, APPROVE, DENY, LOCK, AUDIT and
// the rest), their bodies, the error codes, and the socket's default path
// and the daemon's user. The daemon (keyd) and its clients (keyd/client)
// both read and write frames through it, so the two cannot disagree.
package protocol
