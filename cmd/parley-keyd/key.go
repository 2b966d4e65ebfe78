package main

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/duration"
	"github.com/parley-keyd/parley-keyd/keyd"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
	"github.com/parley-keyd/parley-keyd/keyd/keystore"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// The key commands work on the file key in the state folder (the file
// backend). A key held by a key service (transit, PKCS#11) is backed up and
// rotated by that service; see docs/key-rotation.md.

func newKeyCmd() *cobra.Command {
	var state, user string
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Back up, restore and rotate the principal key",
		Long: `key backs up the principal key (encrypted with a passphrase), restores it from
such a backup, and rotates it to a new key while services keep trusting the
old one for a stated overlap. docs/key-rotation.md says what to tell the
services.

Run as root, these commands act as the state folder's owner, the daemon's
user, so that the files they write belong to it.`,
	}
	cmd.PersistentFlags().StringVar(&state, "state", defaultState(), "state folder; $PARLEY_KEYD_STATE")
	cmd.PersistentFlags().StringVar(&user, "user", os.Getenv("PARLEY_KEYD_USER"), "as root: the daemon's user (default: the state folder's owner)")
	cmd.AddCommand(newKeyBackupCmd(&state, &user), newKeyRestoreCmd(&state, &user), newKeyRotateCmd(&state, &user))
	return cmd
}

func newKeyBackupCmd(state, user *string) *cobra.Command {
	var out, passFile, backupPassFile string
	cmd := &cobra.Command{
		Use:   "backup [--out FILE]",
		Short: "Write the principal key encrypted with a passphrase, to a file or stdout",
		Long: `backup writes the principal key encrypted with age to a passphrase of its own
(scrypt, ASCII armor), to --out (created 0600, never overwritten) or to
stdout. The backup passphrase is read from --backup-passphrase-file or asked
twice on the terminal. A key encrypted at rest is unlocked with
--passphrase-file or on the terminal.

The backup is an age file: "age -d" decrypts it, and copied into a state
folder as principal.key it is a working key whose passphrase is the
backup's. Keep it, and its passphrase, away from this machine.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			unlock := keyPassphrase("")
			if passFile != "" {
				// Read as root, before the drop, as the backup's is; its
				// error matters only for a key encrypted at rest.
				atRest, err := readPassphraseFile(passFile)
				defer clear(atRest)
				unlock = func() ([]byte, error) { return bytes.Clone(atRest), err }
			}
			w := io.Writer(os.Stdout)
			if out != "" && out != "-" {
				// Opened before dropping to the daemon's user: the
				// backup goes where the admin can write.
				f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
				if err != nil {
					return withHint(fmt.Errorf("backup file: %w", err), "a backup never overwrites a file: name a new one")
				}
				defer f.Close()
				w = f
			}
			backupPass, err := newPassphrase(backupPassFile, "passphrase for the backup")
			if err != nil {
				if out != "" && out != "-" {
					os.Remove(out)
				}
				return err
			}
			defer clear(backupPass)
			if err := actAsStateOwner(*state, *user); err != nil {
				return err
			}
			b, err := keystore.Backup(*state, unlock, backupPass)
			if err != nil {
				if out != "" && out != "-" {
					os.Remove(out)
				}
				return keyError(err, *state)
			}
			if _, err := w.Write(b); err != nil {
				return err
			}
			if f, ok := w.(*os.File); ok && f != os.Stdout {
				if err := f.Sync(); err != nil {
					return err
				}
				infof("wrote the backup of the principal key to %s", out)
			}
			pub, _ := keystore.PublicKey(*state)
			infof("restore it with: parley-keyd key restore FILE (it is the key %s)", grant.FormatPublicKey(pub))
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "write the backup to FILE (default stdout)")
	cmd.Flags().StringVar(&passFile, "passphrase-file", os.Getenv("PARLEY_KEYD_PASSPHRASE_FILE"), "the passphrase of a key encrypted at rest")
	cmd.Flags().StringVar(&backupPassFile, "backup-passphrase-file", "", "the backup's passphrase (else asked twice on the terminal)")
	return cmd
}

func newKeyRestoreCmd(state, user *string) *cobra.Command {
	var passFile, backupPassFile string
	var force bool
	cmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "Put a backed-up principal key into the state folder",
		Long: `restore decrypts a backup made by key backup with its passphrase
(--backup-passphrase-file, or asked on the terminal) and writes the key into
the state folder, encrypted at rest with --passphrase-file when given. It
never overwrites a key: on a machine that has one, move it away first (or
restore into a new --state). Services need no change: the key is the one
they trust.

Over a set-up that another principal signed (its principal.pub, or its
audit log's checkpoints, are another key's), restore refuses and says what
would break: services trust the other key, and the daemon refuses a log
whose checkpoints the restored key did not sign. --force restores all the
same; move the old audit.log* away first.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			backup, err := readBackup(args[0])
			if err != nil {
				return err
			}
			backupPass, err := askPassphrase(backupPassFile, "passphrase of the backup")
			if err != nil {
				return err
			}
			defer clear(backupPass)
			var atRest []byte
			if passFile != "" {
				if atRest, err = readPassphraseFile(passFile); err != nil {
					return err
				}
				defer clear(atRest)
			}
			owner, err := daemonUser(*user, *state)
			if err != nil {
				return err
			}
			if owner != nil {
				if err := becomeDaemonUser(owner, *state); err != nil {
					return err
				}
			}
			pub, err := keystore.Restore(*state, backup, backupPass, atRest, func(pub ed25519.PublicKey) error {
				breaks := restoreBreaks(*state, pub)
				if len(breaks) == 0 {
					return nil
				}
				if !force {
					return withHint(fmt.Errorf("restoring %s into %s would break its set-up: %s", grant.FormatPublicKey(pub), *state, strings.Join(breaks, "; ")),
						"restore into a new --state; or, to make this the principal here, keep a copy of the folder, move audit.log* away and give --force")
				}
				for _, b := range breaks {
					warnf("--force: %s", b)
				}
				return nil
			})
			switch {
			case errors.Is(err, keystore.ErrKeyExists):
				return withHint(err, "restore never replaces a key: move "+*state+"/principal.key away first, or restore into another --state")
			case errors.Is(err, keystore.ErrWrongPassphrase):
				return withHint(fmt.Errorf("%s: %w", args[0], err), "the backup's passphrase is the one given to key backup, not the key's at-rest passphrase")
			case err != nil:
				return keyError(err, *state)
			}
			infof("restored the principal key into %s; start the daemon to sign with it", *state)
			fmt.Println(grant.FormatPublicKey(pub))
			return nil
		},
	}
	cmd.Flags().StringVar(&passFile, "passphrase-file", "", "encrypt the restored key at rest with the passphrase in this file")
	cmd.Flags().StringVar(&backupPassFile, "backup-passphrase-file", "", "the backup's passphrase (else asked on the terminal)")
	cmd.Flags().BoolVar(&force, "force", false, "restore another principal's key over a set-up whose audit log or principal.pub is not its own")
	return cmd
}

