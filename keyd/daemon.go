package keyd

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/peercred"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/parley-keyd/parley-keyd/policies"
)

// Options assemble a daemon.
type Options struct {
	// Config is the daemon's configuration (LoadConfig or ParseConfig).
	// Its policy file is read by New unless Policy is set.
	Config *Config
	// Policy, when set, is used instead of reading Config's policy file.
	// Reload still reads the file.
	Policy *policies.Policy
	// State is the state folder: the audit log lives there.
	State string
	// Signer holds the principal key. It is the only way the daemon uses
	// the key, so a key service can replace the file key.
	Signer crypto.Signer
	// SignerInfo describes the signer for the start record and for status
	// ("file", or a key service and its key version). Empty means "file".
	SignerInfo string
	// Audit, when set, is used instead of the log in State: tests give a
	// sink that fails. The daemon does not close it.
	Audit AuditSink
	// AuditOptions say how the log in State is opened (journal, witnesses,
	// segments, preallocation). Its Signer is Signer unless set: the log
	// signs its checkpoints with the principal key (docs/audit.md).
	AuditOptions audit.Options
	// Previous are the principal keys rotated out (keystore.Previous):
	// HELLO lists those whose overlap has not ended, for services to trust.
	Previous []protocol.PreviousKey
	// Logf receives operational messages (not audit records). Nil discards.
	Logf func(format string, args ...any)
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Identify returns the peer's identity; nil means peercred.Get. Tests
	// leave it nil: identities come from the kernel.
	Identify func(*net.UnixConn) (peercred.Identity, error)

	// verify checks the principal's signatures (sigcheck.go); nil means
	// ed25519.Verify. Tests hold or fail the check with it.
	verify func(pub ed25519.PublicKey, msg, sig []byte) bool
}

// Daemon is a whole parley-keyd: its configuration and policy, the signer,
// the audit log and the server that answers the socket. New assembles it,
// Listen finds its socket, Run serves until its context ends, and Reload
// rereads the configuration and the policy. Every program that runs a
// daemon (serve, the demo, the tests) goes through these four.
type Daemon struct {
	*Server
	opts Options
	log  *audit.Log // nil when Options.Audit was given

	logMu   sync.Mutex // guards closed
	closed  bool
	closing chan struct{} // closed by closeLog
	once    sync.Once
}

// New loads the policy (unless given), opens the audit log in the state
// folder and returns a daemon ready to Run. It fails when any part is
// missing: there is no allow-all default and no daemon without a log.
func New(o Options) (*Daemon, error) {
	if o.Config == nil || o.Signer == nil {
		return nil, errors.New("keyd: a daemon needs a configuration and a signer")
	}
	if o.SignerInfo == "" {
		o.SignerInfo = "file"
	}
	if o.Policy == nil {
		pol, err := LoadPolicy(o.Config)
		if err != nil {
			return nil, &PolicyError{Path: o.Config.PolicyPath(), Err: err}
		}
		o.Policy = pol
	}
	d := &Daemon{opts: o}
	sink := o.Audit
	if sink == nil {
		if o.State == "" {
			return nil, errors.New("keyd: a daemon needs a state folder for its audit log")
		}
		ao, err := auditOptions(o)
		if err != nil {
			return nil, err
		}
		l, err := ao.Open(filepath.Join(o.State, "audit.log"))
		if err != nil {
			return nil, err
		}
		d.log, sink = l, l
	}
	srv, err := newServer(serverOptions{Config: o.Config, Policy: o.Policy, Signer: o.Signer, Audit: sink,
		Logf: o.Logf, Now: o.Now, Identify: o.Identify, verify: o.verify})
	if err != nil {
		d.closeLog()
		return nil, err
	}
	d.Server = srv
	srv.previous = o.Previous
	srv.loadLock(o.State)
	if d.log != nil {
		srv.loadRemembered(o.State, filepath.Join(o.State, "audit.log"))
	}
	return d, nil
}

