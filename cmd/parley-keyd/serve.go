package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/internal/journal"
	"github.com/parley-keyd/parley-keyd/keyd/audit"

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
file leaves the old one in force); SIGTERM answers waiting requests and exits.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if config == "" {
				config = filepath.Join(state, "config.toml")
			}
			return serve(state, config, socket, passFile)
		},
	}
	cmd.Flags().StringVar(&state, "state", defaultState(), "state folder (key, audit log)")
	cmd.Flags().StringVar(&config, "config", "", "configuration file (default STATE/config.toml)")
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
	logger := log.New(os.Stderr, "parley-keyd: ", 0)
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

	cfg, err := keyd.LoadConfig(configPath)
	if err != nil {
		return withHint(fmt.Errorf("configuration: %w", err), "create one with: parley-keyd init --state "+state)
	}
	if socketFlag != "" {
		cfg.Socket = socketFlag
	}
	if cfg.Socket == "" {
		cfg.Socket = protocol.DefaultSocket
	}
	signer, err := openSigner(cfg, state, passFile, logger)
	if err != nil {
		return err
	}
	defer signer.Close()

	// The audit log writes every record and checkpoint to the journal and
	// preallocates 16 KiB ahead (docs/audit.md); it signs its checkpoints
	// with the signer. Witnesses, segments and retention are the
	// configuration's to add.
	jl := journal.New(journal.Options{Identifier: "parley-keyd"})
	defer jl.Close()
	d, err := keyd.New(keyd.Options{Config: cfg, State: state, Signer: signer, SignerInfo: signer.Describe().String(), Logf: logger.Printf,
		AuditOptions: audit.Options{Journal: jl, Preallocate: 16 << 10}})
	var pe *keyd.PolicyError
	switch {
	case errors.As(err, &pe):
		return &exitError{code: exitPolicy, err: err, hint: "check it with: parley-keyd policy check " + pe.Path}
	case errors.Is(err, audit.ErrInUse):
		return withHint(err, "another parley-keyd already runs on "+state+"; stop it first")
	case err != nil:
		return withHint(fmt.Errorf("audit log: %w", err), "check it with: parley-keyd audit verify --state "+state)
	}
	// The chain head goes to the journal at start and stop: a record cut from
	// the end of the log is found by comparing with it (docs/audit.md).
	alog := d.AuditLog()
	head := alog.Head()
	logger.Printf("audit log %s: %d records, head %s", alog.Path(), head.Seq, head.Hash)
	defer func() {
		head := alog.Head()
		logger.Printf("audit log at stop: %d records, head %s", head.Seq, head.Hash)
	}()

	ln, err := d.Listen()
	var inUse *keyd.InUseError
	var dirErr *keyd.SocketDirError
	switch {
	case errors.As(err, &inUse):
		return withHint(err, "stop it first, or use another --socket")
	case errors.As(err, &dirErr):
		return withHint(err, dirErr.Fix())
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
	stopPhone, err := startPhone(d.Server, cfg, state, logger.Printf)
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
