package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/grant"
)

// Client speaks the daemon protocol over the Unix socket. Requests are
// multiplexed; every method is safe for concurrent use. Refusals come back as
// *protocol.Error carrying the daemon's stable code.
//
// No goroutine of its own reads the connection. A request waits either for
// its reply or for the reader token; whoever holds the token reads frames
// and hands each to its request until its own reply has come, then passes
// the token on. So a lone request's reply is read by the goroutine that
// waits for it, without a hand-off between goroutines (docs/performance.md).
type Client struct {
	nc  net.Conn
	wmu sync.Mutex
	// reader holds the token (capacity 1) while nobody reads; fr is used
	// only by the token's holder.
	reader  chan struct{}
	fr      *clientReader
	mu      sync.Mutex
	next    uint64
	calls   map[string]*call
	closed  error
	done    chan struct{}
	manOnce sync.Once
	man     *protocol.Manifest
	manErr  error

	// The deadline for the daemon's first frame (Options.Answer).
	path       string
	answer     time.Duration
	answered   atomic.Bool // a frame came
	answerOnce sync.Once
}

type call struct {
	events func(*protocol.Frame)
	reply  chan *protocol.Frame
	// fast, when set, decodes a frame in one pass on the guess that it is
	// this call's final reply, and reports whether the guess held. The
	// reader tries it on the frames it reads for its own call; a frame it
	// refuses goes through dispatch.
	fast func(line []byte) (*protocol.Frame, bool)
}

// readBuffer is the size of the connection's read buffer: most frames fit,
// longer ones are gathered in pieces.
const readBuffer = 4 << 10

// Errors a client meets before the daemon says anything.
var (
	// ErrNotRunning means no daemon answers on the socket.
	ErrNotRunning = errors.New("parley-keyd is not running")
	// ErrPermission means the socket exists but this user may not open it.
	ErrPermission = errors.New("permission denied on the parley-keyd socket")
	// ErrWrongServer means the socket is served by a user that is not the
	// daemon's (see ServerError).
	ErrWrongServer = errors.New("the parley-keyd socket is not served by the daemon's user")
	// ErrNoAnswer means the socket took the connection but the daemon did
	// not answer within Options.Answer: it is not starting.
	ErrNoAnswer = errors.New("parley-keyd did not answer")
)

// ServerError says who serves a socket that the client refused to talk to.
type ServerError struct {
	Path string
	UID  uint32
	User string   // the name of UID, or the number
	Want []string // the users accepted besides root and this one
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("the socket %s is served by user %s (uid %d), not by %s, root or you: refusing to talk to it",
		e.Path, e.User, e.UID, strings.Join(e.Want, ", "))
}

// Is makes errors.Is(err, ErrWrongServer) true.
func (e *ServerError) Is(target error) bool { return target == ErrWrongServer }

// Options configure Dial.
type Options struct {
	// ServerUsers are the users (names or uids) that may serve the
	// socket, besides root and the caller's own user; empty means
	// protocol.DaemonUsers(""): PARLEY_KEYD_USER, else
	// protocol.DefaultDaemonUser. See CheckServer.
	ServerUsers []string
	// Answer, when more than zero, is how long the daemon has to send
	// its first frame once the first request is sent: a daemon that
	// cannot start behind its activation socket takes connections (the
	// service manager holds the socket) and never answers. Without an
	// answer in time the connection ends, and every request on it fails
	// with an error that matches ErrNoAnswer. Nothing more is sent for
	// it: every request counts against the caller's rate.
	Answer time.Duration
}

// Dial connects to the daemon at path with the default Options.
func Dial(path string) (*Client, error) { return DialWith(path, Options{}) }

// DialWith connects to the daemon at path. It returns an error, having sent
// nothing, when the socket is served by another user than o allows
// (CheckServer).
func DialWith(path string, o Options) (*Client, error) {
	nc, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		switch {
		case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED):
			return nil, fmt.Errorf("%w (no daemon at %s)", ErrNotRunning, path)
		case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
			return nil, fmt.Errorf("%w %s", ErrPermission, path)
		}
		return nil, err
	}
	if err := CheckServer(nc.(*net.UnixConn), path, o.ServerUsers); err != nil {
		nc.Close()
		return nil, err
	}
	c := &Client{nc: nc, calls: map[string]*call{}, done: make(chan struct{}), reader: make(chan struct{}, 1),
		fr: &clientReader{r: bufio.NewReaderSize(nc, readBuffer)}}
	c.reader <- struct{}{}
	c.path, c.answer = path, o.Answer
	return c, nil
}

