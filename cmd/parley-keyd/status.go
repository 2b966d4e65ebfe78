package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/grant/lens"
	"github.com/parley-keyd/parley-keyd/internal/filetrust"
	"github.com/parley-keyd/parley-keyd/internal/procgroup"
	"github.com/parley-keyd/parley-keyd/keyd"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/keystore"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
	"github.com/pelletier/go-toml/v2"
	"github.com/spf13/cobra"
)

func newStatusCmd() *cobra.Command {
	var o statusOptions
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Check the whole set-up: files, users, policy, socket, units, audit log",
		Long: `status is the admin's doctor. It checks, each on a line marked ok, warn or
fail, with a hint under what is not ok:

  config   the configuration loads, and nobody but root and the daemon's
           user could change it or a file it names (docs/admin.md)
  policy   the policy loads, is as safe as the configuration; its warnings
  users    the users and groups the configuration names exist; the daemon's
           user is none of its agents or approvers
  state    the state folder is a folder only its owner (the daemon's user) may
           enter, and nobody else could change a folder above it
  key      the principal key file is its owner's alone; the public key
  audit    the audit log verifies (every segment; a failure names the first
           bad record and its reason), holds the head the daemon reported
           last (at its start or its stop), and the daemon's scrub found no
           damage that an admin has not acknowledged
  lock     whether an approver locked the daemon
  socket   the socket exists, its group is socket_group and not the
           daemon's own, and a daemon answers with the principal key above
  units    parley-keyd.socket and .service, where systemd runs

Run it as root or as the daemon's user; root reads the configuration as
root, then checks the state folder as its owner (docs/admin.md). It exits 0 when no check fails
(warnings allowed) and 1 when one does, so scripts and monitoring can use it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			d := &doctor{o: o, out: cmd.OutOrStdout()}
			d.run()
			if d.failed > 0 {
				return &exitError{code: exitFail, err: fmt.Errorf("%d of the checks above failed", d.failed)}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.state, "state", defaultState(), "state folder; $PARLEY_KEYD_STATE")
	cmd.Flags().StringVar(&o.config, "config", defaultConfig(), "configuration file; $PARLEY_KEYD_CONFIG_DIR/config.toml")
	cmd.Flags().StringVar(&o.socket, "socket", os.Getenv(protocol.SocketEnv), "socket to check (default: the configuration's; $"+protocol.SocketEnv+")")
	cmd.Flags().StringSliceVar(&o.skip, "skip", nil, "checks to leave out, such as units in a container without systemd")
	return cmd
}

type statusOptions struct {
	state, config, socket string
	skip                  []string
}

// doctor runs the checks of status and prints one line for each finding.
type doctor struct {
	o      statusOptions
	out    io.Writer
	failed int

	cfg          *keyd.Config
	policyFailed bool       // the configuration's check reported the policy
	owner        *user.User // the state folder's owner: the daemon's user
	principal    string     // from principal.pub
	answered     bool       // a daemon answered on the socket
}

func (d *doctor) line(status, check, msg, hint string) {
	if status == "fail" {
		d.failed++
	}
	fmt.Fprintf(d.out, "%-5s %-7s %s\n", status, check, oneLine(msg))
	if hint != "" {
		fmt.Fprintf(d.out, "      %-7s hint: %s\n", "", oneLine(hint))
	}
}

func (d *doctor) ok(check, format string, args ...any) {
	d.line("ok", check, fmt.Sprintf(format, args...), "")
}

func (d *doctor) warn(check, hint, format string, args ...any) {
	d.line("warn", check, fmt.Sprintf(format, args...), hint)
}

func (d *doctor) fail(check, hint, format string, args ...any) {
	d.line("fail", check, fmt.Sprintf(format, args...), hint)
}

// oneLine keeps what status prints from files on one visible line.
func oneLine(s string) string { return lens.SafeText(s, 400) }

func (d *doctor) run() {
	checks := []struct {
		name string
		run  func()
	}{
		{"config", d.checkConfig}, {"policy", d.checkPolicy}, {"users", d.checkUsers},
		{"state", d.checkState}, {"key", d.checkKey},
		{"socket", d.checkSocket}, // before audit: whether a daemon runs matters there
		{"audit", d.checkAudit}, {"lock", d.checkLock}, {"units", d.checkUnits},
	}
	entered := false
	for _, c := range checks {
		if c.name == "state" {
			// The configuration is read as root; the state folder as its
			// owner, never following what that user planted there
			// (stateowner.go).
			if err := actAsOwnerOf(d.o.state); err != nil {
				d.fail("state", hintOf(err), "%v", err)
				break
			}
			entered = true
		}
		if !slices.Contains(d.o.skip, c.name) {
			c.run()
		}
	}
	if !entered && !slices.Contains(d.o.skip, "units") {
		d.checkUnits()
	}
}

// hintOf is the hint an *exitError in err carries, or "".
func hintOf(err error) string {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.hint
	}
	return ""
}

func (d *doctor) checkConfig() {
	cfg, err := loadConfig(d.o.config, d.o.state)
	var te *keyd.TrustError
	if errors.As(err, &te) {
		// Each file the daemon would refuse is a failure of its own;
		// the rest of the set-up is still checked.
		cfg = te.Config
		for _, p := range te.Problems {
			check := "config"
			switch p.What {
			case "policy":
				check, d.policyFailed = "policy", true
			case "access":
				check = "users"
			}
			d.fail(check, trustHint(p.Err), "%s: %v", p.What, p.Err)
		}
	} else if err != nil {
		d.fail("config", hintOf(err), "%v", err)
		return
	}
	d.cfg = cfg
	if te != nil {
		return
	}
	if fi, err := os.Stat(d.o.config); err == nil && fi.Mode().Perm()&0o004 != 0 {
		d.warn("config", fmt.Sprintf("sudo chmod 0640 %s", d.o.config), "%s is mode %04o: every user can read who may connect", d.o.config, fi.Mode().Perm())
		return
	}
	a := cfg.Access
	d.ok("config", "%s: %s, %s, %s, %s", d.o.config, count(len(a.AgentUsers), "agent user"), count(len(a.AgentGroups), "agent group"),
		count(len(a.ApproverUsers), "approver user"), count(len(a.ApproverGroups), "approver group"))
}

func (d *doctor) checkPolicy() {
	if d.cfg == nil || d.policyFailed {
		return
	}
	path := d.cfg.PolicyPath()
	p, err := keyd.LoadPolicy(d.cfg)
	if err != nil {
		d.fail("policy", policyHint(&keyd.PolicyError{Path: path, Err: err}, d.o.config, d.o.state), "%v", err)
		return
	}
	first, _, _ := strings.Cut(p.Describe(), "\n")
	d.ok("policy", "%s", strings.TrimSuffix(first, "."))
	for _, w := range p.Warnings() {
		d.warn("policy", "", "%s", w)
	}
}

func (d *doctor) checkUsers() {
	if d.cfg == nil {
		return
	}
	a := d.cfg.Access
	bad := 0
	for _, u := range append(append(append([]string{}, a.AgentUsers...), a.ApproverUsers...), a.DualRoleUsers...) {
		if userExists(u) != nil {
			bad++
			d.fail("users", "create the user, or correct the name in "+d.o.config, "the configuration names user %q, which does not exist: nobody connects as it", u)
		}
	}
	for _, g := range append(append([]string{}, a.AgentGroups...), a.ApproverGroups...) {
		if _, err := lookupGroupID(g); err != nil {
			bad++
			d.fail("users", "create the group, or correct the name in "+d.o.config, "the configuration names group %q, which does not exist", g)
		}
	}
	if g := d.cfg.SocketGroup; g != "" {
		if _, err := lookupGroupID(g); err != nil {
			bad++
			d.fail("users", "create it (sudo groupadd --system "+g+") and add agents and approvers to it", "socket_group %q does not exist", g)
		}
	}
	if bad == 0 {
		d.ok("users", "every user and group the configuration names exists")
	}
}

func ownerOf(fi fs.FileInfo) (uid, gid uint32) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0
	}
	return st.Uid, st.Gid
}

func userName(uid uint32) string {
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		return u.Username
	}
	return strconv.FormatUint(uint64(uid), 10)
}

func (d *doctor) checkState() {
	fi, err := os.Stat(d.o.state)
	if err != nil {
		d.fail("state", "create it with: "+initCommand(d.o.config, d.o.state)+" (it keeps existing files)", "%v", err)
		return
	}
	uid, _ := ownerOf(fi)
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		d.owner = u
	}
	var unsafe *filetrust.UnsafeError
	switch err := filetrust.Check(d.o.state, uid); {
	case errors.As(err, &unsafe):
		d.fail("state", unsafe.Fix, "%v", err)
	case !fi.IsDir():
		d.fail("state", "", "%s is not a folder", d.o.state)
	case fi.Mode().Perm()&0o077 != 0:
		d.fail("state", "sudo chmod 0700 "+d.o.state, "%s is mode %04o: group or others may enter the daemon's folder", d.o.state, fi.Mode().Perm())
	case uid == 0:
		d.warn("state", "the daemon should run as a user of its own: sudo chown -R parley-keyd: "+d.o.state, "%s belongs to root", d.o.state)
	default:
		d.ok("state", "%s: mode 0700, the daemon's user is %s", d.o.state, userName(uid))
	}
}

func (d *doctor) checkKey() {
	if d.cfg != nil && d.cfg.Key.Backend != signer.File {
		d.checkServiceKey()
		return
	}
	path := filepath.Join(d.o.state, keystore.KeyFileName)
	fi, err := os.Lstat(path)
	if err != nil {
		d.fail("key", "create it with: "+initCommand(d.o.config, d.o.state)+" (it keeps existing files)", "no principal key: %v", err)
		return
	}
	uid, _ := ownerOf(fi)
	sfi, _ := os.Stat(d.o.state)
	var suid uint32
	if sfi != nil {
		suid, _ = ownerOf(sfi)
	}
	switch m := fi.Mode(); {
	case !m.IsRegular():
		d.fail("key", "", "%s is not a regular file", path)
		return
	case m.Perm()&0o077 != 0:
		d.fail("key", "sudo chmod 0600 "+path, "%s is mode %04o: others may read the principal key", path, m.Perm())
		return
	case uid != suid:
		d.fail("key", fmt.Sprintf("sudo chown %s %s", userName(suid), path), "%s belongs to %s, not to the daemon's user %s", path, userName(uid), userName(suid))
		return
	}
	pub, err := keystore.PublicKey(d.o.state)
	if err != nil {
		d.warn("key", "the daemon writes it back at its next start", "%v", err)
		return
	}
	d.principal = grant.FormatPublicKey(pub)
	how := "stored in the clear (mode 0600)"
	if b, err := os.ReadFile(path); err == nil && !bytes.Contains(b, []byte("PARLEY-PRINCIPAL-KEY-1")) {
		how = "encrypted with a passphrase"
	}
	d.ok("key", "principal %s, %s", d.principal, how)
	prev, err := keystore.Previous(d.o.state)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		d.fail("key", "", "%v", err)
	}
	for _, p := range prev {
		if until := p.Until.UTC().Format(time.RFC3339); p.Until.After(time.Now()) {
			d.ok("key", "rotated out: %s, trusted by services until %s", p.Key, until)
		} else {
			d.warn("key", "check that services dropped it from their trusted keys; it stays listed for the audit log's old checkpoints",
				"rotated out: %s, whose overlap ended at %s", p.Key, until)
		}
	}
}

// checkServiceKey is the key check when the principal key is in a key
// service: principal.pub names it (serve refuses a service key that is
// not that one), and no copy of it is left on the disk. Whether the service
// answers is the daemon's to say (parley-grant status, as an approver).
func (d *doctor) checkServiceKey() {
	kind := d.cfg.Key.Backend
	where := ""
	switch kind {
	case signer.Transit:
		t := d.cfg.Key.Transit
		where = fmt.Sprintf("transit key %s/%s at %s", t.Mount, t.Name, strings.Join(t.Addresses, ", "))
	case signer.PKCS11:
		p := d.cfg.Key.PKCS11
		where = fmt.Sprintf("key %q in PKCS#11 token %q (%s)", p.Key, p.Token, p.Module)
	}
	pub, err := keystore.PublicKey(d.o.state)
	if err != nil {
		// Never a hint to make a new key: init --backend uses the key
		// that is in the service, and never replaces it.
		d.fail("key", "write it from the key service's key with: "+initCommand(d.o.config, d.o.state)+" (it uses the key that is there)",
			"the principal key is the %s, but %v", where, err)
		return
	}
	d.principal = grant.FormatPublicKey(pub)
	d.ok("key", "principal %s, in the %s backend: %s; the daemon refuses the service's key unless it is this one", d.principal, kind, where)
	if _, err := os.Lstat(filepath.Join(d.o.state, keystore.KeyFileName)); err == nil {
		d.warn("key", "move it to offline storage, or shred it (docs/key-service.md)", "%s is still on this disk although the principal key is used from the %s backend",
			filepath.Join(d.o.state, keystore.KeyFileName), kind)
	}
}

// socketPath is the socket to check, and whether it is known: a
// configuration that exists but does not load (a typo) may name another
// socket than the default, which the daemon, started before the typo,
// still serves. Its socket line is read on its own then (see
// brokenConfigSocket).
func (d *doctor) socketPath() (string, bool) {
	switch {
	case d.o.socket != "":
		return d.o.socket, true
	case d.cfg != nil && d.cfg.Socket != "":
		return d.cfg.Socket, true
	case d.cfg != nil:
		return protocol.DefaultSocket, true
	}
	if _, err := os.Stat(d.o.config); errors.Is(err, fs.ErrNotExist) {
		return protocol.DefaultSocket, true
	}
	if s, ok := brokenConfigSocket(d.o.config); ok {
		return s, true
	}
	return protocol.DefaultSocket, false
}

func (d *doctor) checkSocket() {
	path, known := d.socketPath()
	fi, err := os.Stat(path)
	if err != nil && !known {
		d.warn("socket", "fix the configuration first, or name the socket with --socket",
			"the configuration does not load, so the socket it names is not known; no daemon at %s", path)
		return
	}
	if err != nil {
		d.fail("socket", "start it with: sudo systemctl start parley-keyd.socket (without systemd: parley-keyd serve)", "%s: no daemon listens: %v", path, err)
		return
	}
	if fi.Mode().Type() != fs.ModeSocket {
		d.fail("socket", "", "%s is not a socket", path)
		return
	}
	_, gid := ownerOf(fi)
	group := groupName(gid)
	switch {
	case d.cfg != nil && d.cfg.SocketGroup != "" && !sameGroup(d.cfg.SocketGroup, gid):
		// Members of socket_group cannot connect: a failure, not a
		// matter of taste (issue 21: a unit's RuntimeDirectory= took the
		// group away at each start, and every agent was refused).
		d.fail("socket", socketGroupHint(path, d.cfg.SocketGroup),
			"%s belongs to group %s, not to socket_group %s: its members cannot connect", path, group, d.cfg.SocketGroup)
	case d.owner != nil && strconv.FormatUint(uint64(gid), 10) == d.owner.Gid:
		d.warn("socket", fmt.Sprintf("set socket_group = \"parley-agents\" in %s (SocketGroup= in parley-keyd.socket under systemd), so that agents join a group that cannot read the configuration", d.o.config),
			"%s belongs to the daemon's own group %s: agents added to it to connect could read the configuration", path, group)
	}
	m, refusal, err := hello(path)
	switch {
	case err != nil:
		d.fail("socket", "start it with: sudo systemctl start parley-keyd.socket (without systemd: parley-keyd serve)", "%s: no daemon answers: %v", path, err)
		return
	case refusal != nil:
		// Whoever runs status (root, say) has no role here: the daemon
		// answers, and that is all it tells a stranger. Which key it
		// signs with, it reported at its start.
		d.answered = true
		if rep, _, err := lastReportedHead(d.o.state); err == nil && rep.Event == "start" && rep.Principal != "" && d.principal != "" && rep.Principal != d.principal {
			d.fail("socket", "restart the daemon to sign with the key in the state folder: sudo systemctl restart parley-keyd",
				"the daemon on %s reported at its start that it signs as %s, but %s holds %s", path, rep.Principal, d.o.state, d.principal)
			return
		}
		d.ok("socket", "%s (group %s, mode %04o): a daemon answers (%s may not ask it more)", path, group, fi.Mode().Perm(), currentUserName())
		return
	}
	d.answered = true
	if d.principal != "" && m.Principal != d.principal {
		d.fail("socket", "restart the daemon to sign with the key in the state folder: sudo systemctl restart parley-keyd",
			"the daemon on %s signs as %s, but %s holds %s", path, m.Principal, d.o.state, d.principal)
		return
	}
	d.ok("socket", "%s (group %s, mode %04o): parley-keyd %s answers as %s", path, group, fi.Mode().Perm(), m.Version, m.Principal)
}

// brokenConfigSocket reads the socket key of a configuration file that
// does not load: leniently as TOML (unknown keys and other keys' values
// ignored), else, where the file is not TOML, from a top-level line
// socket = "…". A file that names no socket means the default. ok is
// false when the file cannot be read or its socket line not found in a
// file that does not parse.
func brokenConfigSocket(path string) (string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	var c struct {
		Socket string `toml:"socket"`
	}
	if toml.Unmarshal(b, &c) == nil {
		if c.Socket == "" {
			return protocol.DefaultSocket, true
		}
		return c.Socket, true
	}
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "[") {
			break // a table: the socket key is top-level
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok || strings.TrimSpace(k) != "socket" {
			continue
		}
		var s string
		if err := toml.Unmarshal([]byte("s = "+strings.TrimSpace(v)), &struct {
			S *string `toml:"s"`
		}{&s}); err == nil && filepath.IsAbs(s) {
			return s, true
		}
	}
	return "", false
}

// socketGroupHint mends a socket whose group is not socket_group. Under
// systemd the socket unit made it: a service unit that names the socket's
// folder in RuntimeDirectory= has systemd chown it, socket included, to
// the daemon's user and group at each start (the shipped unit has none).
func socketGroupHint(path, want string) string {
	restart := "sudo systemctl restart parley-keyd.socket"
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		return "restart the daemon, which gives the socket it creates socket_group " + want
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, _ := procgroup.Output(procgroup.Command(ctx, "systemctl", "show", "--property", "RuntimeDirectory", "--value", "parley-keyd.service"), 4096)
	for _, dir := range strings.Fields(string(out)) {
		if filepath.Join("/run", dir) == filepath.Dir(path) {
			return "parley-keyd.service has RuntimeDirectory=" + dir + ", and systemd gives that folder, socket included, to the daemon's group at each start: install the current unit, which has none, or clear it with sudo systemctl edit parley-keyd.service (an empty RuntimeDirectory= line under [Service]), then: " + restart
		}
	}
	return "SocketGroup= in parley-keyd.socket decides the group: make it " + want + ", then: " + restart
}

func groupName(gid uint32) string {
	if g, err := user.LookupGroupId(strconv.FormatUint(uint64(gid), 10)); err == nil {
		return g.Name
	}
	return strconv.FormatUint(uint64(gid), 10)
}

func sameGroup(spec string, gid uint32) bool {
	id, err := lookupGroupID(spec)
	return err == nil && uint32(id) == gid
}

// hello asks the daemon on path for its manifest. A daemon that refuses
// this user answers all the same: refusal is its ERROR frame.
func hello(path string) (*protocol.Manifest, *protocol.Error, error) {
	nc, err := net.DialTimeout("unix", path, 3*time.Second)
	if err != nil {
		return nil, nil, err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	b, err := protocol.EncodeFrame(&protocol.Frame{ID: "status", Verb: protocol.VerbHello})
	if err != nil {
		return nil, nil, err
	}
	// A refused caller may find the connection closed before it writes;
	// the refusal is still there to read.
	nc.Write(b)
	line, err := protocol.NewFrameReader(nc).Next()
	if err != nil {
		return nil, nil, err
	}
	var f protocol.Frame
	if err := json.Unmarshal(line, &f); err != nil {
		return nil, nil, fmt.Errorf("the daemon's answer is not a frame: %w", err)
	}
	if f.Kind == protocol.KindError {
		return nil, f.Err(), nil
	}
	var m protocol.Manifest
	if err := json.Unmarshal(f.Data, &m); err != nil {
		return nil, nil, fmt.Errorf("the daemon's manifest is malformed: %w", err)
	}
	return &m, nil, nil
}

func (d *doctor) checkAudit() {
	path := filepath.Join(d.o.state, "audit.log")
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		d.warn("audit", "the daemon creates it when it first starts", "%s does not exist yet", path)
		return
	}
	if err != nil {
		d.fail("audit", "run status as root or as the daemon's user", "%v", err)
		return
	}
	if fi.Mode().Perm()&0o077 != 0 {
		d.fail("audit", "sudo chmod 0600 "+path, "%s is mode %04o: others may read or change it", path, fi.Mode().Perm())
	}
	// The whole log: its chain, and every checkpoint signed by the
	// principal key (or, before a rotation, by a key rotated out).
	o := audit.VerifyOptions{}
	if pub, err := keystore.PublicKey(d.o.state); err == nil {
		o.Key = pub
		if o.Previous, err = rotatedKeys(d.o.state); err != nil {
			d.fail("audit", "", "%v", err)
			return
		}
	}
	// Damage the daemon's scrub found: it issues nothing until an admin
	// acknowledges it, whatever the log holds now.
	damage, derr := audit.ReadDamage(path)
	if damage != nil {
		d.fail("audit", "keep a copy of every file for investigation; once understood: parley-keyd audit acknowledge --reason TEXT",
			"the daemon's scrub found damage (%s, found %s): %s; it issues nothing until an admin acknowledges it", damage.Reason, orWord(damage.Found, "at an unknown time"), damage)
		if derr != nil {
			return
		}
	}
	rep, err := audit.Verify(path, o)
	if err != nil {
		var ae *audit.Error
		if errors.As(err, &ae) && damage != nil && damage.Same(&audit.Damage{Reason: ae.Reason, Seq: ae.Seq, Line: ae.Line}) {
			return // the line above names it
		}
		reason := ""
		if errors.As(err, &ae) {
			reason = " (" + string(ae.Reason) + ")"
		}
		d.fail("audit", "find the line with: parley-keyd audit verify; keep a copy of every file for investigation", "%s does not verify%s: %v", path, reason, err)
		return
	}
	for _, r := range rep.Acknowledged {
		why := r.Message
		if i := strings.LastIndex(why, "; reason: "); i >= 0 {
			why = why[i+len("; reason: "):]
		}
		by := ""
		if r.DecidedBy != nil {
			by = " by " + r.DecidedBy.Approver
		}
		d.warn("audit", "", "damage acknowledged in record %d%s (%q): %s", r.Seq, by, why, r.Damage)
	}
	if damage != nil {
		return
	}
	head := rep.Head
	rep2, src, err := lastReportedHead(d.o.state)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		d.warn("audit", "", "%s, head %s; the daemon has reported no head yet to compare with", count(int(head.Seq), "record"), head.Hash)
		return
	case err != nil:
		d.fail("audit", "", "%s, head %s; the head the daemon reported cannot be read: %v", count(int(head.Seq), "record"), head.Hash, err)
		return
	}
	if msg := compareHead(path, head, rep2, d.answered); msg != "" {
		d.fail("audit", "the log was cut, rolled back or rewritten since; compare with the journal (journalctl -u parley-keyd) and the witnesses, and keep a copy for investigation",
			"%s, head %s; %s (%s)", count(int(head.Seq), "record"), head.Hash, msg, src)
		return
	}
	d.ok("audit", "%s, head %s; it holds the head the daemon reported at its %s (record %d)", count(int(head.Seq), "record"), head.Hash, rep2.Event, rep2.Seq)
}

// lastReportedHead returns the audit head the daemon last reported outside
// the log, and says where it was read. Today that is the daemon's
// audit.head file (keyd.HeadReportFile), written at start and stop; a
// signed checkpoint read from outside the daemon's reach fits here too.
func lastReportedHead(state string) (keyd.HeadReport, string, error) {
	r, err := keyd.ReadHeadReport(state)
	return r, filepath.Join(state, keyd.HeadReportFile), err
}

// compareHead says what is wrong when the log at path, whose head is cur,
// does not hold the reported head rep, or "" when it does. A running
// daemon may have appended since it reported; a daemon that reported its
// stop and is not running has appended nothing.
func compareHead(path string, cur audit.Head, rep keyd.HeadReport, running bool) string {
	if rep.Seq > cur.Seq {
		return fmt.Sprintf("the daemon reported %d records at its %s, and the log has only %d", rep.Seq, rep.Event, cur.Seq)
	}
	at, err := headAt(path, rep.Seq)
	if err != nil {
		return fmt.Sprintf("record %d cannot be read: %v", rep.Seq, err)
	}
	if at.Hash != rep.Hash {
		return fmt.Sprintf("record %d is not the one the daemon reported at its %s (hash %s, reported %s)", rep.Seq, rep.Event, at.Hash, rep.Hash)
	}
	if rep.Event == "stop" && !running && cur.Seq != rep.Seq {
		return fmt.Sprintf("%d records were added after the daemon reported its stop, while it was not running", cur.Seq-rep.Seq)
	}
	return ""
}

// headAt returns the head at record n of the log at path, in whichever
// segment holds it: n and the chain hash of its line (docs/audit.md).
func headAt(path string, n uint64) (audit.Head, error) {
	return audit.HashAt(path, n)
}

func (d *doctor) checkLock() {
	b, err := os.ReadFile(filepath.Join(d.o.state, keyd.LockFileName))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		d.ok("lock", "not locked")
		return
	case err != nil:
		d.warn("lock", "", "the lock file cannot be read (%v): a daemon treats that as locked", err)
		return
	}
	var lf struct {
		By     string `json:"by"`
		Reason string `json:"reason"`
		At     int64  `json:"at"`
	}
	if json.Unmarshal(b, &lf) != nil || lf.By == "" {
		d.warn("lock", "an approver who is not an agent runs: parley-grant unlock", "the lock file is damaged, which a daemon treats as locked")
		return
	}
	reason := ""
	if lf.Reason != "" {
		reason = " (" + lf.Reason + ")"
	}
	d.warn("lock", "an approver who is not an agent lifts it with: parley-grant unlock",
		"LOCKED by %s since %s%s: every request is refused", lf.By, time.Unix(lf.At, 0).UTC().Format(time.RFC3339), reason)
}

func (d *doctor) checkUnits() {
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		pid1, _ := os.ReadFile("/proc/1/comm")
		d.warn("units", "", "systemd is not running here (PID 1 is %s): parley-keyd.socket and parley-keyd.service not checked", strings.TrimSpace(string(pid1)))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, unit := range []string{"parley-keyd.socket", "parley-keyd.service"} {
		out, _ := procgroup.Output(procgroup.Command(ctx, "systemctl", "is-enabled", unit), 4096)
		enabled := strings.TrimSpace(string(out))
		out, _ = procgroup.Output(procgroup.Command(ctx, "systemctl", "is-active", unit), 4096)
		active := strings.TrimSpace(string(out))
		switch {
		case active == "failed":
			d.fail("units", "see why with: journalctl -u parley-keyd; once mended: sudo systemctl reset-failed parley-keyd.service parley-keyd.socket && sudo systemctl restart parley-keyd.socket",
				"%s failed", unit)
		case unit == "parley-keyd.socket" && (enabled != "enabled" || active != "active"):
			d.fail("units", "sudo systemctl enable --now parley-keyd.socket", "%s is %s and %s", unit, orWord(enabled, "not installed"), orWord(active, "inactive"))
		default:
			d.ok("units", "%s is %s and %s", unit, orWord(enabled, "static"), orWord(active, "inactive"))
		}
	}
}

// count says "1 record", "3 records".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func orWord(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}
