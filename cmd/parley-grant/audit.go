package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/duration"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/spf13/cobra"
)

func newAuditCmd() *cobra.Command {
	var since, until, grantID string
	var from uint64
	var asJSON, follow bool
	cmd := &cobra.Command{
		Use:   "audit [--since T] [--until T] [--grant ID] [--from SEQ] [--json] [--follow]",
		Short: "Read the daemon's audit log, as an approver",
		Long: `audit prints the records of the daemon's audit log that the flags select: one
line each as the daemon renders them (values with spaces quoted, terminal
escapes made visible), or with --json each record as the log stores it, one
JSON object per line. The log's files are readable by the daemon's user
alone; an approver reads them through the daemon. --follow goes on printing
records as they are written, until interrupted.

--since and --until take an RFC 3339 time, a date (2006-01-02), unix
seconds, or a duration ago (2h). To check the log's integrity, an admin runs
parley-keyd audit verify.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			now := time.Now()
			q := protocol.AuditQuery{From: from, Grant: grantID}
			var err error
			if q.Since, err = whenFlag("since", since, now); err != nil {
				return err
			}
			if q.Until, err = whenFlag("until", until, now); err != nil {
				return err
			}
			c, err := dialDaemon()
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			for {
				rctx, cancel := context.WithTimeout(ctx, time.Minute)
				page, err := c.Audit(rctx, q)
				cancel()
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return daemonError(err)
				}
				for i, raw := range page.Records {
					if asJSON {
						// As stored, but never a raw control or bidi
						// character on the terminal (escapeJSONText).
						if !json.Valid(raw) {
							return fail(errors.New("parley-keyd sent an audit record that is not JSON"), "")
						}
						os.Stdout.Write(append(escapeJSONText(raw), '\n'))
					} else {
						fmt.Println(page.Lines[i])
					}
				}
				q.From = page.Next
				switch {
				case page.More:
				case follow:
					q.Wait = true
				default:
					return nil
				}
			}
		},
	}
	cmd.Flags().StringVar(&since, "since", "", "only records at or after this time")
	cmd.Flags().StringVar(&until, "until", "", "only records at or before this time")
	cmd.Flags().StringVar(&grantID, "grant", "", "only the records of this grant id")
	cmd.Flags().Uint64Var(&from, "from", 0, "only records from this seq on")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print each record as the log stores it, one JSON object a line")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "go on printing records as they are written")
	return cmd
}

// whenFlag reads --since or --until into unix seconds; "" is 0 (no bound).
func whenFlag(name, s string, now time.Time) (int64, error) {
	if s == "" {
		return 0, nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.Unix(), nil
		}
	}
	if d, err := duration.Parse(s); err == nil {
		return now.Add(-d).Unix(), nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 && n <= maxUnix {
		return n, nil
	}
	return 0, usage(errors.New("--"+name+" "+strconv.Quote(s)+": not a time"),
		"give an RFC 3339 time, a date such as 2006-01-02, unix seconds, or a duration ago such as 2h or 1d")
}
