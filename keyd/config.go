package keyd

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/duration"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/peercred"
	"github.com/parley-keyd/parley-keyd/keyd/signer"

	"github.com/pelletier/go-toml/v2"
)

// Config is the daemon's configuration file (TOML, strict: an unknown key is an
// error). Who may connect at all is decided here, before any request is read;
// what a connected agent may get is the policy's business.
type Config struct {
	// Socket is the Unix socket path; ignored under systemd socket activation.
	Socket string `toml:"socket"`
	// SocketMode is the octal mode of the socket file (default "0660").
	SocketMode string `toml:"socket_mode"`
	// SocketGroup is the group (name or gid) the daemon gives the socket it
	// creates; empty keeps the daemon's own group. Under systemd socket
	// activation the unit's SocketGroup= decides instead. It should be a
	// group of agents and approvers that cannot read this configuration
	// (parley-agents in the default install); the daemon's user must be a
	// member of it.
	SocketGroup string `toml:"socket_group"`
	// Policy is the policy file, relative to the configuration file's folder.
	Policy string `toml:"policy"`
	// ApprovalTimeout is how long a request waits for a human before it is refused.
	ApprovalTimeout duration.Value `toml:"approval_timeout"`
	// MaxConnections caps open connections; further ones are refused at accept.
	MaxConnections int `toml:"max_connections"`
	// MaxConnectionsPerUser caps the open connections of one uid, so that
	// one agent cannot use them all and lock approvers out.
	MaxConnectionsPerUser int `toml:"max_connections_per_user"`
	// FrameTimeout is how long, in all, the daemon waits for the rest of a
	// frame once its first byte has arrived (default 10s); a slower frame
	// ends its connection.
	FrameTimeout duration.Value `toml:"frame_timeout"`

	Access Access `toml:"access"`
	Phone  Phone  `toml:"phone"`
	// Key says where the principal key lives: the file in the state
	// folder (the default), a transit key or a PKCS#11 token
	// (docs/key-service.md). It is read at start only.
	Key signer.Config `toml:"key"`
	// Audit says where the audit log's checkpoints go and when it starts a
	// new segment (docs/audit.md). It is read at start only.
	Audit AuditConfig `toml:"audit"`

	path       string // where it was read from, for relative paths
	fileSocket string // Socket as the file says, before any --socket override
	uid        uint32 // the daemon's user, whom with root its files may belong to (trust.go)
}

// AuditConfig is the [audit] table: the witnesses that receive the log's
// signed checkpoints, and its segments.
type AuditConfig struct {
	// WitnessFile receives every checkpoint, one line each. Put it on
	// another filesystem, append-only (chattr +a) or on a machine the
	// daemon's user cannot rewrite.
	WitnessFile string `toml:"witness_file"`
	// WitnessCommand runs for every checkpoint, with the checkpoint on its
	// standard input: a program that sends it off the machine.
	WitnessCommand []string `toml:"witness_command"`
	// CheckpointEvery and CheckpointInterval say how often the head is
	// signed: after that many records, or that long after the last
	// checkpoint when records came since. Zero means 1000 and 1m.
	CheckpointEvery    int            `toml:"checkpoint_every"`
	CheckpointInterval duration.Value `toml:"checkpoint_interval"`
	// SegmentMiB and SegmentAge say when a new segment starts. Zero means
	// 64 MiB and no age limit.
	SegmentMiB int            `toml:"segment_mib"`
	SegmentAge duration.Value `toml:"segment_age"`
	// Retain removes closed segments older than this once every witness
	// holds a checkpoint after them. Zero keeps every segment.
	Retain duration.Value `toml:"retain"`
	// ScrubInterval and ScrubRate say how often the whole log is verified
	// again in the background (after every start, then at this interval)
	// and how fast it is read, in MiB a second. Zero means 24h and 16.
	ScrubInterval duration.Value `toml:"scrub_interval"`
	ScrubRate     int            `toml:"scrub_rate"`
}

