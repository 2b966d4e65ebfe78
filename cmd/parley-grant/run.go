package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/duration"
	"github.com/parley-keyd/parley-keyd/internal/filetrust"
	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// GrantFileEnv names, in the environment of the command parley-grant run
// starts, the file that holds its current token.
const GrantFileEnv = "PARLEY_GRANT_FILE"

// Timing of parley-grant run's renewals. A grant is renewed once
// renewAt of its life has passed; a renewal that fails for a reason that
// may pass (no daemon, a rate limit) is tried again after retryFirst,
// doubling up to retryMax; the daemon has answerTimeout to answer a
// renewal, or to say that a human must decide, before it is tried again.
var (
	renewAt       = 2.0 / 3.0
	retryFirst    = time.Second
	retryMax      = 30 * time.Second
	answerTimeout = 30 * time.Second
)

func newRunCmd() *cobra.Command {
	var cf caveatFlags
	var keyPath string
	cmd := &cobra.Command{
		Use:   "run [caveat flags] --exp DURATION -- CMD [ARGS...]",
		Short: "Run a command with a grant that is kept fresh in a file",
		Long: `run asks the daemon for a grant as issue does, writes its token to a private
file, and starts CMD with the file's path in $` + GrantFileEnv + `. Before the
grant expires (at two thirds of its life) run asks for a new one and replaces
the file's content in one step: CMD reads the file each time it needs the
token, and always finds one whole token.

Each grant asks for --exp (a duration); under a remembered approval the daemon
issues it at once and may shorten it. A renewal that needs a human says so on
stderr with its match code. Renewing stops when the daemon refuses (the
remembered approval ended, a denial, a lock) or CMD exits; a daemon that cannot
be reached is tried again, with a pause that grows to 30 s.

Signals sent to run are passed on to CMD (SIGINT and SIGQUIT only when run is
not in the terminal's foreground, where the terminal sends them to CMD itself).
run exits with CMD's exit status, 128+N when CMD died by signal N, once CMD
has ended; the file and its folder are removed then. Before CMD starts, run
exits with parley-grant's own codes.

Example:
  parley-grant run --can 'mail.read' --exp 10m -- mail-sync --token-file-env ` + GrantFileEnv,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("put the command after --, as in: parley-grant run --can 'mail.*' --exp 10m -- mail-sync", "no command to run")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if cf.exp == "" {
				return usagef("give each grant's life with --exp, such as --exp 10m", "--exp is required: run renews the grant before each one expires")
			}
			if _, err := duration.Parse(cf.exp); err != nil {
				return usagef("give each grant's life as a duration, such as --exp 10m; run asks for a new grant before each one ends",
					"--exp %q is not a duration: %v", cf.exp, err)
			}
			key, err := loadAgentKey(keyPath)
			if err != nil {
				return err
			}
			if _, err := cf.caveats(time.Now()); err != nil {
				return usage(err, "run parley-grant run --help for the caveat flags")
			}
			return runWithGrant(&cf, key, args)
		},
	}
	cf.register(cmd, false)
	cmd.Flags().StringVar(&keyPath, "key", "", "agent key file (default $PARLEY_AGENT_KEY or ~/.config/parley/agent.key)")
	cmd.Flags().SetInterspersed(false)
	return cmd
}

// grantFile is the private folder and file that hold run's current token.
type grantFile struct {
	dir, path string
}

// newGrantFile makes a private folder (0700) for the token in the user's
// runtime folder, else the temporary folder, after checking that nobody
// but root and this user can change the folder it is made in.
func newGrantFile() (*grantFile, error) {
	uid := uint32(os.Getuid())
	base := os.Getenv("XDG_RUNTIME_DIR")
	if base == "" || filetrust.Check(base, uid) != nil {
		base = os.TempDir()
	}
	if err := filetrust.Check(base, uid); err != nil {
		var ue *filetrust.UnsafeError
		hint := "set TMPDIR to a folder only you can write to, such as $HOME/.cache"
		if errors.As(err, &ue) && ue.Fix != "" {
			hint = ue.Fix + "; or " + hint
		}
		return nil, fail(fmt.Errorf("refusing to keep the token under %s: %w", base, err), hint)
	}
	dir, err := os.MkdirTemp(base, "parley-grant-run-")
	if err != nil {
		return nil, fail(fmt.Errorf("making the token's folder: %w", err), "")
	}
	g := &grantFile{dir: dir, path: filepath.Join(dir, "token")}
	if err := os.Chmod(dir, 0o700); err != nil {
		g.remove()
		return nil, fail(fmt.Errorf("making the token's folder private: %w", err), "")
	}
	if err := g.checkDir(); err != nil {
		g.remove()
		return nil, err
	}
	return g, nil
}