// awaitAnswer, called once a request is sent, ends the connection with
// ErrNoAnswer when no frame has come from the daemon within Options.Answer
// of the first request.
func (c *Client) awaitAnswer() {
	if c.answer <= 0 || c.answered.Load() {
		return
	}
	c.answerOnce.Do(func() {
		time.AfterFunc(c.answer, func() {
			if c.answered.Load() {
				return
			}
			c.shutdown(fmt.Errorf("%w: the socket %s took the connection, but the daemon did not answer within %s", ErrNoAnswer, c.path, c.answer))
			c.nc.SetReadDeadline(longAgo) // wakes a reader
		})
	})
}

// CheckServer checks, with SO_PEERCRED, that the socket nc is served by
// root, by the caller's own user, or by one of users (names or uids; empty
// means protocol.DaemonUsers("")). Attack: another local user who could
// write the socket's folder replaced the daemon's socket with one of its
// own, to receive the agent's proofs and requests or the human's approvals
// and answer them itself. Root is accepted because under socket activation
// the socket belongs to the service manager, and root can read the key
// anyway; the caller's own user because a process of it can already do all
// the caller can.
func CheckServer(nc *net.UnixConn, path string, users []string) error {
	raw, err := nc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("reading who serves %s: %w", path, cerr)
	}
	if cred.Uid == 0 || int(cred.Uid) == os.Getuid() {
		return nil
	}
	if len(users) == 0 {
		users = protocol.DaemonUsers("")
	}
	for _, u := range users {
		if uid, ok := lookupUID(u); ok && uid == cred.Uid {
			return nil
		}
	}
	name := strconv.FormatUint(uint64(cred.Uid), 10)
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	return &ServerError{Path: path, UID: cred.Uid, User: name, Want: users}
}

// lookupUID resolves a user name or a numeric uid.
func lookupUID(u string) (uint32, bool) {
	if n, err := strconv.ParseUint(u, 10, 32); err == nil {
		return uint32(n), true
	}
	pw, err := user.Lookup(u)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(pw.Uid, 10, 32)
	return uint32(n), err == nil
}

// Close closes the connection, which withdraws any request still waiting.
func (c *Client) Close() error { return c.nc.Close() }

// clientReader reads the daemon's frames. Unlike protocol.FrameReader it keeps a
// partly read frame across a read error, so that a read cut short by a
// deadline (a request's context ended) loses nothing for the next reader.
type clientReader struct {
	r       *bufio.Reader
	partial []byte
}

func (cr *clientReader) next() ([]byte, error) {
	for {
		chunk, err := cr.r.ReadSlice('\n')
		if len(cr.partial)+len(chunk) > protocol.MaxFrame+1 {
			return nil, protocol.ErrFrameTooLarge
		}
		if err == nil && len(cr.partial) == 0 {
			return bytes.TrimRight(chunk, "\r\n"), nil
		}
		cr.partial = append(cr.partial, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			return nil, err
		}
		line := cr.partial
		cr.partial = cr.partial[:0:0]
		return bytes.TrimRight(line, "\r\n"), nil
	}
}

// dispatch hands one frame to the request it answers. A non-nil error is a
// refusal of the whole connection, which ends it.
func (c *Client) dispatch(line []byte) error {
	var f protocol.Frame
	if json.Unmarshal(line, &f) != nil {
		return nil
	}
	neutralizeFrame(&f)
	if f.Re == "" && f.Kind == protocol.KindError {
		// A refusal of the whole connection (not allowed to connect, too
		// many connections) or of an unreadable frame.
		if f.Code == protocol.CodeBadFrame {
			return nil
		}
		return f.Err()
	}
	c.mu.Lock()
	cl := c.calls[f.Re]
	if cl != nil && f.Kind != protocol.KindEvent {
		delete(c.calls, f.Re)
	}
	c.mu.Unlock()
	switch {
	case cl == nil:
	case f.Kind == protocol.KindEvent:
		if cl.events != nil {
			cl.events(&f)
		}
	default:
		cl.reply <- &f // buffered: one final reply per call
	}
	return nil
}

