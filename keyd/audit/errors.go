package audit

import (
	"errors"
	"fmt"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
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

// Reason says, in a word that stays the same from release to release, how
// an audit log fails verification. Scripts, the daemon's scrub, status and
// the start-up refusal all use these values; the text of an Error says the
// rest for people. New reasons may be added; none is renamed.
type Reason string

// The ways an audit log can fail verification.
const (
	// ReasonChain: a record's prev is not the hash of the line before (that
	// line was edited, or records were removed or inserted there).
	ReasonChain Reason = "chain"
	// ReasonSeq: a record's seq is not the one after the record before
	// (a record removed, inserted, duplicated or reordered), or the log's
	// first record is not seq 1.
	ReasonSeq Reason = "seq"
	// ReasonMalformed: a line that is not a record (not JSON, NUL bytes, no
	// kind, a bad time).
	ReasonMalformed Reason = "malformed"
	// ReasonTorn: the last line is incomplete (a crash during a write;
	// opening the log cuts it).
	ReasonTorn Reason = "torn"
	// ReasonCheckpointSignature: a checkpoint's signature does not verify.
	ReasonCheckpointSignature Reason = "checkpoint-signature"
	// ReasonForeignKey: a checkpoint is signed by a key other than the
	// principal key (or a key rotated out): the log was rewritten and
	// signed by someone else.
	ReasonForeignKey Reason = "foreign-key"
	// ReasonCheckpoint: a checkpoint record that does not cover the record
	// before it, carries another time, is not written as the log writes it,
	// or has a reason it cannot have at its seq.
	ReasonCheckpoint Reason = "checkpoint"
	// ReasonForeignLog: a checkpoint of another log (records of another log
	// spliced in, or a witness holding another log's checkpoint).
	ReasonForeignLog Reason = "foreign-log"
	// ReasonAfterStop: records follow the daemon's stop checkpoint.
	ReasonAfterStop Reason = "after-stop"
	// ReasonSegmentLink: the segments do not link up: the active segment is
	// missing, a closed one ends with NUL bytes, or the log's first file
	// begins at a record other than the first without a rotation.
	ReasonSegmentLink Reason = "segment-link"
	// ReasonEmpty: a segment is empty.
	ReasonEmpty Reason = "empty"
	// ReasonNoCheckpoint: no checkpoint vouches for the log.
	ReasonNoCheckpoint Reason = "no-checkpoint"
	// ReasonTruncated: a checkpoint kept elsewhere covers a record the log
	// no longer has, and the log does not end with the daemon's stop
	// checkpoint: its tail was cut.
	ReasonTruncated Reason = "truncated"
	// ReasonRollback: a checkpoint kept elsewhere covers a record the log
	// no longer has, and the log ends with a stop checkpoint: it is an older
	// copy of the whole log.
	ReasonRollback Reason = "rollback"
	// ReasonRewritten: the record at a checkpoint kept elsewhere has another
	// hash: the log was rewritten from there on.
	ReasonRewritten Reason = "rewritten"
	// ReasonWitness: a checkpoint kept elsewhere that does not verify, or
	// that the log cannot be checked against (--after).
	ReasonWitness Reason = "witness"
	// ReasonUnreadable: a segment (or the damage file) that cannot be read.
	ReasonUnreadable Reason = "unreadable"
)

// Error reports where an audit log fails verification: a file, and in it a
// line (counting from 1; 0 when the reader did not start at the file's
// first line) or the seq of the record expected there, with a stable Reason
// and a sentence (Detail). errors.As(err, &*audit.Error) finds it in what
// Verify, Open, the scrub and the start-up check return.
type Error struct {
	File   string
	Line   int
	Seq    uint64
	Reason Reason
	Detail string
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
	return where + ": " + e.Detail + " [" + string(e.Reason) + "]"
}

// Is makes errors.Is(err, ErrCheckpoint) true for an Error about a
// checkpoint kept elsewhere that the log contradicts, as before reasons.
func (e *Error) Is(target error) bool {
	if target != checkpoint.ErrCheckpoint {
		return false
	}
	switch e.Reason {
	case ReasonTruncated, ReasonRollback, ReasonRewritten, ReasonWitness:
		return true
	}
	return false
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
