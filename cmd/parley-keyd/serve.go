package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/keystore"

	"github.com/parley-keyd/parley-keyd/internal/journal"
	"github.com/parley-keyd/parley-keyd/keyd/audit"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/parley-keyd/parley-keyd/keyd"
	"github.com/parley-keyd/parley-keyd/policies"
	"github.com/spf13/cobra"
	"golang.org/x/term"
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

func loadPolicy(cfg *keyd.Config) (*policies.Policy, error) {
	data, err := os.ReadFile(cfg.PolicyPath())
	if err != nil {
		return nil, err
	}
	return policies.Parse(data, cfg.PolicyPath())
}

func serve(state, configPath, socketFlag, passFile string) error {
	logger := log.New(os.Stderr, "parley-keyd: ", 0)
	// First of all: no core dumps, no ptrace or /proc/PID/mem by our own uid.
	rep, err := keyd.Harden()
	if err != nil {
		return fmt.Errorf("hardening the process: %w", err)
	}
	logger.Printf("%s", rep)

	cfg, err := keyd.LoadConfig(configPath)
	if err != nil {
		return withHint(fmt.Errorf("configuration: %w", err), "create one with: parley-keyd init --state "+state)
	}
	if socketFlag != "" {
		cfg.Socket = socketFlag
	}
	if cfg.Socket == "" {
		cfg.Socket = keyd.DefaultSocket
	}
	pol, err := loadPolicy(cfg)
	if err != nil {
		return &exitError{code: exitPolicy, err: fmt.Errorf("policy: %w", err), hint: "check it with: parley-keyd policy check " + cfg.PolicyPath()}
	}
	signer, err := keystore.Load(state, func() ([]byte, error) {
		if passFile != "" {
			return readPassphraseFile(passFile)
		}
		if !term.IsTerminal(int(os.Stdin.Fd())) {
			return nil, errors.New("the key is encrypted: pass --passphrase-file or run on a terminal")
		}
		fmt.Fprint(os.Stderr, "parley-keyd: passphrase for the principal key: ")
		p, err := term.ReadPassword(int(os.Stdin.Fd()))
		fmt.Fprintln(os.Stderr)
		return p, err
	})
	if err != nil {
		return err
	}
	defer signer.Close()
	if err := signer.MlockError(); err != nil {
		logger.Printf("warning: could not lock the key in memory (it may reach swap): %v", err)
	}

	// The audit log signs its checkpoints with the principal key, through
	// the same signer as grants (docs/audit.md says why), and writes every
	// record and checkpoint to the journal. Witnesses and the segment and
	// retention settings are the configuration's to add.
	jl := journal.New(journal.Options{Identifier: "parley-keyd"})
	defer jl.Close()
	alog, err := audit.Options{Signer: signer, Journal: jl, Preallocate: 16 << 10}.Open(filepath.Join(state, "audit.log"))
	if errors.Is(err, audit.ErrInUse) {
		return withHint(err, "another parley-keyd already runs on "+state+"; stop it first")
	}
	if err != nil {
		return withHint(fmt.Errorf("audit log: %w", err), "check it with: parley-keyd audit verify --state "+state)
	}
	defer alog.Close()
	// The chain head goes to the journal at start and stop: a record cut from
	// the end of the log is found by comparing with it (docs/audit.md).
	head := alog.Head()
	logger.Printf("audit log %s: %d records, head %s", alog.Path(), head.Seq, head.Hash)
	defer func() {
		head := alog.Head()
		logger.Printf("audit log at stop: %d records, head %s", head.Seq, head.Hash)
	}()

	srv, err := keyd.NewServer(keyd.Options{Config: cfg, Policy: pol, Signer: signer, Audit: alog, Logf: logger.Printf})
	if err != nil {
		return err
	}
	ln, err := listen(cfg)
	if err != nil {
		return err
	}
	if _, err := alog.Append(audit.Record{Kind: "start", Message: fmt.Sprintf("pid %d, socket %s, principal %s", os.Getpid(), ln.Addr(), srv.Principal())}); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	logger.Printf("listening on %s; principal %s", ln.Addr(), srv.Principal())
	stopPhone, err := startPhone(srv, cfg, state, logger.Printf)
	if err != nil {
		ln.Close()
		return fmt.Errorf("phone page: %w", err)
	}
	defer stopPhone()

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	for {
		select {
		case err := <-served:
			return err
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				reload(srv, configPath, socketFlag, alog, logger)
				continue
			}
			logger.Printf("%v: answering waiting requests and stopping", sig)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := srv.Shutdown(ctx)
			cancel()
			alog.Append(audit.Record{Kind: "stop", Message: sig.String()})
			return err
		}
	}
}

// reload reads the configuration and policy again. Property 6: a file that
// does not parse changes nothing; either outcome goes into the audit log.
func reload(srv *keyd.Server, configPath, socketFlag string, alog *audit.Log, logger *log.Logger) {
	cfg, err := keyd.LoadConfig(configPath)
	var pol *policies.Policy
	if err == nil {
		if socketFlag != "" {
			cfg.Socket = socketFlag
		}
		pol, err = loadPolicy(cfg)
	}
	if err != nil {
		logger.Printf("reload refused, keeping the current configuration and policy: %v", err)
		alog.Append(audit.Record{Kind: "policy-reload", Decision: "refused", Message: err.Error()})
		return
	}
	srv.Reload(cfg, pol)
	logger.Printf("reloaded %s and %s", configPath, cfg.PolicyPath())
	// SIGHUP also starts a new audit segment when the log was moved,
	// deleted or truncated under the daemon (docs/audit.md, rotation).
	if err := alog.Reopen(); err != nil {
		logger.Printf("audit log: reopen: %v", err)
	}
	alog.Append(audit.Record{Kind: "policy-reload", Decision: "loaded", Message: cfg.PolicyPath()})
}

// listen returns the systemd-activated socket when there is one, else a new
// socket at cfg.Socket. A socket file left by a dead daemon is replaced, but
// only after checking that nothing answers on it.
func listen(cfg *keyd.Config) (net.Listener, error) {
	lns, err := activation.Listeners()
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	for _, ln := range lns {
		if _, ok := ln.(*net.UnixListener); ok {
			return ln, nil
		}
	}
	path := cfg.Socket
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, withHint(fmt.Errorf("another daemon is already answering on %s", path), "stop it first, or use another --socket")
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing the stale socket %s: %w", path, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	// Create the socket with no access, then open it up to the configured
	// mode: no window in which it is wider than configured.
	old := syscall.Umask(0o777)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, cfg.FileMode()); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}
