package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/durable"
	"github.com/parley-keyd/parley-keyd/internal/duration"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
	"github.com/parley-keyd/parley-keyd/keyd/keystore"

	"github.com/spf13/cobra"
)

func newAuditCmd() *cobra.Command {
	var state string
	cmd := &cobra.Command{Use: "audit", Short: "Verify or show the audit log"}
	cmd.PersistentFlags().StringVar(&state, "state", defaultState(), "state folder holding audit.log")
	logPath := func(args []string) string {
		if len(args) == 1 {
			return args[0]
		}
		return filepath.Join(state, "audit.log")
	}
	cmd.AddCommand(newAuditVerifyCmd(&state, logPath), newAuditShowCmd(logPath), newAuditAcknowledgeCmd(&state))
	return cmd
}

func newAuditVerifyCmd(state *string, logPath func([]string) string) *cobra.Command {
	var keyArg, afterFile string
	var checkpointFiles []string
	var segment, jsonOut bool
	cmd := &cobra.Command{
		Use:   "verify [FILE]",
		Short: "Check the log: its chain, its signed checkpoints, and checkpoints kept elsewhere",
		Long: `verify reads every segment of the audit log (FILE is its active segment,
STATE/audit.log by default) and checks the hash chain across them, the
signature of every checkpoint against the principal key (--key, else the
principal.pub next to FILE or in --state), that nothing follows the daemon's
stop checkpoint, and each checkpoint kept elsewhere (--checkpoint: a
witness's file, or lines taken from the journal). It names the file and
line of the first problem and its reason, a word that scripts may rely on
(chain, seq, malformed, torn, checkpoint, checkpoint-signature, foreign-key,
foreign-log, after-stop, segment-link, empty, no-checkpoint, truncated,
rollback, rewritten, witness, unreadable; docs/audit.md), and exits 3. With
--json it prints one JSON object instead: "ok", and "reason", "file",
"line", "seq", "detail" for a problem, or the report.

With --segment, or --after, it checks FILE alone: a closed segment, or one
that was moved away, after the checkpoint its first record follows.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := logPath(args)
			o := audit.VerifyOptions{Segment: segment || afterFile != ""}
			// Root reads the files the admin names as root, except those
			// in a folder of another user's (a file witness's, the
			// daemon's): those after dropping to that user, as the log.
			dirs := []string{filepath.Dir(path)}
			if keyArg == "" {
				dirs = append(dirs, *state)
			}
			named := append([]string{afterFile}, checkpointFiles...)
			if !strings.HasPrefix(keyArg, "ed25519:") {
				named = append(named, keyArg)
			}
			for _, f := range named {
				if f != "" && inOthersFolder(f) {
					dirs = append(dirs, filepath.Dir(f))
				}
			}
			read := func(late bool) error {
				var err error
				if keyArg != "" && inOthersFolder(keyArg) == late {
					if o.Key, err = auditKey(keyArg, path, *state); err != nil {
						return err
					}
				}
				for _, f := range checkpointFiles {
					if inOthersFolder(f) != late {
						continue
					}
					cps, err := checkpoint.ReadFile(f)
					if err != nil {
						return &exitError{code: exitAudit, err: fmt.Errorf("checkpoints: %w", err),
							hint: "a checkpoint file holds one JSON checkpoint a line, as a file witness keeps them"}
					}
					o.Checkpoints = append(o.Checkpoints, cps...)
				}
				if afterFile != "" && inOthersFolder(afterFile) == late {
					cp, err := checkpoint.Latest(afterFile)
					if err == nil && cp == nil {
						err = errors.New("no checkpoint in the file")
					}
					if err != nil {
						return &exitError{code: exitAudit, err: fmt.Errorf("--after %s: %w", afterFile, err)}
					}
					o.After = cp
				}
				return nil
			}
			if err := read(false); err != nil {
				return err
			}
			if err := actAsOwnerOf(dirs...); err != nil {
				return err
			}
			if err := read(true); err != nil {
				return err
			}
			if keyArg == "" {
				var err error
				if o.Key, err = auditKey("", path, *state); err != nil {
					return err
				}
				// The keys a rotation left behind signed the checkpoints
				// before the current key's (docs/key-rotation.md).
				if o.Previous, err = rotatedKeys(filepath.Dir(path), *state); err != nil {
					return err
				}
			}
			rep, err := audit.Verify(path, o)
			if jsonOut {
				return printVerifyJSON(cmd.OutOrStdout(), rep, err)
			}
			if err != nil {
				var ae *audit.Error
				switch {
				case errors.As(err, &ae) && errors.Is(err, checkpoint.ErrCheckpoint):
					return &exitError{code: exitAudit, err: err,
						hint: "the log contradicts a signed checkpoint; keep a copy of every file for investigation"}
				case errors.As(err, &ae):
					return &exitError{code: exitAudit, err: err,
						hint: "the log was altered at or just before that line; keep a copy of every file for investigation"}
				case errors.Is(err, checkpoint.ErrCheckpoint):
					return &exitError{code: exitAudit, err: err,
						hint: "the log contradicts a signed checkpoint; keep a copy of every file for investigation"}
				}
				return err
			}
			printReport(rep)
			return nil
		},
	}
	cmd.Flags().StringVar(&keyArg, "key", "", `principal public key ("ed25519:…") or a file holding it (default: principal.pub next to FILE, then in --state)`)
	cmd.Flags().StringArrayVar(&checkpointFiles, "checkpoint", nil, "a file of checkpoints kept elsewhere, one JSON line each (repeatable)")
	cmd.Flags().BoolVar(&segment, "segment", false, "check FILE alone, not the segments around it")
	cmd.Flags().StringVar(&afterFile, "after", "", "with one segment: a file whose last line is the checkpoint its first record follows")
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print the outcome as one JSON object (with the problem's stable reason)")
	return cmd
}

// verifyJSON is what audit verify --json prints.
type verifyJSON struct {
	OK           bool           `json:"ok"`
	Reason       audit.Reason   `json:"reason,omitempty"`
	File         string         `json:"file,omitempty"`
	Line         int            `json:"line,omitempty"`
	Seq          uint64         `json:"seq,omitempty"`
	Detail       string         `json:"detail,omitempty"`
	Error        string         `json:"error,omitempty"`
	First        uint64         `json:"first,omitempty"`
	Head         *audit.Head    `json:"head,omitempty"`
	Files        int            `json:"files,omitempty"`
	Checkpoints  int            `json:"checkpoints,omitempty"`
	Key          string         `json:"key,omitempty"`
	Stopped      bool           `json:"stopped,omitempty"`
	Unsigned     uint64         `json:"unsigned,omitempty"`
	Acknowledged []audit.Damage `json:"acknowledged,omitempty"`
}

func printVerifyJSON(w io.Writer, rep *audit.Report, err error) error {
	var out verifyJSON
	var ae *audit.Error
	switch {
	case err == nil:
		out = verifyJSON{OK: true, First: rep.First, Head: &rep.Head, Files: len(rep.Files), Checkpoints: rep.Checkpoints,
			Key: rep.Key, Stopped: rep.Stopped, Unsigned: rep.Unsigned}
		for _, r := range rep.Acknowledged {
			out.Acknowledged = append(out.Acknowledged, *r.Damage)
		}
	case errors.As(err, &ae):
		out = verifyJSON{Reason: ae.Reason, File: ae.File, Line: ae.Line, Seq: ae.Seq, Detail: ae.Detail, Error: err.Error()}
	default:
		return err // not a verdict on the log: no such log, a bad key
	}
	b, _ := json.Marshal(out)
	fmt.Fprintf(w, "%s\n", b)
	if !out.OK {
		return &exitError{code: exitAudit, err: errors.New("the audit log does not verify")}
	}
	return nil
}

func newAuditAcknowledgeCmd(state *string) *cobra.Command {
	var reason string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "acknowledge --reason TEXT",
		Short: "Resume issuance after the daemon's scrub found damage in the audit log",
		Long: `acknowledge tells the daemon that an admin looked into the damage its scrub
found in the audit log (STATE/audit.damage; parley-keyd status and audit
verify name it) and that issuance may resume. The daemon then starts a new
segment whose checkpoint is followed by a record of kind "acknowledged"
naming the damage, you and the reason, and signs it; from then on the scrub
and audit verify go on past that damage. Keep a copy of the damaged files
first: nothing vouches for the records between the damage and this point.

It writes STATE/audit.acknowledge, which a running daemon takes within a
second, and waits for its answer; a daemon that is not running takes it when
it starts. Run it as root or as the daemon's user.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return acknowledge(cmd.OutOrStdout(), filepath.Join(*state, "audit.log"), reason, wait)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why issuance may resume: what was found, what was done (required)")
	cmd.Flags().DurationVar(&wait, "wait", 30*time.Second, "how long to wait for a running daemon's answer")
	cmd.MarkFlagRequired("reason")
	return cmd
}

func acknowledge(w io.Writer, path, reason string, wait time.Duration) error {
	reason = strings.TrimSpace(reason)
	if reason == "" {
		return usageError{errors.New("--reason must say why issuance may resume")}
	}
	d, err := audit.ReadDamage(path)
	if err != nil {
		return withHint(fmt.Errorf("%s: %w", audit.DamagePath(path), err),
			"the daemon treats an unreadable damage file as damage; look at it, and remove it only while the daemon is stopped")
	}
	if d == nil {
		return withHint(fmt.Errorf("nothing to acknowledge: the daemon recorded no damage (%s does not exist)", audit.DamagePath(path)),
			"parley-keyd audit verify checks the log now")
	}
	me := currentUserName()
	by := fmt.Sprintf("%s (uid %d)", me, os.Getuid())
	if su := os.Getenv("SUDO_USER"); su != "" && os.Getuid() == 0 {
		by += " via sudo by " + su
	}
	b, _ := json.Marshal(audit.Acknowledgement{Damage: *d, Reason: reason, By: by, Time: time.Now().UTC().Format(time.RFC3339)})
	// Root writes it for the daemon's user, who must read and remove it.
	owner := -1
	if fi, err := os.Stat(filepath.Dir(path)); err == nil && os.Geteuid() == 0 {
		uid, _ := ownerOf(fi)
		owner = int(uid)
	}
	os.Remove(audit.AcknowledgeResultPath(path))
	if err := durable.ReplaceFile(audit.AcknowledgePath(path), append(b, '\n'), 0o600, func(tmp string) {
		if owner >= 0 {
			os.Chown(tmp, owner, -1)
		}
	}); err != nil {
		return err
	}
	if !logInUse(path) {
		fmt.Fprintf(w, "acknowledgement of %s written to %s; no daemon has the log open, so it takes it when it starts next\n", d, audit.AcknowledgePath(path))
		return nil
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(audit.AcknowledgeResultPath(path))
		if err == nil {
			var res audit.AcknowledgeResult
			if err := json.Unmarshal(b, &res); err != nil {
				return fmt.Errorf("the daemon's answer %s: %w", audit.AcknowledgeResultPath(path), err)
			}
			if !res.OK {
				return withHint(fmt.Errorf("the daemon refused the acknowledgement: %s", res.Error), "see parley-keyd status for the damage it holds now")
			}
			fmt.Fprintf(w, "acknowledged %s in record %d; issuance resumes\n", d, res.Seq)
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return withHint(fmt.Errorf("the daemon did not answer the acknowledgement within %s", wait),
		"it stays in "+audit.AcknowledgePath(path)+" for the daemon to take; check journalctl -u parley-keyd")
}

// logInUse reports whether a daemon holds the audit log at path (its lock).
func logInUse(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// auditKey finds the key checkpoints must be signed with.
func auditKey(arg, path, state string) (ed25519.PublicKey, error) {
	if arg != "" {
		if strings.HasPrefix(arg, "ed25519:") {
			return checkpoint.ParseKey(arg)
		}
		b, err := os.ReadFile(arg)
		if err != nil {
			return nil, fmt.Errorf("--key: %w", err)
		}
		return checkpoint.ParseKey(string(b))
	}
	for _, dir := range []string{filepath.Dir(path), state} {
		pub, err := keystore.PublicKey(dir)
		if err == nil {
			return pub, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	return nil, withHint(errors.New("no principal key to check the log's checkpoints against"),
		"pass --key ed25519:… or --key FILE, or --state with the daemon's state folder")
}

func printReport(rep *audit.Report) {
	files := "1 file"
	if len(rep.Files) != 1 {
		files = fmt.Sprintf("%d files", len(rep.Files))
	}
	fmt.Printf("ok: %d records, chain head %s\n", rep.Head.Seq, rep.Head.Hash)
	fmt.Printf("records %d–%d in %s, %d checkpoints signed by %s\n", rep.First, rep.Head.Seq, files, rep.Checkpoints, rep.Key)
	if rep.First > 1 {
		fmt.Printf("records before %d are in segments removed by retention\n", rep.First)
	}
	cp := rep.LastCheckpoint
	switch {
	case rep.Stopped:
		fmt.Printf("ends with the daemon's stop checkpoint of %s\n", cp.Time)
	case rep.Unsigned == 0:
		fmt.Printf("last checkpoint: record %d (%s, %s), nothing after it\n", cp.Seq, cp.Reason, cp.Time)
	default:
		fmt.Printf("last checkpoint: record %d (%s, %s); %d records after it are covered by no checkpoint yet (the daemon is running, or stopped without its stop checkpoint)\n",
			cp.Seq, cp.Reason, cp.Time, rep.Unsigned)
	}
	if n := len(rep.Matched) + len(rep.Older); n > 0 {
		fmt.Printf("checkpoints kept elsewhere: %d match", len(rep.Matched))
		if len(rep.Older) > 0 {
			fmt.Printf(", %d are of records before the first one read (not checked)", len(rep.Older))
		}
		fmt.Println()
	}
}

func newAuditShowCmd(logPath func([]string) string) *cobra.Command {
	var since, until, grantID string
	var from uint64
	var jsonOut, follow bool
	cmd := &cobra.Command{
		Use:   "show [FILE]",
		Short: "Print the audit records, for people or as JSON",
		Long: `show prints the records of every segment of the audit log, one a line:
seq, time, kind, then name=value fields (a value with a space or a quote is
quoted, control and invisible characters are escaped) and the message after
"--". With --json it prints each record as it is stored, so that hashes can
be checked from the output. --since and --until take an RFC 3339 time, a
date, or a duration meaning that long ago; --follow keeps printing records as
the daemon writes them, across new segments, until interrupted.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o := audit.ShowOptions{JSON: jsonOut, Follow: follow}
			o.GrantID, o.FromSeq = grantID, from
			var err error
			now := time.Now()
			if o.Since, err = parseWhen(since, now); err != nil {
				return usageError{fmt.Errorf("--since: %w", err)}
			}
			if o.Until, err = parseWhen(until, now); err != nil {
				return usageError{fmt.Errorf("--until: %w", err)}
			}
			if err := actAsOwnerOf(filepath.Dir(logPath(args))); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return audit.ShowLog(ctx, logPath(args), os.Stdout, o)
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print each record as stored (one JSON object a line)")
	cmd.Flags().StringVar(&since, "since", "", "only records at or after this time (RFC 3339, 2006-01-02, or a duration ago such as 2h or 1d)")
	cmd.Flags().StringVar(&until, "until", "", "only records at or before this time")
	cmd.Flags().StringVar(&grantID, "grant", "", "only the records of this grant id")
	cmd.Flags().Uint64Var(&from, "from", 0, "only records from this seq on")
	cmd.Flags().BoolVar(&follow, "follow", false, "keep printing new records until interrupted")
	return cmd
}

// parseWhen reads a time for --since and --until.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	if d, err := duration.Parse(s); err == nil {
		return now.Add(-d), nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Unix(n, 0), nil
	}
	return time.Time{}, fmt.Errorf("%q is not a time (RFC 3339, 2006-01-02, unix seconds) or a duration", s)
}