// Options returns the audit log's options this table sets.
func (a AuditConfig) Options() (audit.Options, error) {
	var o audit.Options
	if a.WitnessFile != "" {
		if !filepath.IsAbs(a.WitnessFile) {
			return o, fmt.Errorf("audit.witness_file %q must be an absolute path", a.WitnessFile)
		}
		o.Witnesses = append(o.Witnesses, audit.FileWitness{Path: a.WitnessFile})
	}
	if len(a.WitnessCommand) > 0 {
		if !filepath.IsAbs(a.WitnessCommand[0]) {
			return o, fmt.Errorf("audit.witness_command must start with an absolute path, not %q", a.WitnessCommand[0])
		}
		o.Witnesses = append(o.Witnesses, audit.CommandWitness{Argv: slices.Clone(a.WitnessCommand)})
	}
	if a.CheckpointEvery < 0 || a.SegmentMiB < 0 {
		return o, errors.New("audit.checkpoint_every and audit.segment_mib must not be negative")
	}
	if a.ScrubInterval.Duration < 0 || a.ScrubRate < 0 {
		return o, errors.New("audit.scrub_interval and audit.scrub_rate must not be negative: the scrub cannot be turned off (docs/audit.md)")
	}
	o.ScrubInterval = a.ScrubInterval.Duration
	o.ScrubRate = int64(a.ScrubRate) << 20
	o.CheckpointEvery = a.CheckpointEvery
	o.CheckpointInterval = a.CheckpointInterval.Duration
	o.SegmentSize = int64(a.SegmentMiB) << 20
	o.SegmentAge = a.SegmentAge.Duration
	o.Retain = a.Retain.Duration
	return o, nil
}

// Access names who may connect, and in which role. Users are names or numeric
// uids; groups are names or numeric gids.
type Access struct {
	AgentUsers     []string `toml:"agent_users"`
	AgentGroups    []string `toml:"agent_groups"`
	ApproverUsers  []string `toml:"approver_users"`
	ApproverGroups []string `toml:"approver_groups"`
	// DualRoleUsers may be agent and approver at once. Their approvals are
	// weak: an agent running as that user can approve too (DESIGN.md).
	DualRoleUsers []string `toml:"dual_role_users"`
}

// Phone configures the opt-in phone page: an HTTPS listener on a LAN
// address where a paired phone sees and approves requests. Approvals are
// accepted only from non-local addresses (DESIGN.md).
type Phone struct {
	// Listen is the LAN address and port, such as "192.168.1.20:7450".
	// Empty turns the phone page off.
	Listen string `toml:"listen"`
	// URL is the base address put into QR codes; default "https://" + Listen.
	URL string `toml:"url"`
}

// PhoneURL is the base address of the phone page, or "" when it is off.
func (c *Config) PhoneURL() string {
	if c.Phone.Listen == "" {
		return ""
	}
	if c.Phone.URL != "" {
		return strings.TrimRight(c.Phone.URL, "/")
	}
	return "https://" + c.Phone.Listen
}

// Defaults for a configuration that leaves a field out.
const (
	DefaultApprovalTimeout = 120 * time.Second
	DefaultMaxConnections  = 4096
	DefaultMaxPerUser      = 1024
	DefaultFrameTimeout    = 10 * time.Second
)

