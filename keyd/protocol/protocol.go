package protocol

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/parley-keyd/parley-keyd/grant"
)

// Version is the daemon protocol version carried in every frame ("parley": 1),
// the same framing as Parley §2.
const Version = 1

// MaxFrame is the largest frame the daemon reads or writes (§2.1: 1 MiB). A
// larger frame is skipped up to its newline without being buffered whole, so a
// client cannot make the daemon allocate more than this per connection.
const MaxFrame = 1 << 20

// Verbs of the daemon protocol (docs/protocol.md).
const (
	VerbHello   = "HELLO"
	VerbGrant   = "GRANT"
	VerbConsent = "CONSENT"
	VerbExplain = "EXPLAIN"
	VerbPending = "PENDING"
	VerbApprove = "APPROVE"
	VerbDeny    = "DENY"
	VerbWatch   = "WATCH"
	VerbAudit   = "AUDIT"
	VerbLock    = "LOCK"
	VerbUnlock  = "UNLOCK"
	// VerbRemembered lists remembered approvals, VerbForget ends one
	// (remembered.go).
	VerbRemembered = "REMEMBERED"
	VerbForget     = "FORGET"
)

// Reply kinds.
const (
	KindBrief   = "BRIEF"
	KindGrant   = "GRANT"
	KindExplain = "EXPLAIN"
	KindPending = "PENDING"
	KindOK      = "OK"
	KindAudit   = "AUDIT"
	KindEvent   = "EVENT"
	KindError   = "ERROR"
	// KindRemembered answers REMEMBERED: data is a RememberedList.
	KindRemembered = "REMEMBERED"
)

// Code is a stable, machine-readable reason carried by an ERROR frame. Codes
// are part of the wire protocol: never rename one.
type Code string

const (
	CodeBadFrame      Code = "bad_frame"      // not a frame: bad JSON, too large, unknown verb, missing id
	CodeInvalidParams Code = "invalid_params" // a frame whose fields are wrong: unknown caveat, bad key
	CodeUnauthorized  Code = "unauthorized"   // holder proof missing or wrong; caller not allowed to connect
	CodeForbidden     Code = "forbidden"      // policy refuses, or this caller's role may not use the verb
	CodeConflict      Code = "conflict"       // consent does not match the proposal
	CodeExpired       Code = "expired"        // the proposal or consent has expired
	CodeDenied        Code = "denied"         // the human denied the request (or chose a wrong code)
	CodeTimeout       Code = "timeout"        // nobody approved in time
	CodeNotFound      Code = "not_found"      // no such pending request
	CodeLimit         Code = "limit"          // rate or pending limit reached; see retry
	CodeUnavailable   Code = "unavailable"    // audit log not writable, shutting down
	CodeInternal      Code = "internal"       // a bug: the detail is in the audit log
	CodeLocked        Code = "locked"         // an approver locked the daemon: every request is refused until unlock
)

// Error is a refusal as it crosses the socket: a stable code, one sentence,
// and where it helps, a fix and a retry delay in seconds.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
	Retry   int    `json:"retry,omitempty"`
	Rule    string `json:"rule,omitempty"`
}