// auditOptions are the audit log's options: what the caller set, with the
// configuration's [audit] table on top and the daemon's signer for the
// checkpoints unless the caller gave another.
func auditOptions(o Options) (audit.Options, error) {
	ao := o.AuditOptions
	c, err := o.Config.Audit.Options()
	if err != nil {
		return ao, err
	}
	ao.Witnesses = append(ao.Witnesses, c.Witnesses...)
	if c.CheckpointEvery != 0 {
		ao.CheckpointEvery = c.CheckpointEvery
	}
	if c.CheckpointInterval != 0 {
		ao.CheckpointInterval = c.CheckpointInterval
	}
	if c.SegmentSize != 0 {
		ao.SegmentSize = c.SegmentSize
	}
	if c.SegmentAge != 0 {
		ao.SegmentAge = c.SegmentAge
	}
	if c.Retain != 0 {
		ao.Retain = c.Retain
	}
	// The scrub always runs behind the fast start (DESIGN.md property 11).
	if c.ScrubInterval != 0 {
		ao.ScrubInterval = c.ScrubInterval
	} else if ao.ScrubInterval == 0 {
		ao.ScrubInterval = audit.DefaultScrubInterval
	}
	if c.ScrubRate != 0 {
		ao.ScrubRate = c.ScrubRate
	}
	if ao.Signer == nil {
		ao.Signer = o.Signer
	}
	// Nothing is written before Run: a start that fails (the socket is
	// taken) leaves the log as it was, and a key service that is down
	// delays the open checkpoint instead of the start (Daemon.Run).
	ao.Deferred = true
	return ao, nil
}

// PolicyError is a policy file that cannot be read or does not parse.
type PolicyError struct {
	Path string
	Err  error
}

func (e *PolicyError) Error() string {
	if msg := e.Err.Error(); strings.HasPrefix(msg, e.Path+":") {
		return "policy " + msg // the parser named the file already
	}
	return fmt.Sprintf("policy %s: %v", e.Path, e.Err)
}
func (e *PolicyError) Unwrap() error { return e.Err }

// AuditLog returns the daemon's audit log, or nil when Options.Audit
// replaced it.
func (d *Daemon) AuditLog() *audit.Log { return d.log }

// Listen returns the socket the daemon should serve: the one systemd passed
// by socket activation when there is one, else a new socket at the
// configuration's path. A socket file left by a dead daemon is replaced, but
// only after checking that nothing answers on it; anything else at that path
// is left alone and reported. Either way, a socket in a folder that users
// other than root and the daemon's could write is refused (SocketDirError).
func (d *Daemon) Listen() (net.Listener, error) {
	lns, err := activation.Listeners()
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	for _, ln := range lns {
		if _, ok := ln.(*net.UnixListener); ok {
			if p := ln.Addr().String(); filepath.IsAbs(p) {
				if err := checkSocketDir(p, uint32(os.Getuid())); err != nil {
					ln.Close()
					return nil, err
				}
			}
			return ln, nil
		}
	}
	cfg := d.cfg.Load()
	path := cfg.Socket
	if path == "" {
		return nil, errors.New("the configuration names no socket")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	if err := checkSocketDir(path, uint32(os.Getuid())); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != os.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket; refusing to replace it", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, &InUseError{Path: path}
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("removing the stale socket %s: %w", path, err)
		}
	}
	// Create the socket with no access, then open it up to the configured
	// mode: no window in which it is wider than configured.
	old := syscall.Umask(0o777)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	if err := chownSocketGroup(path, cfg.SocketGroup); err != nil {
		ln.Close()
		return nil, err
	}
	if err := os.Chmod(path, cfg.FileMode()); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// InUseError says that another daemon already answers on the socket.
type InUseError struct{ Path string }

func (e *InUseError) Error() string {
	return fmt.Sprintf("another daemon is already answering on %s", e.Path)
}

// Run writes the start record, serves ln until ctx ends, then answers every
// waiting request, closes every connection (waiting at most 10 s for
// handlers), writes the stop record and closes the audit log. It returns the
// listener's error if serving stopped for another reason.
func (d *Daemon) Run(ctx context.Context, ln net.Listener) error {
	headDone, serr := d.start(ln)
	if serr != nil {
		ln.Close()
		d.closeLog()
		return fmt.Errorf("audit log: %w", serr)
	}
	served := make(chan error, 1)
	go func() { served <- d.Serve(ln) }()
	// The socket listens and the start record is written (or waits for
	// the key service): ready.
	d.sdNotify(daemon.SdNotifyReady + "\n" + d.statusLine(ln.Addr().String()))
	wctx, stopWatchdog := context.WithCancel(context.Background())
	defer stopWatchdog()
	go d.watchdog(wctx)
	var err error
	reason := "stopped"
	select {
	case err = <-served:
		if err != nil {
			reason = "the listener failed: " + err.Error()
		}
	case <-ctx.Done():
		if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
			reason = c.Error()
		}
	}
	d.sdNotify(daemon.SdNotifyStopping + "\nSTATUS=stopping: " + reason)
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if serr := d.Shutdown(sctx); serr != nil && err == nil {
		err = serr
	}
	cancel()
	if d.log != nil {
		// The counts of folded refusals come before the stop record, which
		// is the last of a run.
		if ferr := d.log.FlushFolds(); ferr != nil {
			d.logf("folded records not written: %v", ferr)
		}
	}
	d.closeRemembered()
	if _, aerr := d.audit.Append(audit.Record{Kind: audit.KindStop, Message: reason}); aerr != nil {
		d.logf("stop record not written: %v", aerr)
	}
	// Closing the log writes its stop checkpoint: report the head after it.
	d.closeLog()
	<-headDone
	d.reportHead("stop")
	return err
}