// checkDir checks that the folder is still this user's own private folder,
// not a link or a folder anyone else could write to.
func (g *grantFile) checkDir() error {
	fi, err := os.Lstat(g.dir)
	if err != nil {
		return fail(fmt.Errorf("the token's folder: %w", err), "")
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || fi.Mode().Perm() != 0o700 || !ok || st.Uid != uint32(os.Getuid()) {
		return fail(fmt.Errorf("the token's folder %s is no longer a private folder of yours (%s)", g.dir, fi.Mode()),
			"something changed it while run used it: look at what else runs as you")
	}
	return nil
}

// write replaces the file's content with token in one step: the token goes
// to a new file of a random name, created exclusively (so never through a
// link) with mode 0600, is synced, and is renamed over the file. A reader
// finds the old token or the new one, never part of either.
func (g *grantFile) write(token string) error {
	if err := g.checkDir(); err != nil {
		return err
	}
	f, err := os.CreateTemp(g.dir, ".token-*")
	if err != nil {
		return fmt.Errorf("writing the token: %w", err)
	}
	tmp := f.Name()
	_, err = f.WriteString(token + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, g.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing the token: %w", err)
	}
	if d, err := os.Open(g.dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

func (g *grantFile) remove() { os.RemoveAll(g.dir) }

// runWithGrant gets the first grant, starts CMD with the token's file, keeps
// the token fresh until the daemon refuses or CMD exits, and returns CMD's
// exit status as an *exitError.
func runWithGrant(cf *caveatFlags, key ed25519.PrivateKey, args []string) error {
	path, err := exec.LookPath(args[0])
	if err != nil {
		return fail(fmt.Errorf("cannot run %s: %w", args[0], err), "name the command by its path, or put it on PATH")
	}
	gf, err := newGrantFile()
	if err != nil {
		return err
	}
	defer gf.remove()
	r := &renewer{cf: cf, key: key, file: gf}

	// The first grant, before CMD starts: its failures are parley-grant's,
	// and SIGINT or SIGTERM withdraws its request.
	ctx, stop := interruptible()
	res, err := r.ask(ctx, false)
	stop()
	if errors.Is(err, errNoAnswerInTime) {
		return &exitError{code: exitNoDaemon, err: err, hint: notStartingHint}
	}
	if err != nil {
		return daemonError(err)
	}
	if err := gf.write(res.Token); err != nil {
		return fail(err, "")
	}
	infof("issued grant %s, expires %s; the token is in $%s for %s", res.GrantID, clock(res.Expires), GrantFileEnv, args[0])

	cmd := exec.Command(path, args[1:]...)
	cmd.Args[0] = args[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(withoutEnv(os.Environ(), GrantFileEnv), GrantFileEnv+"="+gf.path)
	// Should run itself be killed, CMD is told (SIGTERM) rather than left
	// running on a token nobody renews.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return fail(fmt.Errorf("cannot run %s: %w", args[0], err), "")
	}

	renewCtx, cancelRenew := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.keepFresh(renewCtx, res)
	}()
	exited := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				if sig, ok := s.(syscall.Signal); ok && forward(sig) {
					cmd.Process.Signal(sig)
				}
			case <-exited:
				return
			}
		}
	}()
	werr := cmd.Wait()
	close(exited)
	cancelRenew()
	wg.Wait()
	return exitStatus(cmd.ProcessState, werr)
}

// forwarded are the signals run passes on to CMD.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

// forward reports whether sig goes on to CMD. The terminal sends SIGINT
// and SIGQUIT (Ctrl-C, Ctrl-\) to its whole foreground process group, CMD
// with it: when run is in that group, CMD has had it already.
func forward(sig syscall.Signal) bool {
	if sig != syscall.SIGINT && sig != syscall.SIGQUIT {
		return true
	}
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return true
	}
	defer tty.Close()
	fg, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCGPGRP)
	return err != nil || fg != syscall.Getpgrp()
}

// exitStatus turns CMD's end into run's: nil for 0, else a quiet exitError
// with CMD's code, 128+N for a death by signal N.
func exitStatus(ps *os.ProcessState, werr error) error {
	if ps == nil {
		return fail(fmt.Errorf("waiting for the command: %w", werr), "")
	}
	code := ps.ExitCode()
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	if code == 0 {
		return nil
	}
	return &exitError{code: code, err: fmt.Errorf("the command exited with %d", code), quiet: true}
}