// restoreBreaks lists what restoring the principal key pub into state would
// break: a principal.pub holding another key, which services trust, and an
// audit log that does not verify under pub (and the keys rotated out), which
// the daemon would then refuse to open and audit verify and status would
// fail on. Restoring the principal's own backup breaks nothing.
func restoreBreaks(state string, pub ed25519.PublicKey) []string {
	var out []string
	if old, err := keystore.PublicKey(state); err == nil && !old.Equal(pub) {
		out = append(out, fmt.Sprintf("%s holds %s, the key services trust here: they would refuse the grants the restored key signs",
			keystore.PublicKeyFileName, grant.FormatPublicKey(old)))
	}
	log := filepath.Join(state, "audit.log")
	if _, err := os.Lstat(log); err != nil {
		return out
	}
	prev, _ := rotatedKeys(state)
	if _, err := audit.Verify(log, audit.VerifyOptions{Key: pub, Previous: prev}); err != nil {
		by := "another key"
		if cp, err := checkpoint.Latest(log); err == nil && cp != nil && cp.Key != grant.FormatPublicKey(pub) {
			by = cp.Key
		}
		out = append(out, fmt.Sprintf("audit.log's checkpoints are signed by %s, so they would no longer verify (audit verify and status fail) and the daemon would refuse to open the log", by))
	}
	return out
}

