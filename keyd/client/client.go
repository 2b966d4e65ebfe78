package client

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/grant"
)

// Client speaks the daemon protocol over the Unix socket. Requests are
// multiplexed; every method is safe for concurrent use. Refusals come back as
// *protocol.Error carrying the daemon's stable code.
type Client struct {
	nc      net.Conn
	wmu     sync.Mutex
	mu      sync.Mutex
	next    uint64
	calls   map[string]*call
	closed  error
	done    chan struct{}
	manOnce sync.Once
	man     *protocol.Manifest
	manErr  error
}

type call struct {
	events func(*protocol.Frame)
	reply  chan *protocol.Frame
}

// Errors a client meets before the daemon says anything.
var (
	// ErrNotRunning means no daemon answers on the socket.
	ErrNotRunning = errors.New("parley-keyd is not running")
	// ErrPermission means the socket exists but this user may not open it.
	ErrPermission = errors.New("permission denied on the parley-keyd socket")
	// ErrWrongServer means the socket is served by a user that is not the
	// daemon's (see ServerError).
	ErrWrongServer = errors.New("the parley-keyd socket is not served by the daemon's user")
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
	// protocol.DefaultDaemonUser. See CheckServer.
	ServerUsers []string
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
	c := &Client{nc: nc, calls: map[string]*call{}, done: make(chan struct{})}
	go c.readLoop()
	return c, nil
}

// CheckServer checks, with SO_PEERCRED, that the socket nc is served by
// root, by the caller's own user, or by one of users (names or uids; empty
// means protocol.DefaultDaemonUser). Attack: another local user who could
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
		users = []string{protocol.DefaultDaemonUser}
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

func (c *Client) readLoop() {
	fr := protocol.NewFrameReader(c.nc)
	var err error
	for {
		var line []byte
		line, err = fr.Next()
		if err != nil {
			break
		}
		var f protocol.Frame
		if json.Unmarshal(line, &f) != nil {
			continue
		}
		if f.Re == "" && f.Kind == protocol.KindError {
			// A refusal of the whole connection (not allowed to connect,
			// too many connections) or of an unreadable frame.
			err = f.Err()
			if f.Code == protocol.CodeBadFrame {
				continue
			}
			break
		}
		c.mu.Lock()
		cl := c.calls[f.Re]
		if cl != nil && f.Kind != protocol.KindEvent {
			delete(c.calls, f.Re)
		}
		c.mu.Unlock()
		if cl == nil {
			continue
		}
		if f.Kind == protocol.KindEvent {
			if cl.events != nil {
				cl.events(&f)
			}
			continue
		}
		cl.reply <- &f
	}
	if err == nil || errors.Is(err, net.ErrClosed) {
		err = errors.New("connection to parley-keyd closed")
	}
	c.mu.Lock()
	c.closed = err
	calls := c.calls
	c.calls = map[string]*call{}
	c.mu.Unlock()
	close(c.done)
	for _, cl := range calls {
		close(cl.reply)
	}
}

// Do sends a request frame and waits for its final reply, passing EVENT
// replies to events as they come. An ERROR reply is returned as *protocol.Error.
func (c *Client) Do(ctx context.Context, f *protocol.Frame, events func(*protocol.Frame)) (*protocol.Frame, error) {
	c.mu.Lock()
	if c.closed != nil {
		err := c.closed
		c.mu.Unlock()
		return nil, err
	}
	c.next++
	f.ID = strconv.FormatUint(c.next, 10)
	cl := &call{events: events, reply: make(chan *protocol.Frame, 1)}
	c.calls[f.ID] = cl
	c.mu.Unlock()
	b, err := protocol.EncodeFrame(f)
	if err != nil {
		c.forget(f.ID)
		return nil, err
	}
	c.wmu.Lock()
	_, err = c.nc.Write(b)
	c.wmu.Unlock()
	if err != nil {
		c.forget(f.ID)
		// The daemon may have refused the connection and closed it before
		// we wrote: its ERROR frame is still waiting to be read.
		select {
		case <-c.done:
			c.mu.Lock()
			cerr := c.closed
			c.mu.Unlock()
			var e *protocol.Error
			if errors.As(cerr, &e) {
				return nil, e
			}
		case <-time.After(2 * time.Second):
		}
		return nil, fmt.Errorf("send to parley-keyd: %w", err)
	}
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
	case <-ctx.Done():
		c.forget(f.ID)
		return nil, ctx.Err()
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
	if err := json.Unmarshal(r.Data, &m); err != nil {
		return nil, fmt.Errorf("parley-keyd sent a malformed manifest: %w", err)
	}
	return &m, nil
}

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
		_ = json.Unmarshal(f.Data, &e)
		e.Message = f.Message
		fn(e)
	}
}

func holderKey(s crypto.Signer) (string, error) {
	pub, ok := s.Public().(ed25519.PublicKey)
	if !ok {
		return "", errors.New("the agent key is not Ed25519")
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
	if caveats == nil {
		caveats = []grant.Caveat{}
	}
	body, err := json.Marshal(protocol.GrantBody{Holder: key, Caveats: caveats})
	if err != nil {
		return nil, err
	}
	digest, err := protocol.GrantDigest(body)
	if err != nil {
		return nil, err
	}
	proof, err := grant.MakeProof(holder, principal, protocol.ProofVerbGrant, digest, time.Now().Unix())
	if err != nil {
		return nil, err
	}
	r, err := c.Do(ctx, &protocol.Frame{Verb: protocol.VerbGrant, Grant: body, Proof: &proof}, eventFunc(events))
	if err != nil {
		return nil, err
	}
	return decodeGrantResult(r)
}

func decodeGrantResult(r *protocol.Frame) (*protocol.GrantResult, error) {
	var res protocol.GrantResult
	if err := json.Unmarshal(r.Data, &res); err != nil || res.Token == "" {
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
	if err := json.Unmarshal(r.Data, &e); err != nil {
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
	if err := json.Unmarshal(r.Data, &out); err != nil {
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

// Watch streams pending requests and their ends until ctx ends or the
// connection closes. pending receives each waiting request; ended each
// request that finished, with its outcome.
func (c *Client) Watch(ctx context.Context, pending func(protocol.PendingView), ended func(id, outcome string)) error {
	_, err := c.Do(ctx, &protocol.Frame{Verb: protocol.VerbWatch}, func(f *protocol.Frame) {
		switch f.Message {
		case "pending":
			var v protocol.PendingView
			if json.Unmarshal(f.Data, &v) == nil && pending != nil {
				pending(v)
			}
		case "ended":
			var e struct{ ID, Outcome string }
			if json.Unmarshal(f.Data, &e) == nil && ended != nil {
				ended(e.ID, e.Outcome)
			}
		}
	})
	return err
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
