package keyd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/parley-keyd/parley-keyd/internal/filetrust"
	"github.com/parley-keyd/parley-keyd/keyd/peercred"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
	"github.com/parley-keyd/parley-keyd/policies"
)

// Property 12 (DESIGN.md): everything the daemon trusts can be changed only
// by root and the daemon's own user, and that user is never an agent's or
// an approver's. LoadConfigFor enforces both for the configuration and for
// every file it names (TrustedFiles), so serve, every reload and status
// refuse the same set-ups; LoadPolicy reads the policy through the same
// check.

// Bounds on what the daemon reads of its own files. They are root's, but
// a mistake (a log file named as the policy) should fail, not fill memory.
const (
	maxConfigFile = 1 << 20
	maxPolicyFile = 16 << 20
)

// TrustedFile is a file the configuration makes the daemon trust: its
// content decides what is issued (the policy), is run or loaded into the
// daemon (a witness program, a PKCS#11 module), or proves who it talks to
// (credentials, a CA).
type TrustedFile struct {
	What string // the configuration key that names it, such as "audit.witness_command"
	Path string
}

// TrustedFiles lists every file the configuration names that the daemon
// trusts, besides the configuration itself. A credential given by a
// relative name is looked up in $CREDENTIALS_DIRECTORY when that is set.
func (c *Config) TrustedFiles() []TrustedFile {
	out := []TrustedFile{{"policy", c.PolicyPath()}}
	add := func(what, path string) {
		if path != "" {
			out = append(out, TrustedFile{what, path})
		}
	}
	cred := func(what, name string) {
		if name == "" {
			return
		}
		if filepath.IsAbs(name) {
			add(what, name)
		} else if dir := os.Getenv(signer.CredentialsEnv); dir != "" {
			add(what, filepath.Join(dir, name))
		}
	}
	// The program, and every absolute path among its arguments: a
	// script given to an interpreter is as much the program.
	for _, arg := range c.Audit.WitnessCommand {
		if filepath.IsAbs(arg) {
			add("audit.witness_command", arg)
		}
	}
	add("audit.witness_file", c.Audit.WitnessFile)
	t := c.Key.Transit
	add("key.transit.ca_file", t.CAFile)
	cred("key.transit.token_file", t.TokenFile)
	cred("key.transit.role_id_file", t.RoleIDFile)
	cred("key.transit.secret_id_file", t.SecretIDFile)
	p := c.Key.PKCS11
	add("key.pkcs11.module", p.Module)
	cred("key.pkcs11.pin_file", p.PINFile)
	return out
}

// TrustProblem is one reason the daemon refuses a configuration: a file it
// names that others could change, or the daemon's own user in a role.
type TrustProblem struct {
	What string // "config", "policy", a key such as "audit.witness_command", or "access"
	Path string // the file, or "" for the daemon's user
	Err  error  // a *filetrust.UnsafeError, an *OwnUserError or a file system error
}

// TrustError is a configuration the daemon refuses to serve because of
// Problems. Config is the configuration as read, for status to report on
// the rest of the set-up; it must never be served.
type TrustError struct {
	Config   *Config
	Problems []TrustProblem
}

func (e *TrustError) Error() string {
	p := e.Problems[0]
	msg := fmt.Sprintf("%s: %v", p.What, p.Err)
	if n := len(e.Problems) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more: parley-keyd status lists them)", n)
	}
	return msg
}

// Unwrap returns every problem's error, for errors.As.
func (e *TrustError) Unwrap() []error {
	out := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		out[i] = p.Err
	}
	return out
}

// OwnUserError says that the configuration gives the daemon's own user a
// role. An agent running as that user could read the principal key; an
// approver would approve as the daemon.
type OwnUserError struct {
	User string
	Role string // "an agent", "an approver", "a dual-role user"
}

func (e *OwnUserError) Error() string {
	return fmt.Sprintf("the daemon's own user %s is also %s: it would read the principal key and the audit log as the daemon", e.User, e.Role)
}

// Fix says what to do instead.
func (e *OwnUserError) Fix() string {
	return "run the daemon as a user of its own (parley-keyd when installed) and name agents and approvers that are other users"
}

// LoadConfig reads and parses the configuration file at path, for a daemon
// that runs as this process's effective user (LoadConfigFor).
func LoadConfig(path string) (*Config, error) {
	return LoadConfigFor(path, uint32(os.Geteuid()))
}

