package keyd

import (
	"fmt"
	"strings"

	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/peercred"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/parley-keyd/parley-keyd/policies"
)

// Caller is who sends a request, as the pipeline sees it: the identity the
// kernel gave the transport, and the roles the configuration in force gives
// that identity. Nothing in a request can change either. Every other form of
// "who asked" (what the policy matches, what the audit record and the human
// are shown) is derived from a Caller here, in one place each.
type Caller struct {
	// Identity is the peer of a socket connection, from SO_PEERCRED. It is
	// zero for a paired phone.
	Identity peercred.Identity
	// Roles say what the caller may do.
	Roles Roles
	// Device is the paired phone's name when the phone page is the
	// transport: the page has authenticated the device and checked that it
	// connected from another machine, which makes its approvals strong.
	Device string
}

// phoneCaller is the caller for a request the phone page relays for a
// paired device: an approver, never an agent.
func phoneCaller(device string) Caller {
	return Caller{Roles: Roles{Approver: true}, Device: device}
}

// policy is the caller as the policy matches it, asking for holder's key.
func (c Caller) policy(holder string) policies.Caller {
	id := c.Identity
	return policies.Caller{UID: id.UID, GID: id.GID, User: id.User, Groups: id.Groups,
		GroupIDs: id.GroupIDs, Exe: id.Exe, Unit: id.Unit, HolderKey: holder}
}

// audit is the caller as its audit record names it.
func (c Caller) audit() *audit.Caller {
	if c.Device != "" {
		return &audit.Caller{Device: c.Device}
	}
	id := c.Identity
	return &audit.Caller{UID: id.UID, GID: id.GID, PID: id.PID, User: id.User, Exe: id.Exe, Unit: id.Unit}
}

// view is the caller as a human is shown it.
func (c Caller) view() protocol.CallerView {
	id := c.Identity
	return protocol.CallerView{User: id.User, UID: id.UID, PID: id.PID, Exe: id.Exe, Unit: id.Unit}
}

// name is the caller in one phrase: "alice (uid 1000)", or "phone:pixel".
func (c Caller) name() string {
	if c.Device != "" {
		return "phone:" + c.Device
	}
	return fmt.Sprintf("%s (uid %d)", c.Identity.User, c.Identity.UID)
}

// phrase is the caller as a refusal names it: "user alice", or "the
// paired phone pixel".
func (c Caller) phrase() string {
	if c.Device != "" {
		return "the paired phone " + c.Device
	}
	return "user " + c.Identity.User
}

// who describes an agent's caller for the human, every value neutralized:
// the kernel's uid and pid, then, on a line of its own, the program and unit
// the daemon saw in /proc. Those are shown as observed, not proven: another
// program of the same user can appear as them (it can take over the
// agent's connection with pidfd_getfd, or exec the trusted program once
// connected), so the human must not read them as proof of which program
// asks (docs/policy.md).
func (c Caller) who(agent string) []string {
	id := c.Identity
	lines := []string{fmt.Sprintf("agent %q: user %s (uid %d), pid %d", safe(agent), safe(id.User), id.UID, id.PID)}
	var seen []string
	if id.Exe != "" {
		seen = append(seen, "program "+safe(id.Exe))
	}
	if id.Unit != "" {
		seen = append(seen, "unit "+safe(id.Unit))
	}
	if len(seen) > 0 {
		lines = append(lines, fmt.Sprintf("Observed %s (not proof: any program of user %s can appear so)", strings.Join(seen, ", "), safe(id.User)))
	}
	return lines
}