// withoutEnv returns env without any setting of name: CMD finds only the
// file run made, never one planted in run's own environment.
func withoutEnv(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// renewer asks the daemon for run's grants.
type renewer struct {
	cf   *caveatFlags
	key  ed25519.PrivateKey
	file *grantFile
	// current is the expiry of the token in the file.
	current int64
}

// ask asks the daemon for one grant on a new connection, so that a daemon
// that restarted is found again. A request that waits for a human is said
// on stderr; renewal says that the file keeps the old token meanwhile. The
// daemon has answerTimeout to answer or to say that a human decides, and
// then until the request's approval timeout.
func (r *renewer) ask(ctx context.Context, renewal bool) (*protocol.GrantResult, error) {
	c, err := dialDaemon()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	late := false
	deadline := time.AfterFunc(answerTimeout, func() {
		mu.Lock()
		late = true
		mu.Unlock()
		cancel()
	})
	defer deadline.Stop()
	if _, err := c.Principal(ctx); err != nil {
		return nil, answerErr(err, &mu, &late)
	}
	cavs, err := r.cf.caveats(time.Now())
	if err != nil {
		return nil, usage(err, "run parley-grant run --help for the caveat flags")
	}
	wt := newCountdown()
	res, err := c.Grant(ctx, r.key, cavs, func(e protocol.Event) {
		// A human decides: the daemon's approval timeout bounds the wait.
		deadline.Reset(time.Until(time.Unix(e.Expires, 0)) + answerTimeout)
		if !renewal {
			wt.show(e)
			return
		}
		infof("renewing the grant waits for a human: approve %s with match code %s on %s by %s; until then $%s keeps the token that expires %s",
			e.Request, e.Code, channelWords(e.Channels), clock(e.Expires), GrantFileEnv, clock(r.current))
	})
	if !renewal {
		wt.done()
	}
	if err != nil {
		return nil, answerErr(err, &mu, &late)
	}
	return res, nil
}

// errNoAnswerInTime is a renewal the daemon did not answer within
// answerTimeout (or the approval timeout it announced).
var errNoAnswerInTime = errors.New("parley-keyd did not answer in time")

// answerErr is err, or errNoAnswerInTime when the answer deadline ended the
// request. The daemon's refusals stay *protocol.Error, for permanent.
func answerErr(err error, mu *sync.Mutex, late *bool) error {
	mu.Lock()
	l := *late
	mu.Unlock()
	if l && errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w (within %s)", errNoAnswerInTime, duration.Format(answerTimeout))
	}
	return err
}

// keepFresh renews the grant at renewAt of each one's life until ctx ends
// (CMD exited) or the daemon refuses.
func (r *renewer) keepFresh(ctx context.Context, res *protocol.GrantResult) {
	issued := time.Now()
	r.current = res.Expires
	for {
		life := time.Unix(res.Expires, 0).Sub(issued)
		// At least a second: a grant that came already (nearly) expired
		// must not turn renewal into a busy loop against the daemon.
		if !sleepCtx(ctx, max(time.Duration(float64(life)*renewAt), time.Second)) {
			return
		}
		wait := retryFirst
		for {
			start := time.Now()
			next, err := r.ask(ctx, true)
			if ctx.Err() != nil {
				return
			}
			if err == nil {
				if err := r.file.write(next.Token); err != nil {
					warnf("renewing stopped: %v; $%s keeps the token that expires %s", err, GrantFileEnv, clock(r.current))
					return
				}
				res, issued, r.current = next, start, next.Expires
				break
			}
			if permanent(err) {
				ee := asExitError(daemonError(err))
				msg := fmt.Sprintf("renewing stopped: the daemon refused: %s; $%s keeps the token that expires %s", oneLine(ee.Error()), GrantFileEnv, clock(r.current))
				if ee.hint != "" {
					msg += " (hint: " + oneLine(ee.hint) + ")"
				}
				infof("%s", msg)
				return
			}
			pause := wait
			var pe *protocol.Error
			if errors.As(err, &pe) && pe.Code == protocol.CodeLimit && pe.Retry > 0 {
				pause = time.Duration(pe.Retry) * time.Second
			}
			left := "expired"
			if time.Now().Unix() < r.current {
				left = "expires " + clock(r.current)
			}
			infof("renewing the grant failed: %s; trying again in %s; $%s holds the token that %s",
				oneLine(err.Error()), duration.Format(pause), GrantFileEnv, left)
			if !sleepCtx(ctx, pause) {
				return
			}
			wait = min(wait*2, retryMax)
		}
	}
}

// permanent reports whether a renewal failed for good: the daemon refused
// it (denied, forbidden, timed out, locked, ...), or the socket is served
// by someone else. A daemon that is down, busy or rate limiting is tried
// again.
func permanent(err error) bool {
	if errors.Is(err, client.ErrWrongServer) {
		return true
	}
	var ee *exitError
	if errors.As(err, &ee) && ee.code == exitUsage {
		return true
	}
	var pe *protocol.Error
	if errors.As(err, &pe) {
		switch pe.Code {
		case protocol.CodeLimit, protocol.CodeUnavailable, protocol.CodeInternal:
			return false
		}
		return true
	}
	return false
}

// sleepCtx waits d, or until ctx ends (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// clock is a unix time as the time of day it is, in UTC.
func clock(unix int64) string { return time.Unix(unix, 0).UTC().Format("15:04:05Z") }