func newKeyRotateCmd(state, user *string) *cobra.Command {
	var overlapFlag, config, passFile string
	var compromised bool
	cmd := &cobra.Command{
		Use:   "rotate --overlap DURATION",
		Short: "Replace the principal key, keeping the old one trusted for an overlap",
		Long: `rotate makes a new principal key and lists the old public key in
principal.previous as trusted until now + --overlap. Grants the old key
signed live at most as long as the longest grant the policy can issue, so
the overlap must be at least that long: then no grant stops working early.

The daemon signs with the new key after a restart (systemctl restart
parley-keyd), not after a reload: the key is read once, at start. Until
then it signs with the old one. HELLO lists the old key with its time, and
parley-keyd pubkey --trust prints both, as services should trust them.

Tell every service to trust the new key now, and the old one until the
stated time, then to drop it (docs/key-rotation.md). The old private key is
removed from the state folder; back it up first if you must keep it.

--compromised rotates with no overlap: grants the old key signed stop
working as soon as services drop it, which they should do at once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			overlap, err := parseOverlap(overlapFlag, compromised)
			if err != nil {
				return err
			}
			if _, err := os.Stat(config); errors.Is(err, fs.ErrNotExist) {
				// The key exists: init is not what is missing.
				hint := "pass the daemon's configuration with --config FILE; without it, rotate reads $PARLEY_KEYD_CONFIG_DIR/config.toml, else /etc/parley-keyd/config.toml"
				if cmd.Flags().Changed("config") {
					hint = "check the path given to --config: the daemon's configuration, which names the policy"
				}
				return withHint(fmt.Errorf("the configuration file %s does not exist; rotate reads the policy's longest grant through it", config), hint)
			}
			cfg, err := loadConfig(config, *state)
			if err != nil {
				return err
			}
			pol, err := keyd.LoadPolicy(cfg)
			if err != nil {
				return &exitError{code: exitPolicy, err: fmt.Errorf("policy %s: %w", cfg.PolicyPath(), err), hint: "the overlap is measured against the policy's longest grant; fix the policy first"}
			}
			if longest := time.Duration(pol.LongestGrant()) * time.Second; !compromised && overlap < longest {
				return usage(fmt.Errorf("--overlap %s is shorter than the longest grant the policy can issue (%s): grants the old key signed would stop working early", words(overlap), words(longest)),
					fmt.Sprintf("give --overlap %s or more; or lower max_exp in the policy, wait out the old grants, then rotate", words(longest)))
			}
			encrypted, err := keystore.IsEncrypted(*state)
			if err != nil {
				return keyError(err, *state)
			}
			var atRest []byte
			if encrypted || passFile != "" {
				if atRest, err = newPassphrase(passFile, "passphrase for the new key at rest"); err != nil {
					return err
				}
				defer clear(atRest)
			}
			if err := actAsStateOwner(*state, *user); err != nil {
				return err
			}
			now := time.Now()
			until := now.Add(overlap)
			newPub, oldPub, err := keystore.Rotate(*state, atRest, until, now)
			if err != nil {
				return keyError(err, *state)
			}
			infof("rotated the principal key in %s", *state)
			if compromised {
				infof("tell every service to trust the new key and to drop the old key %s now: grants it signed stop working", grant.FormatPublicKey(oldPub))
			} else {
				infof("tell every service to trust the new key now, and the old key %s until %s, then to drop it", grant.FormatPublicKey(oldPub), until.UTC().Format(time.RFC3339))
			}
			infof("the daemon signs with the new key once restarted: sudo systemctl restart parley-keyd")
			fmt.Println(grant.FormatPublicKey(newPub))
			return nil
		},
	}
	cmd.Flags().StringVar(&overlapFlag, "overlap", "", "how long services keep trusting the old key, such as 24h or 30d; at least the policy's longest grant")
	cmd.Flags().BoolVar(&compromised, "compromised", false, "the old key may be known to someone else: no overlap")
	cmd.Flags().StringVar(&config, "config", defaultConfig(), "configuration file, for the policy; $PARLEY_KEYD_CONFIG_DIR/config.toml")
	cmd.Flags().StringVar(&passFile, "passphrase-file", "", "encrypt the new key at rest with this passphrase (required, or asked, when the old key is encrypted)")
	return cmd
}

// parseOverlap reads a duration such as "90m", "24h", "30d" or "1d12h".
func parseOverlap(s string, compromised bool) (time.Duration, error) {
	switch {
	case compromised && s != "" && s != "0":
		return 0, usage(errors.New("--compromised means no overlap; leave out --overlap"), "")
	case compromised:
		return 0, nil
	case s == "":
		return 0, usage(errors.New("rotate needs --overlap: how long services keep trusting the old key"), "give at least the policy's longest grant, such as --overlap 30d; or --compromised for none")
	}
	d, err := duration.Parse(s)
	if err != nil {
		return 0, usage(fmt.Errorf("--overlap: %w", err), "")
	}
	return d, nil
}

// words writes a duration as the policy does: "30d", "1h", "90m".
func words(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%(24*time.Hour) == 0:
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}

// actAsStateOwner drops from root to the state folder's owner (or --user),
// so that the files a key command writes belong to the daemon's user and
// keystore's ownership checks hold. Other users stay as they are.
func actAsStateOwner(state, name string) error {
	owner, err := daemonUser(name, state)
	if err != nil || owner == nil {
		return err
	}
	return becomeDaemonUser(owner, state)
}

// keyError gives a key command's failure the hint that fixes it.
func keyError(err error, state string) error {
	var pe *keystore.PermError
	switch {
	case errors.As(err, &pe):
		return withHint(err, pe.Fix)
	case errors.Is(err, keystore.ErrWrongPassphrase):
		return withHint(err, "the key's at-rest passphrase is the one given to init (--passphrase-file)")
	case errors.Is(err, fs.ErrNotExist):
		return withHint(err, "the key commands work on a key file in the state folder; a key held by a key service is backed up and rotated there (docs/key-rotation.md)")
	}
	return err
}

// keyPassphrase unlocks a key encrypted at rest: from file, or asked on the
// terminal.
func keyPassphrase(file string) func() ([]byte, error) {
	return func() ([]byte, error) { return askPassphrase(file, "passphrase of the principal key") }
}

// askPassphrase reads a passphrase from file, or asks it once on the
// terminal.
func askPassphrase(file, what string) ([]byte, error) {
	if file != "" {
		return readPassphraseFile(file)
	}
	if !term.IsTerminal(int(os.Stdin.Fd())) {
		return nil, usage(fmt.Errorf("no terminal to ask the %s", what), "give it in a file with the matching --…-passphrase-file flag")
	}
	fmt.Fprintf(os.Stderr, "parley-keyd: %s: ", what)
	p, err := term.ReadPassword(int(os.Stdin.Fd()))
	fmt.Fprintln(os.Stderr)
	if err == nil && len(p) == 0 {
		err = errors.New("the passphrase is empty")
	}
	return p, err
}

// newPassphrase reads a new passphrase from file, or asks it twice on the
// terminal.
func newPassphrase(file, what string) ([]byte, error) {
	p, err := askPassphrase(file, what)
	if err != nil || file != "" {
		return p, err
	}
	again, err := askPassphrase("", what+", again")
	if err != nil {
		clear(p)
		return nil, err
	}
	defer clear(again)
	if string(p) != string(again) {
		clear(p)
		return nil, errors.New("the two passphrases differ")
	}
	return p, nil
}

func readBackup(path string) ([]byte, error) {
	f, err := openNamed(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10+1))
	if err != nil {
		return nil, err
	}
	if len(b) > 64<<10 {
		return nil, fmt.Errorf("%s is too large for a key backup", path)
	}
	return b, nil
}

// rotatedKeys returns the principal keys rotated out, oldest first, from
// principal.previous in the first of dirs that has one: the keys that may
// have signed the audit log's older checkpoints. Every key listed counts,
// whether or not its overlap has ended: the checkpoints it signed stay.
func rotatedKeys(dirs ...string) ([]ed25519.PublicKey, error) {
	for _, dir := range dirs {
		prev, err := keystore.Previous(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out := make([]ed25519.PublicKey, 0, len(prev))
		for _, p := range prev {
			k, err := grant.ParsePublicKey(p.Key)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", keystore.PreviousFileName, err)
			}
			out = append(out, ed25519.PublicKey(k))
		}
		return out, nil
	}
	return nil, nil
}
