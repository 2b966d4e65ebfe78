package audit

import (
	"errors"
	"fmt"
	"time"
)

// ErrClosed is returned by Append after Close.
var ErrClosed = errors.New("audit log is closed")

// ErrInUse is returned by Open when another process, such as a
// second daemon on the same state folder, holds the log.
var ErrInUse = errors.New("in use by another process")

// ErrUnavailable is wrapped by every error of Append that means "not now":
// the disk is full or read-only, a write or fsync failed, or the log's file
// was moved, deleted, truncated or written by someone else under the daemon
// (*VanishedError). The record is not in the log. The daemon refuses the
// request with the wire code "unavailable" and a retry hint; the log
// retries on the next Append by itself, without being reopened, and
// resumes as soon as the cause is gone (for a vanished file: after Reopen).
var ErrUnavailable = errors.New("audit log unavailable")

// VanishedError says that the file the log writes to is no longer the file
// at its path, or no longer has the length the log wrote: it was renamed,
// deleted, replaced, truncated (logrotate's copytruncate does that) or
// written by another process. Append refuses every record until the file
// is back or the daemon calls Reopen, because records written to a file
// nobody will find are as good as lost (issue 12: one run left 3 716 grants
// with no record in any file). It wraps ErrUnavailable.
type VanishedError struct {
	Path string
	What string // what happened, as a sentence fragment: "was deleted or renamed", …
}

func (e *VanishedError) Error() string {
	return fmt.Sprintf("audit log %s %s; no grant is issued until it is resolved (send the daemon SIGHUP to start a new segment)", e.Path, e.What)
}

// Unwrap makes errors.Is(err, ErrUnavailable) true.
func (e *VanishedError) Unwrap() error { return ErrUnavailable }

// Error reports where an audit log fails verification: a file, and in it a
// line (counting from 1; 0 when the reader did not start at the file's
// first line) or the seq of the record expected there.
type Error struct {
	File   string
	Line   int
	Seq    uint64
	Reason string
}

func (e *Error) Error() string {
	where := "audit log"
	if e.File != "" {
		where += " " + e.File
	}
	switch {
	case e.Line > 0:
		where += fmt.Sprintf(" line %d", e.Line)
	case e.Seq > 0:
		where += fmt.Sprintf(" record %d", e.Seq)
	}
	return where + ": " + e.Reason
}

// unavailable wraps an I/O error so that it is both ErrUnavailable and
// itself (errors.Is(err, syscall.ENOSPC) still holds).
func unavailable(what string, err error) error {
	return fmt.Errorf("%s: %w: %w", what, ErrUnavailable, err)
}

// WaitingError is Append's refusal while a log opened with
// Options.Deferred has not written its open checkpoint: the daemon has not
// started serving yet, or its signer (a key service) has not signed that
// checkpoint yet. The log tries again by itself. It wraps ErrUnavailable.
type WaitingError struct {
	// Err is why the last attempt failed; nil before Start.
	Err error
	// Retry is when the log tries again, as a hint for clients.
	Retry time.Duration
}

func (e *WaitingError) Error() string {
	if e.Err == nil {
		return "audit log: not started yet (the daemon is starting)"
	}
	return fmt.Sprintf("audit log: waiting to sign its open checkpoint: %v", e.Err)
}

// Unwrap makes errors.Is(err, ErrUnavailable) true, and reaches the cause.
func (e *WaitingError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrUnavailable}
	}
	return []error{ErrUnavailable, e.Err}
}

// signError is a checkpoint its signer could not sign.
type signError struct{ err error }

func (e *signError) Error() string { return e.err.Error() }
func (e *signError) Unwrap() error { return e.err }
