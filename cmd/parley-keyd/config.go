package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"github.com/parley-keyd/parley-keyd/internal/filetrust"
	"github.com/parley-keyd/parley-keyd/keyd"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
	"golang.org/x/sys/unix"
)

// Where things live. When installed, the configuration and the policy are
// in /etc/parley-keyd (owned by root, readable by the daemon's group) and
// nowhere else; the state (key, audit log, lock, paired phones) is in
// /var/lib/parley-keyd, owned by the daemon's user alone. Every command
// finds both the same way: a flag, else an environment variable, else the
// installed place.

// defaultConfigDir is the configuration folder unless --config-dir,
// --config or PARLEY_KEYD_CONFIG_DIR says otherwise.
func defaultConfigDir() string {
	if d := os.Getenv("PARLEY_KEYD_CONFIG_DIR"); d != "" {
		return d
	}
	return "/etc/parley-keyd"
}

// defaultConfig is the configuration file of the default folder.
func defaultConfig() string { return filepath.Join(defaultConfigDir(), "config.toml") }

// initCommand is the init command line that makes what is missing for the
// configuration file config and the state folder state.
func initCommand(config, state string) string {
	c := "parley-keyd init"
	if os.Geteuid() != 0 && !writable(filepath.Dir(config)) {
		c = "sudo " + c
	}
	if state != "/var/lib/parley-keyd" {
		c += " --state " + state
	}
	if d := filepath.Dir(config); d != "/etc/parley-keyd" {
		c += " --config-dir " + d
	}
	// Where the key is in a key service, init must say so: without
	// --backend it would make a file key (which it refuses to do there).
	if b := configBackend(config); b != "" && b != signer.File {
		c += " --backend " + b
	}
	return c
}

// configBackend returns the [key] backend the configuration at path names,
// or "" when it cannot be read or parsed. Only for hints and for init's
// refusal to make a file key: it does not vouch for the file.
func configBackend(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	cfg, err := keyd.ParseConfig(data, path)
	if err != nil {
		return ""
	}
	return cfg.Key.Backend
}

// writable reports whether this process may create files in dir, or dir's
// parent when dir does not exist yet.
func writable(dir string) bool {
	for {
		err := unix.Access(dir, unix.W_OK)
		if err == nil {
			return true
		}
		if !errors.Is(err, fs.ErrNotExist) || filepath.Dir(dir) == dir {
			return false
		}
		dir = filepath.Dir(dir)
	}
}

// loadConfig reads the configuration file for serve, pair and status. Each
// way it can fail has its own message and a hint that leads somewhere that
// works: a missing file is made by init (which keeps an existing key), an
// unreadable one is read as the daemon's user or root, a broken one names
// its line, and one that others could change (or that names such a file)
// says which owner and mode are safe. The files must be safe for the
// daemon's user (daemonUID).
func loadConfig(path, state string) (*keyd.Config, error) {
	cfg, err := keyd.LoadConfigFor(path, daemonUID(state))
	var unsafe *filetrust.UnsafeError
	var te *keyd.TrustError
	switch {
	case err == nil:
		return cfg, nil
	case errors.As(err, &te):
		return nil, &exitError{code: exitConfig, err: fmt.Errorf("the configuration is refused: %w", err), hint: trustHint(te.Problems[0].Err)}
	case errors.As(err, &unsafe):
		return nil, &exitError{code: exitConfig, err: fmt.Errorf("the configuration is refused: %w", err), hint: unsafe.Fix}
	case errors.Is(err, fs.ErrNotExist):
		return nil, withHint(fmt.Errorf("the configuration file %s does not exist", path),
			"create it with: "+initCommand(path, state)+" (it keeps an existing key and existing files)")
	case errors.Is(err, fs.ErrPermission):
		// Never loosen the file for whoever ran this (an agent, say):
		// only the daemon's user is given it, through its own group.
		hint := "run this as root or as the daemon's user (the owner of " + state + ")"
		if os.Geteuid() != 0 && stateOwned(state) {
			hint = fmt.Sprintf("it must be readable by %s, the daemon's user: sudo chown root:%s %s && sudo chmod 0640 %s", whoAmI(), myGroup(), path, path)
		}
		return nil, withHint(fmt.Errorf("cannot read the configuration file %s: permission denied", path), hint)
	case errors.As(err, new(*fs.PathError)):
		return nil, withHint(fmt.Errorf("cannot read the configuration file: %w", err), "")
	}
	return nil, &exitError{code: exitConfig, err: fmt.Errorf("the configuration is invalid: %w", err),
		hint: "fix that line; the comments init writes and docs/admin.md list every key; parley-keyd status checks the whole set-up"}
}

// trustHint is the hint for one reason a configuration is refused.
func trustHint(err error) string {
	var unsafe *filetrust.UnsafeError
	var own *keyd.OwnUserError
	switch {
	case errors.As(err, &unsafe):
		return unsafe.Fix
	case errors.As(err, &own):
		return own.Fix()
	}
	return ""
}

// stateOwned reports whether the state folder exists and belongs to this
// process's user: then this is the daemon's user.
func stateOwned(state string) bool {
	fi, err := os.Stat(state)
	if err != nil || !fi.IsDir() {
		return false
	}
	uid, _ := ownerOf(fi)
	return uid == uint32(os.Geteuid())
}

// myGroup names this process's primary group, which the daemon's own
// group is when it runs as its own user.
func myGroup() string {
	gid := strconv.Itoa(os.Getgid())
	if g, err := user.LookupGroupId(gid); err == nil {
		return g.Name
	}
	return gid
}

// daemonUID is the daemon's user for the state folder state: the folder's
// owner, whoever runs this command (root, or an agent by mistake), or this
// process's user before the folder exists. The daemon's files may belong to
// that user and to root, nobody else.
func daemonUID(state string) uint32 {
	if fi, err := os.Stat(state); err == nil && fi.IsDir() {
		uid, _ := ownerOf(fi)
		return uid
	}
	return uint32(os.Geteuid())
}

func whoAmI() string {
	if u, err := user.Current(); err == nil {
		return "user " + u.Username
	}
	return "uid " + strconv.Itoa(os.Getuid())
}

func currentUserName() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return strconv.Itoa(os.Getuid())
}

// policyHint is the hint for a policy file that the daemon cannot use.
func policyHint(pe *keyd.PolicyError, config, state string) string {
	if errors.Is(pe.Err, fs.ErrNotExist) {
		return "create the default policy with: " + initCommand(config, state) + " (it keeps existing files)"
	}
	if h := trustHint(pe.Err); h != "" {
		return h
	}
	return "check it with: parley-keyd policy check " + pe.Path
}