// LoadConfigFor reads and parses the configuration file at path for a
// daemon that runs as uid. It returns an error unless nobody but root and
// uid could change the file and every file it names (filetrust.Check), and
// unless uid is no agent's, approver's or dual-role user's. Root (uid 0)
// may hold a role: root reads every file anyway, and status warns about a
// daemon that runs as root. The policy file is then read by LoadPolicy.
func LoadConfigFor(path string, uid uint32) (*Config, error) {
	data, err := filetrust.ReadFile(path, uid, maxConfigFile)
	if err != nil {
		return nil, err
	}
	c, err := ParseConfig(data, path)
	if err != nil {
		return nil, err
	}
	c.uid = uid
	var problems []TrustProblem
	for _, f := range c.TrustedFiles() {
		// A file that does not exist, in a folder only root and uid
		// may write, is the business of whatever reads it.
		err := filetrust.Check(f.Path, uid)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			problems = append(problems, TrustProblem{What: f.What, Path: f.Path, Err: err})
		}
		if err == nil && f.What == "audit.witness_command" {
			problems = append(problems, interpreterProblems(f, uid)...)
		}
	}
	if err := c.CheckDaemonUser(uid); err != nil {
		problems = append(problems, TrustProblem{What: "access", Err: err})
	}
	if len(problems) > 0 {
		return nil, &TrustError{Config: c, Problems: problems}
	}
	return c, nil
}

// CheckDaemonUser returns an *OwnUserError when the configuration's access
// section makes the user uid an agent, an approver or a dual-role user, by
// name, by uid or through a group it is in. Root is exempt (LoadConfigFor).
func (c *Config) CheckDaemonUser(uid uint32) error {
	if uid == 0 {
		return nil
	}
	id := peercred.Identity{UID: uid, GID: ^uint32(0)}
	name := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(name); err == nil {
		id.User, name = u.Username, u.Username
		if g, err := strconv.ParseUint(u.Gid, 10, 32); err == nil {
			id.GID = uint32(g)
		}
		gids, _ := u.GroupIds()
		for _, g := range gids {
			n, err := strconv.ParseUint(g, 10, 32)
			if err != nil {
				continue
			}
			id.GroupIDs = append(id.GroupIDs, uint32(n))
			if gr, err := user.LookupGroupId(g); err == nil {
				id.Groups = append(id.Groups, gr.Name)
			}
		}
	}
	r := c.roles(id)
	dual := slices.Contains(c.Access.DualRoleUsers, strconv.FormatUint(uint64(uid), 10)) ||
		(id.User != "" && slices.Contains(c.Access.DualRoleUsers, id.User))
	switch {
	case dual || r.Weak:
		return &OwnUserError{User: name, Role: "a dual-role user"}
	case r.Agent:
		return &OwnUserError{User: name, Role: "an agent"}
	case r.Approver:
		return &OwnUserError{User: name, Role: "an approver"}
	}
	return nil
}

// LoadPolicy reads and parses the policy file cfg names, refusing a file
// that anyone but root and the daemon's user could change.
func LoadPolicy(cfg *Config) (*policies.Policy, error) {
	data, err := filetrust.ReadFile(cfg.PolicyPath(), cfg.uid, maxPolicyFile)
	if err != nil {
		return nil, err
	}
	return policies.Parse(data, cfg.PolicyPath())
}

// maxInterpreters is how many "#!" lines the kernel follows from a program
// to the interpreter it runs (a script for a script), at most.
const maxInterpreters = 4

// interpreterProblems checks the interpreters a witness program's "#!" line
// names, and theirs in turn: the kernel runs them, as the daemon's user,
// with the checkpoint on their input, so each is a program the daemon runs
// (property 12). Attack: a script of root's whose "#!" names an
// interpreter in a folder an agent owns; the agent replaces the
// interpreter. An absolute path given as the line's argument is checked
// too, as a witness_command's arguments are.
func interpreterProblems(f TrustedFile, uid uint32) []TrustProblem {
	var out []TrustProblem
	path := f.Path
	for range maxInterpreters {
		interp, arg, err := shebang(path, uid)
		if err != nil || interp == "" {
			return out
		}
		for _, p := range []string{interp, arg} {
			if p == "" || (p == arg && !filepath.IsAbs(p)) {
				continue
			}
			if err := filetrust.Check(p, uid); err != nil && !errors.Is(err, fs.ErrNotExist) {
				out = append(out, TrustProblem{What: f.What, Path: p, Err: err})
			}
		}
		path = interp
	}
	return out
}

// shebang returns the interpreter and its one argument that the "#!" line
// of the file at path names, as the kernel reads them (the line's first 256
// bytes; the interpreter ends at a space or a tab), or "" when the file
// has no such line. A file that is not regular has none.
func shebang(path string, uid uint32) (interp, arg string, err error) {
	file, err := filetrust.Open(path, uid)
	if err != nil {
		return "", "", err
	}
	defer file.Close()
	buf := make([]byte, 256)
	n, err := io.ReadFull(file, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", "", err
	}
	line, ok := bytes.CutPrefix(buf[:n], []byte("#!"))
	if !ok {
		return "", "", nil
	}
	if i := bytes.IndexByte(line, '\n'); i >= 0 {
		line = line[:i]
	}
	line = bytes.Trim(line, " \t")
	i := bytes.IndexAny(line, " \t")
	if i < 0 {
		return string(line), "", nil
	}
	return string(line[:i]), string(bytes.Trim(line[i:], " \t")), nil
}
