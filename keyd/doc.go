// Package keyd is the parley-keyd daemon: it holds the principal key behind
// a Unix socket and issues Parley grants to the agents that ask, under the
// policy, with a human's approval where the policy wants one, and records
// every request in the hash-chained audit log before it replies.
//
// A Daemon is the whole of it: New assembles the configuration (Config),
// the policy, the signer, the audit log and the Server; Listen finds the
// socket, Run serves until its context ends, and Reload rereads the
// configuration and the policy. The Server answers the socket: it learns
// each caller from the kernel (SO_PEERCRED), gives it its roles (agent,
// approver) and runs each request through one pipeline: read, validate,
// decide, approve, sign, audit, reply.
//
// The wire format is in keyd/protocol, the client in keyd/client, the key
// backends in keyd/signer and the audit log in keyd/audit.
package keyd