// ParseConfig reads a configuration strictly: unknown keys and bad values are
// errors that name the file and line.
func ParseConfig(data []byte, path string) (*Config, error) {
	c := &Config{path: path, uid: uint32(os.Geteuid())}
	dec := toml.NewDecoder(bytes.NewReader(data)).DisallowUnknownFields()
	if err := dec.Decode(c); err != nil {
		var de *toml.DecodeError
		var se *toml.StrictMissingError
		switch {
		case errors.As(err, &se) && len(se.Errors) > 0:
			row, _ := se.Errors[0].Position()
			return nil, fmt.Errorf("%s:%d: unknown key %q", path, row, strings.Join(se.Errors[0].Key(), "."))
		case errors.As(err, &de):
			row, _ := de.Position()
			return nil, fmt.Errorf("%s:%d: %s", path, row, de.Error())
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c.fileSocket = c.Socket
	if c.ApprovalTimeout.Duration == 0 {
		c.ApprovalTimeout.Duration = DefaultApprovalTimeout
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = DefaultMaxConnections
	}
	if c.FrameTimeout.Duration == 0 {
		c.FrameTimeout.Duration = DefaultFrameTimeout
	}
	if c.MaxConnectionsPerUser == 0 {
		c.MaxConnectionsPerUser = min(DefaultMaxPerUser, c.MaxConnections)
	}
	if c.MaxConnections < 0 || c.MaxConnectionsPerUser < 0 {
		return nil, fmt.Errorf("%s: max_connections and max_connections_per_user must be positive", path)
	}
	if c.SocketMode == "" {
		c.SocketMode = "0660"
	}
	if m, err := strconv.ParseUint(c.SocketMode, 8, 32); err != nil || m > 0o777 {
		return nil, fmt.Errorf("%s: socket_mode %q is not an octal file mode such as \"0660\"", path, c.SocketMode)
	}
	if c.Policy == "" {
		c.Policy = "policy.toml"
	}
	if c.Phone.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Phone.Listen); err != nil {
			return nil, fmt.Errorf("%s: phone.listen %q must be host:port, such as \"192.168.1.20:7450\"", path, c.Phone.Listen)
		}
	}
	if _, err := c.Audit.Options(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := c.Key.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	a := c.Access
	for _, u := range a.AgentUsers {
		// A user named as both agent and approver without an explicit
		// dual role is almost certainly a mistake that would let an agent
		// approve itself.
		if slices.Contains(a.ApproverUsers, u) && !slices.Contains(a.DualRoleUsers, u) {
			return nil, fmt.Errorf("%s: user %q is both agent and approver; list it in access.dual_role_users to allow that (its approvals are then weak)", path, u)
		}
	}
	return c, nil
}

// PolicyPath is the policy file's path, resolved against the configuration's folder.
func (c *Config) PolicyPath() string {
	if filepath.IsAbs(c.Policy) || c.path == "" {
		return c.Policy
	}
	return filepath.Join(filepath.Dir(c.path), c.Policy)
}

// FileMode returns the socket file's mode.
func (c *Config) FileMode() os.FileMode {
	m, _ := strconv.ParseUint(c.SocketMode, 8, 32)
	return os.FileMode(m)
}

// Roles says what a connecting peer may do. A peer that is neither agent nor
// approver is refused before any request is read.
type Roles struct {
	Agent    bool
	Approver bool
	// Weak marks an approver who may also act as an agent: an agent running
	// as the same OS user can reach the same session and approve.
	Weak bool
}

func (c *Config) roles(id peercred.Identity) Roles {
	a := c.Access
	userIn := func(list []string) bool {
		uid := strconv.FormatUint(uint64(id.UID), 10)
		return slices.Contains(list, uid) || (id.User != "" && slices.Contains(list, id.User))
	}
	groupIn := func(list []string) bool {
		for _, g := range id.Groups {
			if slices.Contains(list, g) {
				return true
			}
		}
		for _, g := range id.GroupIDs {
			if slices.Contains(list, strconv.FormatUint(uint64(g), 10)) {
				return true
			}
		}
		return slices.Contains(list, strconv.FormatUint(uint64(id.GID), 10))
	}
	r := Roles{
		Agent:    userIn(a.AgentUsers) || groupIn(a.AgentGroups),
		Approver: userIn(a.ApproverUsers) || groupIn(a.ApproverGroups),
	}
	if r.Agent && r.Approver {
		if userIn(a.DualRoleUsers) {
			r.Weak = true
		} else {
			// Fail closed: matching both by accident (a group here, a
			// user there) must not let an agent approve.
			r.Approver = false
		}
	}
	return r
}

// DefaultConfig returns the commented configuration that init writes. agent
// and approver name the users set up at init; the quickstart passes the same
// user for both, which makes it a dual-role user with weak approvals.
func DefaultConfig(socket, agent, approver string) string {
	t := ConfigTemplate{Socket: socket}
	if agent != "" {
		t.Agents = []string{agent}
	}
	if approver != "" {
		t.Approvers = []string{approver}
	}
	return t.Text()
}

// ConfigTemplate is what init knows when it writes a configuration.
type ConfigTemplate struct {
	Socket      string
	SocketGroup string
	Agents      []string
	Approvers   []string
}

// Text returns the commented configuration for t. A user named both as
// agent and approver becomes a dual-role user, whose approvals are weak.
func (t ConfigTemplate) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, `# parley-keyd configuration. Unknown keys are errors.
# Who may connect at all is decided here; what an agent may get is in the policy.

# The Unix socket. Under systemd socket activation the unit's socket is used instead.
socket = %q
# Mode of the socket file. The daemon checks every peer's uid with SO_PEERCRED anyway.
socket_mode = "0660"
# The group the daemon gives the socket it creates: agents and approvers join it
# to connect. Make it a group that cannot read this file; the daemon's user must
# be a member. Empty keeps the daemon's own group. Under systemd socket activation
# SocketGroup= in parley-keyd.socket decides instead.
socket_group = %q

# The policy file, relative to this file's folder.
policy = "policy.toml"

# How long a request waits for a human before it is refused.
approval_timeout = "120s"

# Limits (the defaults are shown; docs/protocol.md explains them). Agents
# together never hold the last 1/64 of the connections: approvers keep them.
# max_connections = 4096
# max_connections_per_user = 1024
# How long, in all, to wait for the rest of a frame once its first byte came.
# frame_timeout = "10s"

[access]
# Users (names or uids) and groups whose processes may ask for grants.
agent_users = [%s]
agent_groups = []
# Users and groups who may list, approve and deny pending requests.
approver_users = [%s]
approver_groups = []
`, t.Socket, t.SocketGroup, quoteList(t.Agents), quoteList(t.Approvers))
	var dual []string
	for _, a := range t.Agents {
		if slices.Contains(t.Approvers, a) {
			dual = append(dual, a)
		}
	}
	if len(dual) > 0 {
		fmt.Fprintf(&b, `# Users allowed to hold both roles. Their approvals are recorded as weak,
# because an agent running as the same user could approve as well.
dual_role_users = [%s]
`, quoteList(dual))
	} else {
		b.WriteString(`# Users allowed to hold both roles (approvals from them are recorded as weak).
dual_role_users = []
`)
	}
	b.WriteString(`
[phone]
# The phone page: approve requests from a paired phone on your LAN. Off while
# listen is empty. Set a LAN address of this host, then pair with: parley-keyd pair
listen = ""

[audit]
# The audit log signs its head (a checkpoint) every so many records and at
# every start and stop; each checkpoint goes to the journal and to these
# witnesses, so that a log cut, rolled back or rewritten by someone who owns
# the daemon's user is found (docs/audit.md). A file on another filesystem,
# made append-only by root:
# witness_file = "/var/log/parley-keyd/checkpoints"
# A command that sends the checkpoint (on its standard input) off the machine:
# witness_command = ["/usr/local/bin/ship-checkpoint"]
# checkpoint_every = 1000
# checkpoint_interval = "1m"
# A new segment every 64 MiB (or segment_age); closed segments older than
# retain are removed once every witness holds a checkpoint after them.
# segment_mib = 64
# segment_age = "720h"
# retain = "8760h"
# The whole log is verified again behind every start and then every
# scrub_interval, reading at most scrub_rate MiB a second; damage found stops
# issuance until an admin runs parley-keyd audit acknowledge.
# scrub_interval = "24h"
# scrub_rate = 16
`)
	return b.String()
}

func quoteList(list []string) string {
	q := make([]string, len(list))
	for i, s := range list {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}
