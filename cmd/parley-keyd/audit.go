package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/audit"
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
	cmd.AddCommand(newAuditVerifyCmd(&state, logPath), newAuditShowCmd(logPath))
	return cmd
}

func newAuditVerifyCmd(state *string, logPath func([]string) string) *cobra.Command {
	var keyArg, afterFile string
	var checkpointFiles []string
	var segment bool
	cmd := &cobra.Command{
		Use:   "verify [FILE]",
		Short: "Check the log: its chain, its signed checkpoints, and checkpoints kept elsewhere",
		Long: `verify reads every segment of the audit log (FILE is its active segment,
STATE/audit.log by default) and checks the hash chain across them, the
signature of every checkpoint against the principal key (--key, else the
principal.pub next to FILE or in --state), that nothing follows the daemon's
stop checkpoint, and each checkpoint kept elsewhere (--checkpoint: a
witness's file, or lines taken from the journal). It names the file and
line of the first problem and exits 3.

With --segment, or --after, it checks FILE alone: a closed segment, or one
that was moved away, after the checkpoint its first record follows.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := logPath(args)
			key, err := auditKey(keyArg, path, *state)
			if err != nil {
				return err
			}
			o := audit.VerifyOptions{Key: key, Segment: segment || afterFile != ""}
			if keyArg == "" {
				// The keys a rotation left behind signed the checkpoints
				// before the current key's (docs/key-rotation.md).
				if o.Previous, err = rotatedKeys(filepath.Dir(path), *state); err != nil {
					return err
				}
			}
			for _, f := range checkpointFiles {
				cps, err := audit.ReadCheckpoints(f)
				if err != nil {
					return &exitError{code: exitAudit, err: fmt.Errorf("checkpoints: %w", err),
						hint: "a checkpoint file holds one JSON checkpoint a line, as a file witness keeps them"}
				}
				o.Checkpoints = append(o.Checkpoints, cps...)
			}
			if afterFile != "" {
				cp, err := audit.LatestCheckpoint(afterFile)
				if err == nil && cp == nil {
					err = errors.New("no checkpoint in the file")
				}
				if err != nil {
					return &exitError{code: exitAudit, err: fmt.Errorf("--after %s: %w", afterFile, err)}
				}
				o.After = cp
			}
			rep, err := audit.Verify(path, o)
			if err != nil {
				var ae *audit.Error
				switch {
				case errors.As(err, &ae):
					return &exitError{code: exitAudit, err: err,
						hint: "the log was altered at or just before that line; keep a copy of every file for investigation"}
				case errors.Is(err, audit.ErrCheckpoint):
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
	return cmd
}

// auditKey finds the key checkpoints must be signed with.
func auditKey(arg, path, state string) (ed25519.PublicKey, error) {
	if arg != "" {
		if strings.HasPrefix(arg, "ed25519:") {
			return audit.ParseKey(arg)
		}
		b, err := os.ReadFile(arg)
		if err != nil {
			return nil, fmt.Errorf("--key: %w", err)
		}
		return audit.ParseKey(string(b))
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
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return audit.ShowLog(ctx, logPath(args), os.Stdout, o)
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "print each record as stored (one JSON object a line)")
	cmd.Flags().StringVar(&since, "since", "", "only records at or after this time (RFC 3339, 2006-01-02, or a duration ago such as 2h)")
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
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.Unix(n, 0), nil
	}
	return time.Time{}, fmt.Errorf("%q is not a time (RFC 3339, 2006-01-02, unix seconds) or a duration", s)
}