// takeFast hands line to request id when that request's fast decoder takes
// it as its final reply. Only id's own goroutine, reading, calls it, so the
// request cannot end meanwhile.
func (c *Client) takeFast(id string, line []byte) bool {
	c.mu.Lock()
	cl := c.calls[id]
	c.mu.Unlock()
	if cl == nil || cl.fast == nil {
		return false
	}
	f, ok := cl.fast(line)
	if !ok {
		return false
	}
	c.mu.Lock()
	delete(c.calls, id)
	c.mu.Unlock()
	cl.reply <- f
	return true
}

// shutdown ends the connection for every request with err.
func (c *Client) shutdown(err error) {
	if err == nil || errors.Is(err, net.ErrClosed) {
		err = errors.New("connection to parley-keyd closed")
	}
	c.mu.Lock()
	if c.closed != nil {
		c.mu.Unlock()
		return
	}
	c.closed = err
	calls := c.calls
	c.calls = map[string]*call{}
	c.mu.Unlock()
	close(c.done)
	for _, cl := range calls {
		close(cl.reply)
	}
}

// longAgo is a read deadline that has passed: setting it wakes a reader.
var longAgo = time.Unix(1, 0)

// readFor reads and dispatches frames, holding the reader token, until the
// request id has its final reply, the connection ends, or ctx ends (then it
// returns ctx's error). Without a request (id "") it reads until the
// connection ends or ctx ends.
func (c *Client) readFor(ctx context.Context, id string) error {
	if ctx.Done() != nil {
		// A blocked read ends when the request's context does.
		stop := context.AfterFunc(ctx, func() { c.nc.SetReadDeadline(longAgo) })
		defer stop()
	}
	for {
		c.mu.Lock()
		finished := c.closed != nil || (id != "" && c.calls[id] == nil)
		c.mu.Unlock()
		if finished {
			return nil
		}
		line, err := c.fr.next()
		if err == nil {
			c.answered.Store(true)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			c.nc.SetReadDeadline(time.Time{})
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue // a deadline another request's end left behind
		}
		if err == nil && c.takeFast(id, line) {
			continue
		}
		if err == nil {
			err = c.dispatch(line)
		}
		if err != nil {
			c.shutdown(err)
			return nil
		}
	}
}

// Do sends a request frame and waits for its final reply, passing EVENT
// replies to events as they come. An ERROR reply is returned as *protocol.Error.
func (c *Client) Do(ctx context.Context, f *protocol.Frame, events func(*protocol.Frame)) (*protocol.Frame, error) {
	return c.do(ctx, func(id string) ([]byte, error) {
		f.ID = id
		return protocol.EncodeFrame(f)
	}, events, nil)
}

// do is Do for a frame that encode writes, given the request id, with an
// optional fast decoder for the final reply (see call).
func (c *Client) do(ctx context.Context, encode func(id string) ([]byte, error), events func(*protocol.Frame), fast func(id string, line []byte) (*protocol.Frame, bool)) (*protocol.Frame, error) {
	c.mu.Lock()
	if c.closed != nil {
		err := c.closed
		c.mu.Unlock()
		return nil, err
	}
	c.next++
	id := strconv.FormatUint(c.next, 10)
	cl := &call{events: events, reply: make(chan *protocol.Frame, 1)}
	if fast != nil {
		cl.fast = func(line []byte) (*protocol.Frame, bool) { return fast(id, line) }
	}
	c.calls[id] = cl
	c.mu.Unlock()
	b, err := encode(id)
	if err != nil {
		c.forget(id)
		return nil, err
	}
	c.wmu.Lock()
	_, err = c.nc.Write(b)
	c.wmu.Unlock()
	if err != nil {
		c.forget(id)
		// The daemon may have refused the connection and closed it before
		// we wrote: its ERROR frame is still waiting to be read.
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		select {
		case <-c.reader:
			c.readFor(rctx, "")
			c.reader <- struct{}{}
		case <-c.done:
		case <-rctx.Done():
		}
		c.mu.Lock()
		cerr := c.closed
		c.mu.Unlock()
		var e *protocol.Error
		if errors.As(cerr, &e) {
			return nil, e
		}
		return nil, fmt.Errorf("send to parley-keyd: %w", err)
	}
	c.awaitAnswer()
	for {
		select {
		case r, ok := <-cl.reply:
			if !ok {
				c.mu.Lock()
				err := c.closed
				c.mu.Unlock()
				return nil, err
			}
			if r.Kind == protocol.KindError {
				return nil, r.Err()
			}
			return r, nil
		case <-c.reader:
			err := c.readFor(ctx, id)
			c.reader <- struct{}{}
			if err != nil {
				c.forget(id)
				return nil, err
			}
		case <-ctx.Done():
			c.forget(id)
			return nil, ctx.Err()
		}
	}
}