func (e *Error) Error() string {
	if e.Fix != "" {
		return fmt.Sprintf("%s: %s (%s)", e.Code, e.Message, e.Fix)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Is makes errors.Is(err, &Error{Code: c}) match on the code alone.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Frame is one NDJSON frame in either direction. Requests carry Verb, replies
// Kind and Re. Verb-specific fields sit in the same object (§2.1); unknown
// fields are ignored. An ERROR reply carries Code, Message and optionally Fix,
// Retry and Rule at the top level, as Parley §7 does.
type Frame struct {
	Parley int    `json:"parley"`
	ID     string `json:"id"`
	Verb   string `json:"verb,omitempty"`
	Kind   string `json:"kind,omitempty"`
	Re     string `json:"re,omitempty"`

	// Request fields.
	Grant    json.RawMessage `json:"grant,omitempty"`    // GRANT, EXPLAIN: {"holder", "caveats"}
	Consent  json.RawMessage `json:"consent,omitempty"`  // CONSENT: the service's consent object or ERROR frame
	Proposal json.RawMessage `json:"proposal,omitempty"` // CONSENT: the proposal or PROPOSALS frame
	Service  string          `json:"service,omitempty"`  // CONSENT: the service id the proposal came from
	Holder   string          `json:"holder,omitempty"`   // CONSENT: the agent key to bind
	Proof    *grant.Proof    `json:"proof,omitempty"`    // GRANT, CONSENT: possession of the holder key
	Request  string          `json:"request,omitempty"`  // APPROVE, DENY: the pending request id; FORGET: the remembered approval's id
	Match    string          `json:"match,omitempty"`    // APPROVE: the match code the human confirmed
	Channel  string          `json:"channel,omitempty"`  // APPROVE, DENY: "terminal" (default) or "desktop"
	Audit    *AuditQuery     `json:"audit,omitempty"`    // AUDIT: which records
	Reason   string          `json:"reason,omitempty"`   // LOCK, FORGET: why, for the audit log
	// Remember, on APPROVE, asks the daemon to keep approving this
	// request for that long (internal/duration's syntax, e.g. "2h"); it
	// must be one of the PendingView's Remember choices' range (at most
	// the rule's remember). Absent: approve once.
	Remember string `json:"remember,omitempty"`

	// Reply fields.
	Code    Code            `json:"code,omitempty"` // ERROR
	Message string          `json:"message,omitempty"`
	Fix     string          `json:"fix,omitempty"`
	Retry   int             `json:"retry,omitempty"`
	Rule    string          `json:"rule,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`

	// compact is Data when GrantReplyFrame wrote it: compact JSON as
	// json.Marshal writes it, which EncodeFrame need not check again.
	compact []byte
}

// Err returns the refusal an ERROR frame carries.
func (f *Frame) Err() *Error {
	return &Error{Code: f.Code, Message: f.Message, Fix: f.Fix, Retry: f.Retry, Rule: f.Rule}
}

// FrameReader reads newline-delimited frames with a hard size cap.
type FrameReader struct {
	r *bufio.Reader

	// Hold, when set, is asked before the reader keeps n more bytes of the
	// frame it is reading. When it returns an error, the reader drops what
	// it kept of that frame, skips the rest of it up to its newline without
	// keeping any, and Next returns the error: the connection stays
	// usable. The daemon sets it to count every frame byte against a
	// budget shared by all its connections.
	Hold func(n int) error
}

// frameReadBuffer is the read buffer each connection keeps for its whole
// life. Most frames fit in it; a longer one is gathered in pieces by next.
// It is small because an idle connection costs this much: with 64 KiB, 1000
// idle connections held 64 MiB of heap, all of it resident once freed
// buffers were reused (docs/performance.md).
const frameReadBuffer = 4 << 10

func NewFrameReader(r io.Reader) *FrameReader {
	return &FrameReader{r: bufio.NewReaderSize(r, frameReadBuffer)}
}

// Buffered reports how many bytes the reader holds that Next has not
// returned yet: more than zero when the client sent frames ahead.
func (fr *FrameReader) Buffered() int { return fr.r.Buffered() }

// ErrFrameTooLarge reports a frame over MaxFrame; the reader has already
// skipped past it and stays usable.
var ErrFrameTooLarge = errors.New("frame larger than 1 MiB")

// Wait blocks until at least one byte of the next frame has arrived, and
// reports whether that frame has arrived whole (its newline is buffered).
// The daemon starts a frame's deadline when it has not.
func (fr *FrameReader) Wait() (whole bool, err error) {
	if _, err := fr.r.Peek(1); err != nil {
		return false, err
	}
	b, _ := fr.r.Peek(fr.r.Buffered())
	return bytes.IndexByte(b, '\n') >= 0, nil
}

// Next returns the next frame's bytes without its newline. An oversized frame
// is discarded up to its newline and reported as ErrFrameTooLarge: the
// connection stays usable (§2.1) and at most MaxFrame bytes are held.
func (fr *FrameReader) Next() ([]byte, error) {
	var buf []byte
	for {
		chunk, err := fr.r.ReadSlice('\n')
		if len(buf)+len(chunk) > MaxFrame+1 {
			// Attack: a client streaming an endless line to exhaust memory.
			// Drop what we have and skip to the end of the line.
			return nil, fr.skip(err, ErrFrameTooLarge, len(buf)+len(chunk))
		}
		if fr.Hold != nil && len(chunk) > 0 {
			if herr := fr.Hold(len(chunk)); herr != nil {
				return nil, fr.skip(err, herr, len(buf)+len(chunk))
			}
		}
		buf = append(buf, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if err == io.EOF && len(bytes.TrimSpace(buf)) > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		return bytes.TrimRight(buf, "\r\n"), nil
	}
}

// skip discards the rest of the current frame, of which n bytes have been
// read so far, the last read ending with err. It returns why: reason, or
// ErrFrameTooLarge for a frame that turned out to be, or the error that
// ended the skip.
func (fr *FrameReader) skip(err, reason error, n int) error {
	for errors.Is(err, bufio.ErrBufferFull) {
		var chunk []byte
		chunk, err = fr.r.ReadSlice('\n')
		n += len(chunk)
	}
	if err != nil {
		return err
	}
	if n > MaxFrame+1 {
		return ErrFrameTooLarge
	}
	return reason
}

// EncodeFrame serializes f as one line. encoding/json escapes newlines inside
// strings, so the output has exactly one, at the end.
func EncodeFrame(f *Frame) ([]byte, error) {
	return AppendFrame(make([]byte, 0, 64+len(f.Data)), f)
}

// AppendFrame appends f's line, as EncodeFrame returns it, to dst: the
// daemon writes its replies through a buffer it reuses.
func AppendFrame(dst []byte, f *Frame) ([]byte, error) {
	f.Parley = Version
	if b, ok := appendFrame(dst, f); ok {
		if len(b)-len(dst) > MaxFrame {
			return nil, ErrFrameTooLarge
		}
		return append(b, '\n'), nil
	}
	b, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFrame {
		return nil, ErrFrameTooLarge
	}
	return append(append(dst, b...), '\n'), nil
}
