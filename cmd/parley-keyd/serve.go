package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/internal/filetrust"
	"github.com/parley-keyd/parley-keyd/internal/journal"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/keystore"

	"github.com/parley-keyd/parley-keyd/keyd"
	"github.com/spf13/cobra"
)

func newServeCmd() *cobra.Command {
	var state, config, socket, passFile string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the daemon",
		Long: `serve loads the configuration, the policy and the principal key, and answers
agents and approvers on the Unix socket. It accepts a socket passed by systemd
socket activation. SIGHUP reloads the configuration and the policy (an invalid
file leaves the old one in force); SIGTERM answers waiting requests and exits.
SIGABRT (systemd's watchdog) writes every goroutine's stack to
STATE/watchdog.dump, one line to the journal, and exits 1 at once.

Exit statuses, stable, as for every parley-keyd command:

  0  stopped by SIGTERM or SIGINT, waiting requests answered
  1  failure: the key, the state folder, the audit log or the socket
     cannot be used (the message says which), another daemon runs on
     the state folder, or the configuration file is missing or
     unreadable; also after SIGABRT
  2  usage: an unknown flag, an argument
  4  the policy file is invalid: the daemon does not start
  5  the configuration file is invalid: the daemon does not start

2, 4 and 5 need an admin's fix: restarting does not help, and the shipped
unit does not (RestartPreventExitStatus=2 4 5). It restarts the others, at
most 5 times a minute.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return serve(state, config, socket, passFile)
		},
	}
	cmd.Flags().StringVar(&state, "state", defaultState(), "state folder (key, audit log); $PARLEY_KEYD_STATE")
	cmd.Flags().StringVar(&config, "config", defaultConfig(), "configuration file; $PARLEY_KEYD_CONFIG_DIR/config.toml")
	cmd.Flags().StringVar(&socket, "socket", "", "socket path, overriding the configuration")
	cmd.Flags().StringVar(&passFile, "passphrase-file", os.Getenv("PARLEY_KEYD_PASSPHRASE_FILE"), "file holding the key's passphrase (else asked on the terminal)")
	return cmd
}

func serve(state, configPath, socketFlag, passFile string) error {
	// Attack: any agent can make the daemon log a line (by closing its
	// connection mid-frame). Were SIGPIPE not ignored, a log line written
	// after whoever reads stderr went away would kill the daemon on the
	// spot, without its stop record. Ignored, the write fails and the
	// daemon serves on.
	signal.Ignore(syscall.SIGPIPE)
	// Every line the daemon writes goes through one logger: to the journal
	// with priorities and fields when there is one, else to stderr, with
	// flood control that folds repeats into counted lines (issue 10: one
	// agent made the daemon print 9 500–17 000 lines a second).
	jl := journal.New(journal.Options{Identifier: "parley-keyd"})
	defer jl.Close()
	logger := log.New(journalWriter{jl}, "", 0)
	onAbort(state, jl.Journal())
	// First of all: no core dumps, no ptrace or /proc/PID/mem by our own uid.
	rep, err := keyd.Harden()
	if err != nil {
		return fmt.Errorf("hardening the process: %w", err)
	}
	logger.Printf("%s", rep)
	stopProfile, err := startProfile()
	if err != nil {
		return err
	}
	defer stopProfile()

	cfg, err := loadConfig(configPath, state)
	if err != nil {
		return err
	}
	if socketFlag != "" {
		cfg.Socket = socketFlag
	}
	if cfg.Socket == "" {
		cfg.Socket = protocol.DefaultSocket
	}
	// The state folder too: a folder above it that others may write lets
	// them swap the whole folder, key and log; and the daemon's own
	// program (property 12).
	if err := filetrust.Check(state, uint32(os.Geteuid())); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return withHint(fmt.Errorf("state folder: %w", err), trustHint(err))
	}
	if exe, err := os.Executable(); err == nil {
		if err := filetrust.Check(exe, uint32(os.Geteuid())); err != nil {
			return withHint(fmt.Errorf("the daemon's program: %w", err), trustHint(err))
		}
	}
	signer, err := openSigner(cfg, state, passFile, logger)
	if err != nil {
		return err
	}
	defer signer.Close()

	previous, err := previousKeys(state)
	if err != nil {
		return err
	}
	// The audit log's checkpoints before a rotation are the old keys'.
	rotated, err := rotatedKeys(state)
	if err != nil {
		return err
	}
	// The audit log writes every record and checkpoint to the journal and
	// preallocates 64 KiB at a time ahead (docs/audit.md; each chunk costs
	// an fsync, which under load was the write's largest cost after the
	// commit's own fdatasync: docs/performance.md); it signs its checkpoints
	// with the signer. Witnesses, segments and retention are the
	// configuration's to add.
	d, err := keyd.New(keyd.Options{Config: cfg, State: state, Signer: signer, SignerInfo: signer.Describe().String(), Previous: previous, Logf: jl.Printf,
		AuditOptions: audit.Options{Journal: jl, Preallocate: 64 << 10, Previous: rotated}})
	var pe *keyd.PolicyError
	switch {
	case errors.As(err, &pe):
		return &exitError{code: exitPolicy, err: err, hint: policyHint(pe, configPath, state)}
	case errors.Is(err, audit.ErrInUse):
		return withHint(err, "another parley-keyd already runs on "+state+"; stop it first")
	case err != nil:
		return withHint(fmt.Errorf("audit log: %w", err), "check it with: parley-keyd audit verify --state "+state)
	}
	// The chain head goes to the journal and to STATE/audit.head at start
	// and stop (Daemon.Run): a record cut from the end of the log is found
	// by comparing with it (docs/audit.md, parley-keyd status).
	ln, err := d.Listen()
	var inUse *keyd.InUseError
	var sg *keyd.SocketGroupError
	var dirErr *keyd.SocketDirError
	switch {
	case errors.As(err, &inUse):
		return withHint(err, "stop it first, or use another --socket")
	case errors.As(err, &dirErr):
		return withHint(err, dirErr.Fix())
	case errors.As(err, &sg):
		return withHint(err, fmt.Sprintf("the daemon's %s must be a member of that group (sudo usermod -aG %s %s), or an admin changes socket_group in %s", whoAmI(), sg.Group, currentUserName(), configPath))
	case errors.Is(err, fs.ErrPermission):
		if h := socketFolderHint(cfg.Socket); h != "" {
			return withHint(err, h)
		}
	}
	if err != nil {
		return err
	}
	logger.Printf("listening on %s; principal %s; signer %s", ln.Addr(), d.Principal(), signer.Describe())
	// Connection slots are only worth what the open-file limit allows: past
	// it, accept fails for approvers and agents alike.
	var nofile syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err == nil && nofile.Cur < uint64(cfg.MaxConnections)+256 {
		logger.Printf("warning: the open-file limit (%d) is below max_connections (%d) + 256: when agents hold many connections, approvers may be refused; raise LimitNOFILE= or lower max_connections",
			nofile.Cur, cfg.MaxConnections)
	}
	stopPhone, err := startPhone(d.Server, cfg, state, jl.Printf)
	if err != nil {
		ln.Close()
		return fmt.Errorf("phone page: %w", err)
	}
	defer stopPhone()

	ctx, stop := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		for sig := range sigs {
			if sig == syscall.SIGHUP {
				d.Reload()
				continue
			}
			logger.Printf("%v: answering waiting requests and stopping", sig)
			stop(errors.New(sig.String()))
			return
		}
	}()
	return d.Run(ctx, ln)
}

// journalWriter writes each line a log.Logger makes as one entry of the
// journal logger, so that the few places that take a *log.Logger share its
// flood control.
type journalWriter struct{ l *journal.Logger }

func (w journalWriter) Write(p []byte) (int, error) {
	w.l.Send(journal.Entry{Priority: journal.Info, Message: strings.TrimSuffix(string(p), "\n")})
	return len(p), nil
}

// previousKeys reads the keys rotated out, for HELLO to publish. A damaged
// list stops the start: services would be told less than they must trust.
func previousKeys(state string) ([]protocol.PreviousKey, error) {
	prev, err := keystore.Previous(state)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, withHint(err, "the file lists the keys rotated out as \"ed25519:… until TIME\" lines (docs/key-rotation.md)")
	}
	out := make([]protocol.PreviousKey, len(prev))
	for i, p := range prev {
		out[i] = protocol.PreviousKey{Key: p.Key, Until: p.Until.Unix()}
	}
	return out, nil
}