func (c *Client) forget(id string) {
	c.mu.Lock()
	delete(c.calls, id)
	c.mu.Unlock()
}

// Hello returns the daemon's manifest for this caller.
func (c *Client) Hello(ctx context.Context) (*protocol.Manifest, error) {
	r, err := c.Do(ctx, &protocol.Frame{Verb: protocol.VerbHello}, nil)
	if err != nil {
		return nil, err
	}
	var m protocol.Manifest
	if err := decodeData(r.Data, &m); err != nil {
		return nil, fmt.Errorf("parley-keyd sent a malformed manifest: %w", err)
	}
	return &m, nil
}

// Principal returns the daemon's principal key, asking HELLO once per
// connection; a grant's proof is made for it.
func (c *Client) Principal(ctx context.Context) (string, error) { return c.principal(ctx) }

func (c *Client) principal(ctx context.Context) (string, error) {
	c.manOnce.Do(func() { c.man, c.manErr = c.Hello(ctx) })
	if c.manErr != nil {
		return "", c.manErr
	}
	return c.man.Principal, nil
}

func eventFunc(fn func(protocol.Event)) func(*protocol.Frame) {
	if fn == nil {
		return nil
	}
	return func(f *protocol.Frame) {
		var e protocol.Event
		_ = decodeData(f.Data, &e)
		e.Message = f.Message
		fn(e)
	}
}

// holderKey returns the key string of the agent's signer, which must be a
// key grant.CheckPublicKey accepts (DESIGN.md property 10).
func holderKey(s crypto.Signer) (string, error) {
	pub, ok := s.Public().(ed25519.PublicKey)
	if !ok {
		return "", errors.New("the agent key is not Ed25519")
	}
	if err := grant.CheckPublicKey(pub); err != nil {
		return "", fmt.Errorf("the agent key: %w", err)
	}
	return grant.FormatPublicKey(pub), nil
}

// proofParties returns what a proof of the holder key names: the daemon's
// principal (the proof's audience) and the holder key.
func (c *Client) proofParties(ctx context.Context, holder crypto.Signer) (principal, key string, err error) {
	if principal, err = c.principal(ctx); err != nil {
		return "", "", err
	}
	key, err = holderKey(holder)
	return principal, key, err
}

// Grant asks for a root grant to holder's key with caveats, proving that the
// caller holds the key. It blocks while a human decides; events receive the
// match code to show.
func (c *Client) Grant(ctx context.Context, holder crypto.Signer, caveats []grant.Caveat, events func(protocol.Event)) (*protocol.GrantResult, error) {
	principal, key, err := c.proofParties(ctx, holder)
	if err != nil {
		return nil, err
	}
	body, err := canonicalGrantBody(key, caveats)
	if err != nil {
		return nil, err
	}
	// body is canonical, so its digest is the SHA-256 of these bytes.
	sum := sha256.Sum256(body)
	digest := base64.RawURLEncoding.EncodeToString(sum[:])
	proof, err := grant.MakeProof(holder, principal, protocol.ProofVerbGrant, digest, time.Now().Unix())
	if err != nil {
		return nil, err
	}
	var res *protocol.GrantResult
	r, err := c.do(ctx, func(id string) ([]byte, error) { return grantFrame(id, body, &proof) }, eventFunc(events),
		func(id string, line []byte) (*protocol.Frame, bool) {
			var ok bool
			res, ok = decodeGrantReply(id, line)
			return &protocol.Frame{Re: id, Kind: protocol.KindGrant}, ok
		})
	if err != nil {
		return nil, err
	}
	if res != nil {
		neutralize(reflect.ValueOf(res), "")
		return res, nil
	}
	return decodeGrantResult(r)
}

// decodeGrantReply decodes line in one pass if it is the GRANT reply to
// request id, instead of a protocol.Frame first and its data after: by hand
// when it has the exact shape the daemon writes, else with encoding/json.
func decodeGrantReply(id string, line []byte) (*protocol.GrantResult, bool) {
	if re, res, ok := protocol.DecodeGrantReply(line); ok {
		if re != id {
			return nil, false
		}
		return res, true
	}
	var f struct {
		Re   string                `json:"re"`
		Kind string                `json:"kind"`
		Data *protocol.GrantResult `json:"data"`
	}
	if json.Unmarshal(line, &f) != nil || f.Re != id || f.Kind != protocol.KindGrant || f.Data == nil || f.Data.Token == "" {
		return nil, false
	}
	return f.Data, true
}

