package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/filetrust"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/keyd/keystore"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
	"github.com/parley-keyd/parley-keyd/policies"
	"github.com/spf13/cobra"
)

func newInitCmd() *cobra.Command {
	var o initOptions
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Create what is missing: the state folder, the principal key, the configuration and the policy",
		Long: `init creates what is missing of a daemon's set-up, and keeps what exists:

  - the configuration (config.toml) and the default policy (policy.toml) in
    --config-dir, which for an installed daemon is /etc/parley-keyd, the one
    place they are read from;
  - the state folder (0700) and a new principal key (0600, encrypted with a
    passphrase when --passphrase-file is given) in --state.

It never overwrites an existing key or file, so running it again completes a
half-made set-up. It prints the principal's public key, which services must
trust.

Run as root, init writes the configuration as root (mode 0640, group of the
daemon's user, so that the daemon can read it and nobody else), then drops to
the daemon's user (--user; by default the owner of an existing state folder)
to create the key, so that the key belongs to that user from the start:

  sudo parley-keyd init --user parley-keyd --agent-user calbot --approver-user alice

Run as another user, init writes everything as that user, who then runs
the daemon. Agents and approvers must be other users: init refuses to name
the daemon's user (or root's --user) as either, before it writes anything,
and so do serve and status (root excepted, which reads every file anyway).

With --backend transit or pkcs11 the principal key lives in a key service
instead (docs/key-service.md): init reads the [key] table of config.toml
(writing a template first when there is no configuration yet), creates the
key there (pkcs11: in the token, not extractable) or uses the one that
exists, and writes its public key to principal.pub. --import moves the
existing file key into the transit engine, so that services keep trusting
the same principal.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.socketGroupSet = cmd.Flags().Changed("socket-group")
			return runInit(o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.state, "state", defaultState(), "state folder (key, audit log); $PARLEY_KEYD_STATE")
	f.StringVar(&o.passFile, "passphrase-file", "", "encrypt a new key with the passphrase in this file")
	f.StringVar(&o.configDir, "config-dir", defaultConfigDir(), "where to write config.toml and policy.toml; $PARLEY_KEYD_CONFIG_DIR")
	f.StringVar(&o.socket, "socket", "", "socket path to write into the configuration (default "+protocol.DefaultSocket+")")
	f.StringVar(&o.socketGroup, "socket-group", "", "socket_group to write into the configuration (default parley-agents when that group exists; \"\" for none)")
	f.StringSliceVar(&o.agents, "agent-user", nil, "user whose agents may connect (repeatable; never the daemon's user)")
	f.StringSliceVar(&o.approvers, "approver-user", nil, "user who approves (repeatable; never the daemon's user)")
	f.StringVar(&o.user, "user", os.Getenv("PARLEY_KEYD_USER"), "as root: the daemon's user, who will own the key (default: the state folder's owner); $PARLEY_KEYD_USER")
	f.StringVar(&o.backend, "backend", signer.File, "where the principal key lives: file, transit or pkcs11")
	f.BoolVar(&o.importKey, "import", false, "transit: import the existing principal.key instead of creating a key")
	f.StringVar(&o.tokenFile, "token-file", "", "transit: a token that may create or import the key (default: the configured token_file)")
	return cmd
}

type initOptions struct {
	state, passFile, configDir, socket, socketGroup, user string
	backend, tokenFile                                    string
	importKey                                             bool
	socketGroupSet                                        bool // --socket-group given, even as ""
	agents, approvers                                     []string
}

// defaultSocketGroup is the group of agents and approvers that the default
// install creates (dist/sysusers.d).
const defaultSocketGroup = "parley-agents"

func runInit(o initOptions) error {
	switch o.backend {
	case signer.File:
		if o.importKey || o.tokenFile != "" {
			return withHint(errors.New("--import and --token-file are for --backend transit"), "parley-keyd init --backend transit --import")
		}
		if err := checkNotKeyService(o); err != nil {
			return err
		}
	case signer.Transit, signer.PKCS11:
		if o.importKey && o.backend != signer.Transit {
			return errors.New("--import is for --backend transit: a PKCS#11 key is generated in the token")
		}
		if err := refuseOwnUser(uint32(os.Geteuid()), o.agents, o.approvers, filepath.Join(o.configDir, "config.toml")); err != nil {
			return err
		}
		return initKeyService(o)
	default:
		return fmt.Errorf("--backend %q is not one of file, transit, pkcs11", o.backend)
	}
	// Every name is checked before anything is written: a configuration
	// naming a user who does not exist lets nobody in, silently.
	for _, list := range [][]string{o.agents, o.approvers} {
		for _, name := range list {
			if err := userExists(name); err != nil {
				return withHint(err, "create the user first (sudo useradd --system --user-group "+name+"), or name one that exists")
			}
		}
	}
	if !o.socketGroupSet {
		if _, err := user.LookupGroup(defaultSocketGroup); err == nil {
			o.socketGroup = defaultSocketGroup
		}
	} else if _, err := lookupGroupID(o.socketGroup); o.socketGroup != "" && err != nil {
		return withHint(err, "create the group first (sudo groupadd --system "+o.socketGroup+"), or name one that exists")
	}
	owner, err := initOwner(o)
	if err != nil {
		return err
	}
	// Property 12: the daemon's user is never an agent's or an
	// approver's, neither by the flags nor in a configuration init keeps.
	// Checked before anything is written.
	daemonID := uint32(os.Geteuid())
	if owner != nil {
		n, _ := strconv.ParseUint(owner.Uid, 10, 32)
		daemonID = uint32(n)
	}
	if err := refuseOwnUser(daemonID, o.agents, o.approvers, filepath.Join(o.configDir, "config.toml")); err != nil {
		return err
	}
	var pass []byte
	if o.passFile != "" {
		// Read now: after dropping to the daemon's user, root's
		// passphrase file may no longer be readable.
		if pass, err = readPassphraseFile(o.passFile); err != nil {
			return err
		}
	}

	tmpl := keyd.ConfigTemplate{Socket: protocol.SocketPath(o.socket), SocketGroup: o.socketGroup, Agents: o.agents, Approvers: o.approvers}
	cfgPath := filepath.Join(o.configDir, "config.toml")
	if err := writeConfigFile(cfgPath, tmpl.Text()+signer.Template(signer.File), owner, o); err != nil {
		return err
	}
	if err := writeConfigFile(filepath.Join(o.configDir, "policy.toml"), policies.DefaultText(), owner, o); err != nil {
		return err
	}
	if cfg, err := keyd.LoadConfig(cfgPath); err == nil {
		a := cfg.Access
		if len(a.AgentUsers)+len(a.AgentGroups)+len(a.ApproverUsers)+len(a.ApproverGroups) == 0 {
			warnf("%s lets nobody connect yet: name users in its [access] section, or run init again with --agent-user and --approver-user on a new configuration", cfgPath)
		}
	} else {
		warnf("the existing %s is kept, but it does not load: %v", cfgPath, err)
	}

	if owner != nil {
		if err := becomeDaemonUser(owner, o.state); err != nil {
			return err
		}
	}
	pub, err := keystore.Init(o.state, pass)
	switch {
	case errors.Is(err, keystore.ErrKeyExists) || errors.Is(err, fs.ErrExist):
		// Completing a half-made set-up: the key stays as it is.
		p, perr := keystore.PublicKey(o.state)
		if perr != nil {
			return withHint(fmt.Errorf("%s holds a principal key, but its public key cannot be read: %w", o.state, perr),
				"the daemon writes it back at its next start, or run: parley-keyd status")
		}
		infof("keeping the existing principal key in %s", o.state)
		if o.passFile != "" {
			warnf("--passphrase-file was not used: the existing key stays as it is")
		}
		pub = p
	case err != nil:
		var pe *keystore.PermError
		if errors.As(err, &pe) {
			return withHint(err, pe.Fix)
		}
		return err
	default:
		infof("created the principal key in %s", o.state)
	}
	infof("configuration and policy in %s; check the whole set-up with: parley-keyd status", o.configDir)
	infof("services must trust this principal key:")
	fmt.Println(grant.FormatPublicKey(pub))
	return nil
}

// refuseOwnUser returns an error when the daemon's user uid is named as an
// agent or an approver, or has a role in the existing configuration at
// cfgPath. Root may hold one (keyd.LoadConfigFor).
func refuseOwnUser(uid uint32, agents, approvers []string, cfgPath string) error {
	if uid == 0 {
		return nil
	}
	t := keyd.ConfigTemplate{Agents: agents, Approvers: approvers}
	cfg, err := keyd.ParseConfig([]byte(t.Text()), cfgPath)
	if err == nil {
		err = cfg.CheckDaemonUser(uid)
	}
	if err == nil {
		if b, rerr := os.ReadFile(cfgPath); rerr == nil {
			if kept, perr := keyd.ParseConfig(b, cfgPath); perr == nil {
				if err = kept.CheckDaemonUser(uid); err != nil {
					err = fmt.Errorf("%s: %w", cfgPath, err)
				}
			}
		}
	}
	var own *keyd.OwnUserError
	if errors.As(err, &own) {
		return usage(err, "name agents and approvers that are other users than the daemon's; as root: sudo parley-keyd init --user parley-keyd --agent-user AGENT --approver-user HUMAN")
	}
	return err
}

// checkNotKeyService refuses a file key init, before it writes anything,
// where the principal key is in a key service: the configuration says so,
// or principal.pub names a principal whose key is not in the state folder.
// A new file key would replace principal.pub, which services trust, and
// serve would then refuse the key service's key.
func checkNotKeyService(o initOptions) error {
	cfgPath := filepath.Join(o.configDir, "config.toml")
	if b := configBackend(cfgPath); b != "" && b != signer.File {
		return withHint(fmt.Errorf("%s says the principal key is in the %s backend; init without --backend would make a file key instead", cfgPath, b),
			initCommand(cfgPath, o.state)+" (it uses the key that is there, and keeps principal.pub)")
	}
	pubPath := filepath.Join(o.state, keystore.PublicKeyFileName)
	if _, err := os.Lstat(filepath.Join(o.state, keystore.KeyFileName)); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if pub, err := keystore.PublicKey(o.state); err == nil {
		return withHint(fmt.Errorf("%s names the principal %s, whose key is not in %s (it is in a key service, or was moved offline); services trust it, so init does not make another",
			pubPath, grant.FormatPublicKey(pub), o.state),
			"for a key service, set its [key] table and run: parley-keyd init --backend transit (or pkcs11); to bring a file key back: parley-keyd key restore")
	}
	return nil
}

// userExists reports an error when name is neither a user nor a uid that
// has a user.
func userExists(name string) error {
	if _, err := user.Lookup(name); err == nil {
		return nil
	}
	if _, err := strconv.ParseUint(name, 10, 32); err == nil {
		if _, err := user.LookupId(name); err == nil {
			return nil
		}
	}
	return fmt.Errorf("there is no user %q", name)
}

func lookupGroupID(name string) (int, error) {
	if _, err := strconv.ParseUint(name, 10, 31); err == nil {
		name2, err := user.LookupGroupId(name)
		if err != nil {
			return 0, fmt.Errorf("there is no group with gid %s", name)
		}
		name = name2.Name
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, fmt.Errorf("there is no group %q", name)
	}
	return strconv.Atoi(g.Gid)
}

// daemonUser returns the user init creates the key as, when that is not
// the user running init: only root may do that. It is --user, else the
// owner of an existing state folder (as made by systemd-tmpfiles).
// initOwner is the daemon's user init writes for (daemonUser; nil when it
// runs as that user), refusing a configuration folder that is the state
// folder when root writes for another user: root's configuration in the
// daemon's own folder would be the daemon's to change.
func initOwner(o initOptions) (*user.User, error) {
	owner, err := daemonUser(o.user, o.state)
	if err != nil {
		return nil, err
	}
	if owner != nil && filepath.Clean(o.configDir) == filepath.Clean(o.state) {
		return nil, usage(errors.New("the configuration cannot be in the state folder when root writes it for the daemon's user"),
			"write it to its own folder: --config-dir /etc/parley-keyd")
	}
	return owner, nil
}

func daemonUser(name, state string) (*user.User, error) {
	if name == "" && os.Geteuid() == 0 {
		if fi, err := os.Stat(state); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
				u, err := user.LookupId(strconv.FormatUint(uint64(st.Uid), 10))
				if err != nil {
					return nil, withHint(fmt.Errorf("the state folder %s belongs to uid %d, which has no user", state, st.Uid), "name the daemon's user with --user")
				}
				return u, nil
			}
		}
	}
	if name == "" {
		return nil, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		if u, err = user.LookupId(name); err != nil {
			return nil, withHint(fmt.Errorf("there is no user %q to run the daemon as", name),
				"sudo make install creates parley-keyd (with systemd-sysusers); or name the daemon's user with --user")
		}
	}
	if u.Uid == strconv.Itoa(os.Geteuid()) {
		return nil, nil
	}
	if os.Geteuid() != 0 {
		return nil, withHint(fmt.Errorf("only root can create the key as another user (%s)", u.Username),
			"run: sudo parley-keyd init --user "+u.Username+" …, or run init as "+u.Username)
	}
	return u, nil
}

// writeConfigFile creates path with content unless it exists, so that an
// admin's edits survive a second init. When root writes it for the daemon's
// user owner, the file (and a folder init makes) belongs to root and to
// owner's group, readable by that group only: the daemon reads its
// configuration but cannot change it, and the agents' socket group cannot
// read it.
func writeConfigFile(path, content string, owner *user.User, o initOptions) error {
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		// The configuration may live in the state folder (a single-user
		// set-up), which must be the daemon's alone.
		mode := os.FileMode(0o750)
		if filepath.Clean(dir) == filepath.Clean(o.state) {
			mode = 0o700
		}
		if err := os.MkdirAll(dir, mode); err != nil {
			return configWriteError(err, o)
		}
		if err := os.Chmod(dir, mode); err != nil {
			return err
		}
		if owner != nil {
			gid, _ := strconv.Atoi(owner.Gid)
			if err := os.Chown(dir, 0, gid); err != nil {
				return err
			}
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o640)
	if errors.Is(err, fs.ErrExist) {
		infof("keeping the existing %s", path)
		return nil
	}
	if err != nil {
		return configWriteError(err, o)
	}
	err = f.Chmod(0o640)
	if err == nil && owner != nil {
		gid, _ := strconv.Atoi(owner.Gid)
		err = f.Chown(0, gid)
	}
	if err == nil {
		_, err = f.WriteString(content)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return err
	}
	infof("wrote %s", path)
	return nil
}

func configWriteError(err error, o initOptions) error {
	if errors.Is(err, fs.ErrPermission) {
		return withHint(fmt.Errorf("cannot write the configuration: %w", err),
			"run init as root (sudo parley-keyd init --user DAEMON-USER …): it writes the configuration as root and the key as the daemon's user; or write it elsewhere with --config-dir DIR and start the daemon with --config DIR/config.toml")
	}
	return err
}

// becomeDaemonUser makes sure the state folder exists and belongs to u, then
// drops this process from root to u for good, so that every file init
// creates from here on is u's, and nothing u planted in the folder is
// touched with root's rights (stateowner.go).
func becomeDaemonUser(u *user.User, state string) error {
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if _, err := os.Stat(state); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(state), 0o755); err != nil {
			return err
		}
		if err := os.Mkdir(state, 0o700); err != nil {
			return err
		}
		if err := os.Chown(state, uid, gid); err != nil {
			return err
		}
	}
	if err := dropTo(u); err != nil {
		return err
	}
	return checkStateFolder(state)
}

func infof(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "parley-keyd: "+format+"\n", args...)
}

func warnf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "parley-keyd: warning: "+format+"\n", args...)
}

func firstOf(list []string) string {
	if len(list) == 0 {
		return ""
	}
	return list[0]
}

// readPassphraseFile reads a passphrase from path, which, like a key
// service's credential, must be a regular file others cannot read.
func readPassphraseFile(path string) ([]byte, error) {
	// A passphrase others could change would encrypt a new key, or
	// unlock this one, with what they chose; one others could read
	// would give the key away.
	f, err := filetrust.Open(path, uint32(os.Geteuid()))
	if err != nil {
		return nil, fmt.Errorf("passphrase file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("passphrase file: %w", err)
	}
	if err := signer.CheckSecretFile("passphrase file", path, fi); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("passphrase file: %w", err)
	}
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	if len(b) == 0 {
		return nil, errors.New("passphrase file is empty")
	}
	return b, nil
}

func newPubkeyCmd() *cobra.Command {
	var state string
	var trust bool
	cmd := &cobra.Command{
		Use:   "pubkey [--trust]",
		Short: "Print the principal's public key",
		Long: `pubkey prints the principal's public key, which services trust. With --trust
it also prints the keys rotated out whose overlap has not ended, each as
"KEY until TIME": everything a service should trust now.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := actAsOwnerOf(state); err != nil {
				return err
			}
			pub, err := keystore.PublicKey(state)
			if err != nil {
				return withHint(err, "create the key with: parley-keyd init --state "+state)
			}
			fmt.Println(grant.FormatPublicKey(pub))
			if !trust {
				return nil
			}
			prev, err := keystore.Previous(state)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			for _, p := range prev {
				if p.Until.After(time.Now()) {
					fmt.Printf("%s until %s\n", p.Key, p.Until.UTC().Format(time.RFC3339))
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&state, "state", defaultState(), "state folder")
	cmd.Flags().BoolVar(&trust, "trust", false, "also print the old keys services still trust, with their time")
	return cmd
}