// start writes the start record, with the log's open checkpoint before it
// in the same write, now that the daemon has its socket (issue 21: a start
// that failed later still wrote an open checkpoint). A key service that
// cannot sign it yet does not stop the start: the daemon serves, every
// record and so every grant is refused as unavailable, and the log writes
// both once the signer answers. The head is reported once they are
// written; headDone is closed after that, or when the log closes first.
func (d *Daemon) start(ln net.Listener) (headDone <-chan struct{}, err error) {
	rec := audit.Record{Kind: audit.KindStart,
		Message: fmt.Sprintf("pid %d, socket %s, principal %s, signer %s", os.Getpid(), ln.Addr(), d.principal, d.opts.SignerInfo)}
	done := make(chan struct{})
	if d.log == nil {
		_, err := d.audit.Append(rec)
		close(done)
		return done, err
	}
	err = d.log.Start(rec)
	switch {
	case err == nil:
		d.reportHead("start")
		d.armRemembered()
		close(done)
		return done, nil
	case !errors.Is(err, audit.ErrUnavailable):
		return nil, err
	}
	d.logf("%v; serving, with every grant refused as unavailable until it is written", err)
	go func() {
		defer close(done)
		select {
		case <-d.log.Started():
			d.reportHead("start")
			d.armRemembered()
		case <-d.logClosed():
		}
	}()
	return done, nil
}

// Reload reopens the audit log if it was moved under the daemon, and
// rereads the configuration file the daemon was started with and the
// policy file it names. Property 6: when either does not parse, nothing
// changes. Settings that only take effect at a restart (the socket and the
// phone page) keep their running values, and the log and the audit record
// name the ones that changed. Either outcome goes into the audit log.
func (d *Daemon) Reload() error {
	d.sdNotify(daemon.SdNotifyReloading)
	defer d.sdNotify(daemon.SdNotifyReady)
	// SIGHUP also starts a new audit segment when the log was moved,
	// deleted or truncated under the daemon (docs/audit.md, Rotating);
	// when it was not, Reopen does nothing.
	if d.log != nil {
		if err := d.log.Reopen(); err != nil {
			d.logf("audit log: %v", err)
		}
	}
	old := d.cfg.Load()
	// The same checks as at start, for the same user: a file that others
	// could change since is refused like a file that does not parse.
	cfg, err := LoadConfigFor(old.path, old.uid)
	var pol *policies.Policy
	if err == nil {
		pol, err = LoadPolicy(cfg)
	}
	if err != nil {
		d.logf("reload refused, keeping the current configuration and policy: %v", err)
		d.auditFolded(audit.Record{Kind: audit.KindPolicyReload, Decision: "refused", Message: err.Error()})
		return err
	}
	pending := keepRestartOnly(old, cfg)
	d.swap(cfg, pol)
	msg := cfg.PolicyPath()
	if len(pending) > 0 {
		msg += "; " + restartNote(pending)
	}
	d.logf("reloaded %s and %s", old.path, msg)
	d.auditFolded(audit.Record{Kind: audit.KindPolicyReload, Decision: "loaded", Message: msg})
	return nil
}

func (d *Daemon) closeLog() {
	d.logMu.Lock()
	defer d.logMu.Unlock()
	if !d.closed {
		d.closed = true
		if d.log != nil {
			if err := d.log.Close(); err != nil {
				d.logf("audit log: %v", err)
			}
		}
		close(d.logClosed())
	}
}

// logClosed is closed once closeLog has run.
func (d *Daemon) logClosed() chan struct{} {
	d.once.Do(func() { d.closing = make(chan struct{}) })
	return d.closing
}