// canonicalGrantBody returns the "grant" object of a GRANT request,
// {"caveats":[…],"holder":"…"}, in canonical JSON (§10): the keys in order,
// no spaces, each caveat as Caveat.MarshalJSON writes it (canonical), and
// holder a key string of FormatPublicKey (only b64url characters after
// "ed25519:"). Written by hand, it needs neither encoding/json nor a
// canonicalizing pass to compute its digest.
func canonicalGrantBody(holder string, caveats []grant.Caveat) ([]byte, error) {
	b := make([]byte, 0, 128+64*len(caveats))
	b = append(b, `{"caveats":[`...)
	for i, c := range caveats {
		if i > 0 {
			b = append(b, ',')
		}
		cb, err := c.MarshalJSON()
		if err != nil {
			return nil, err
		}
		b = append(b, cb...)
	}
	b = append(b, `],"holder":"`...)
	b = append(b, holder...)
	return append(b, `"}`...), nil
}

// grantFrame writes the GRANT request frame by hand: every part is already
// JSON without a newline (body is canonical, the id is digits, the proof's
// key and signature are b64url), so encoding/json would only check it again.
func grantFrame(id string, body []byte, p *grant.Proof) ([]byte, error) {
	b := make([]byte, 0, len(body)+256)
	b = append(b, `{"parley":`...)
	b = strconv.AppendInt(b, protocol.Version, 10)
	b = append(b, `,"id":"`...)
	b = append(b, id...)
	b = append(b, `","verb":"`+protocol.VerbGrant+`","grant":`...)
	b = append(b, body...)
	b = append(b, `,"proof":{"key":"`...)
	b = append(b, p.Key...)
	b = append(b, `","ts":`...)
	b = strconv.AppendInt(b, p.Ts, 10)
	b = append(b, `,"sig":"`...)
	b = append(b, p.Sig...)
	b = append(b, "\"}}\n"...)
	if len(b)-1 > protocol.MaxFrame {
		return nil, protocol.ErrFrameTooLarge
	}
	return b, nil
}

func decodeGrantResult(r *protocol.Frame) (*protocol.GrantResult, error) {
	var res protocol.GrantResult
	if err := decodeData(r.Data, &res); err != nil || res.Token == "" {
		return nil, errors.New("parley-keyd sent a malformed GRANT reply")
	}
	return &res, nil
}

// Explain asks which rule would decide a grant request and what it would
// issue. Nothing is signed.
func (c *Client) Explain(ctx context.Context, holder string, caveats []grant.Caveat) (*protocol.Explanation, error) {
	if caveats == nil {
		caveats = []grant.Caveat{}
	}
	body, err := json.Marshal(protocol.GrantBody{Holder: holder, Caveats: caveats})
	if err != nil {
		return nil, err
	}
	r, err := c.Do(ctx, &protocol.Frame{Verb: protocol.VerbExplain, Grant: body}, nil)
	if err != nil {
		return nil, err
	}
	var e protocol.Explanation
	if err := decodeData(r.Data, &e); err != nil {
		return nil, errors.New("parley-keyd sent a malformed EXPLAIN reply")
	}
	return &e, nil
}

// Consent asks for a consent grant (§6.6) for the proposal a service sent,
// given the service's consent object (or its whole ERROR frame).
func (c *Client) Consent(ctx context.Context, holder crypto.Signer, service string, consent, proposal json.RawMessage, events func(protocol.Event)) (*protocol.GrantResult, error) {
	principal, key, err := c.proofParties(ctx, holder)
	if err != nil {
		return nil, err
	}
	var cr grant.ConsentRequest
	if err := json.Unmarshal(consentObject(consent), &cr); err != nil || cr.Hash == "" {
		return nil, errors.New("the consent is not a §6.6 consent object or a consent_required ERROR frame")
	}
	proof, err := grant.MakeProof(holder, principal, protocol.ProofVerbConsent, cr.Hash, time.Now().Unix())
	if err != nil {
		return nil, err
	}
	r, err := c.Do(ctx, &protocol.Frame{Verb: protocol.VerbConsent, Service: service, Consent: consent, Proposal: proposal,
		Holder: key, Proof: &proof}, eventFunc(events))
	if err != nil {
		return nil, err
	}
	return decodeGrantResult(r)
}

// Pending lists the requests waiting for a human.
func (c *Client) Pending(ctx context.Context) ([]protocol.PendingView, error) {
	r, err := c.Do(ctx, &protocol.Frame{Verb: protocol.VerbPending}, nil)
	if err != nil {
		return nil, err
	}
	var out struct {
		Pending []protocol.PendingView `json:"pending"`
	}
	if err := decodeData(r.Data, &out); err != nil {
		return nil, errors.New("parley-keyd sent a malformed PENDING reply")
	}
	return out.Pending, nil
}

// Approve approves request id with the match code shown to the requester.
// channel is "terminal" or "desktop".
func (c *Client) Approve(ctx context.Context, id, match, channel string) error {
	_, err := c.Do(ctx, &protocol.Frame{Verb: protocol.VerbApprove, Request: id, Match: match, Channel: channel}, nil)
	return err
}

// Deny denies request id.
func (c *Client) Deny(ctx context.Context, id, channel string) error {
	_, err := c.Do(ctx, &protocol.Frame{Verb: protocol.VerbDeny, Request: id, Channel: channel}, nil)
	return err
}

// Feed receives what WATCH streams; a nil field ignores its events.
type Feed struct {
	// Pending receives each waiting request.
	Pending func(protocol.PendingView)
	// Ended receives each request that ended: "approved" or the code it
	// ended with, and why.
	Ended func(id, outcome, reason string)
	// Checkpoint receives each signed checkpoint of the daemon's audit log,
	// read strictly but not verified: the receiver checks it against the
	// principal key (checkpoint.Keeper does).
	Checkpoint func(*checkpoint.Checkpoint)
	// AuditDamage receives what the daemon's scrub found in its audit log
	// (it then issues nothing), and Cleared once an admin acknowledged it.
	AuditDamage func(protocol.AuditDamage)
	// Malformed receives an event the client could not read; nil ignores
	// it.
	Malformed func(message string, err error)
}

// Watch streams pending requests, their ends and the audit log's checkpoints
// until ctx ends or the connection closes.
func (c *Client) Watch(ctx context.Context, feed Feed) error {
	bad := func(msg string, err error) {
		if feed.Malformed != nil {
			feed.Malformed(msg, err)
		}
	}
	_, err := c.Do(ctx, &protocol.Frame{Verb: protocol.VerbWatch}, func(f *protocol.Frame) {
		switch f.Message {
		case "pending":
			var v protocol.PendingView
			if err := decodeData(f.Data, &v); err != nil {
				bad(f.Message, err)
			} else if feed.Pending != nil {
				feed.Pending(v)
			}
		case "ended":
			var e struct{ ID, Outcome, Reason string }
			if err := decodeData(f.Data, &e); err != nil {
				bad(f.Message, err)
			} else if feed.Ended != nil {
				feed.Ended(e.ID, e.Outcome, e.Reason)
			}
		case "audit-damage":
			var d protocol.AuditDamage
			if err := decodeData(f.Data, &d); err != nil {
				bad(f.Message, err)
			} else if feed.AuditDamage != nil {
				feed.AuditDamage(d)
			}
		case "checkpoint":
			cp, err := checkpoint.Parse(f.Data)
			if err != nil {
				bad(f.Message, err)
			} else if feed.Checkpoint != nil {
				feed.Checkpoint(cp)
			}
		}
	})
	return err
}

// Audit reads a page of the daemon's audit log (approvers only).
func (c *Client) Audit(ctx context.Context, q protocol.AuditQuery) (*protocol.AuditPage, error) {
	r, err := c.Do(ctx, &protocol.Frame{Verb: protocol.VerbAudit, Audit: &q}, nil)
	if err != nil {
		return nil, err
	}
	var p protocol.AuditPage
	if err := decodeData(r.Data, &p); err != nil || len(p.Lines) != len(p.Records) {
		return nil, errors.New("parley-keyd sent a malformed AUDIT reply")
	}
	return &p, nil
}

// consentObject returns the "consent" member of an ERROR frame, or raw
// itself when raw is the consent object. The daemon reads the same bytes
// strictly; the client only needs the hash for its proof.
func consentObject(raw json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) == nil {
		if v, ok := m["consent"]; ok {
			return v
		}
	}
	return raw
}
