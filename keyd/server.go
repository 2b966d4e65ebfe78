package keyd

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/keyd/peercred"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/policies"
	"golang.org/x/sync/semaphore"
)

// AuditSink is where the daemon records every decision. Append returns only
// once the record is durable; the daemon releases a grant only after that.
type AuditSink interface {
	Append(rec audit.Record) (uint64, error)
}

// serverOptions configure a Server; New fills them from Options.
type serverOptions struct {
	Config   *Config
	Policy   *policies.Policy
	Signer   crypto.Signer
	Audit    AuditSink
	Logf     func(format string, args ...any)
	Now      func() time.Time
	Identify func(*net.UnixConn) (peercred.Identity, error)
}

// Server is the daemon: it accepts connections on a Unix socket, learns each
// peer's identity from the kernel, and runs every request through one
// pipeline: read → validate → decide → (approve) → sign → audit → reply.
type Server struct {
	cfg       atomic.Pointer[Config]
	policy    atomic.Pointer[policies.Policy]
	signer    crypto.Signer
	principal string
	audit     AuditSink
	logf      func(string, ...any)
	now       func() time.Time
	identify  func(*net.UnixConn) (peercred.Identity, error)
	queue     *queue
	limiter   *policies.Limiter
	lock      lockState
	previous  []protocol.PreviousKey

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	closing   bool
	perUID    map[uint32]int
	wg        sync.WaitGroup
	nconns    atomic.Int64
}

// newServer returns a server ready to Serve. It refuses a missing signer,
// policy or audit sink: there is no allow-all default.
func newServer(o serverOptions) (*Server, error) {
	if o.Config == nil || o.Policy == nil || o.Signer == nil || o.Audit == nil {
		return nil, errors.New("keyd: server needs a config, a policy, a signer and an audit log")
	}
	pub, ok := o.Signer.Public().(ed25519.PublicKey)
	if !ok {
		return nil, errors.New("keyd: signer is not an Ed25519 key")
	}
	s := &Server{
		signer:    o.Signer,
		principal: grant.FormatPublicKey(pub),
		audit:     o.Audit,
		logf:      o.Logf,
		now:       o.Now,
		identify:  o.Identify,
		queue:     newQueue(),
		limiter:   policies.NewLimiter(),
		listeners: map[net.Listener]struct{}{},
		conns:     map[*conn]struct{}{},
		perUID:    map[uint32]int{},
	}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.identify == nil {
		s.identify = peercred.Get
	}
	s.cfg.Store(o.Config)
	s.policy.Store(o.Policy)
	return s, nil
}

// Principal returns the principal's public key as "ed25519:…".
func (s *Server) Principal() string { return s.principal }

// swap puts a new configuration and policy in force. Callers validate both
// first; a nil argument keeps the current one.
func (s *Server) swap(cfg *Config, pol *policies.Policy) {
	if cfg != nil {
		s.cfg.Store(cfg)
	}
	if pol != nil {
		s.policy.Store(pol)
	}
}

// Subscribe registers a human channel for pending-request news.
func (s *Server) Subscribe(n Notifier) (cancel func()) { return s.queue.subscribe(n) }

// Decide approves or denies a pending request for the paired phone named
// device: the phone page, which has authenticated the device and checked
// that the request came from another machine, calls it. The approval is
// recorded as strong, on the phone channel.
func (s *Server) Decide(id string, approve bool, match, device string) error {
	return s.queue.decide(id, approve, match, Approval{Approver: "phone:" + device, Channel: "phone"})
}

// Pending lists the waiting requests.
func (s *Server) Pending() []protocol.PendingView { return s.queue.list() }

// Serve accepts connections on ln until ln is closed or Shutdown is called.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return errors.New("keyd: server is shutting down")
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, ln)
		s.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// EMFILE and friends: back off instead of spinning.
			if backoff == 0 {
				backoff = 5 * time.Millisecond
			} else if backoff < time.Second {
				backoff *= 2
			}
			s.logf("accept: %v; retrying in %v", err, backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		uc, ok := nc.(*net.UnixConn)
		if !ok {
			nc.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(uc)
		}()
	}
}

// Shutdown stops accepting, answers every waiting request with
// "unavailable", closes every connection and waits for handlers to finish or
// ctx to end.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	for ln := range s.listeners {
		ln.Close()
	}
	s.mu.Unlock()
	s.queue.drain(Approval{Code: protocol.CodeUnavailable, Reason: "the daemon is shutting down"})
	s.mu.Lock()
	for c := range s.conns {
		c.cancel()
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() {
		// Handlers that were answering finish their replies first; then
		// the connections close.
		s.mu.Lock()
		conns := make([]*conn, 0, len(s.conns))
		for c := range s.conns {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		for _, c := range conns {
			c.handlers.Wait()
			c.nc.Close()
		}
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// maxInflightBytes caps the frame bytes that the handlers of one connection
// hold at once. Attack: a client that pipelines 64 frames of 1 MiB and never
// reads its replies, so that every handler keeps its frame while its reply
// waits to be written. Past the cap the daemon stops reading that connection
// until its handlers finish.
const maxInflightBytes = 2 * protocol.MaxFrame

// maxInflight caps concurrent requests on one connection. Attack: a client
// pipelining thousands of frames to make the daemon hold thousands of
// goroutines. Beyond it, a request is answered with "limit" at once.
const maxInflight = 64

type conn struct {
	s        *Server
	nc       *net.UnixConn
	id       peercred.Identity
	ctx      context.Context
	cancel   context.CancelFunc
	wmu      sync.Mutex
	handlers sync.WaitGroup
	sem      chan struct{}
	bytes    *semaphore.Weighted
	watching atomic.Bool
	idsMu    sync.Mutex
	ids      map[string]bool
}

func (s *Server) serveConn(nc *net.UnixConn) {
	defer nc.Close()
	cfg := s.cfg.Load()
	if n := s.nconns.Add(1); n > int64(cfg.MaxConnections) {
		s.nconns.Add(-1)
		s.writeRefusal(nc, &protocol.Error{Code: protocol.CodeLimit, Message: "the daemon has too many open connections", Retry: 1})
		return
	}
	defer s.nconns.Add(-1)

	// The caller's identity comes from the kernel (SO_PEERCRED), read once,
	// before any byte of the request: nothing the client sends can change it.
	id, err := s.identify(nc)
	if err != nil {
		s.logf("peer credentials: %v", err)
		s.writeRefusal(nc, &protocol.Error{Code: protocol.CodeInternal, Message: "could not read the peer's credentials"})
		return
	}
	roles := cfg.roles(id)
	if !roles.Agent && !roles.Approver {
		s.writeRefusal(nc, &protocol.Error{Code: protocol.CodeUnauthorized,
			Message: fmt.Sprintf("user %s (uid %d) may not use parley-keyd", id.User, id.UID),
			Fix:     "an admin adds the user to access.agent_users or access.approver_users in the daemon's configuration"})
		return
	}
	// Attack: one agent user opening thousands of connections, so that
	// approvers can no longer connect. Each uid gets a share; the global
	// cap stays for everyone else.
	if !s.claimUID(id.UID, cfg.MaxConnectionsPerUser) {
		s.writeRefusal(nc, &protocol.Error{Code: protocol.CodeLimit, Message: fmt.Sprintf("user %s has too many open connections", id.User), Retry: 1})
		return
	}
	defer s.releaseUID(id.UID)
	ctx, cancel := context.WithCancel(context.Background())
	c := &conn{s: s, nc: nc, id: id, ctx: ctx, cancel: cancel,
		sem: make(chan struct{}, maxInflight), bytes: semaphore.NewWeighted(maxInflightBytes), ids: map[string]bool{}}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		cancel()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	defer func() {
		// The client is gone: withdraw whatever it was waiting for.
		cancel()
		c.handlers.Wait()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	c.readLoop()
}

func (s *Server) claimUID(uid uint32, max int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perUID[uid] >= max {
		return false
	}
	s.perUID[uid]++
	return true
}

func (s *Server) releaseUID(uid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perUID[uid]--; s.perUID[uid] <= 0 {
		delete(s.perUID, uid)
	}
}

// writeRefusal answers a connection that will not be served with one ERROR
// frame and nothing else.
func (s *Server) writeRefusal(nc net.Conn, e *protocol.Error) {
	b, err := protocol.EncodeFrame(errorFrame("", e))
	if err == nil {
		nc.SetWriteDeadline(time.Now().Add(time.Second))
		nc.Write(b)
	}
}

func errorFrame(re string, e *protocol.Error) *protocol.Frame {
	return &protocol.Frame{Kind: protocol.KindError, ID: "e" + re, Re: re, Code: e.Code, Message: e.Message, Fix: e.Fix, Retry: e.Retry, Rule: e.Rule}
}

func (c *conn) readLoop() {
	fr := protocol.NewFrameReader(c.nc)
	for {
		line, err := fr.Next()
		if errors.Is(err, protocol.ErrFrameTooLarge) {
			c.send(errorFrame("", &protocol.Error{Code: protocol.CodeBadFrame, Message: "the frame is larger than 1 MiB and was skipped"}))
			continue
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && c.ctx.Err() == nil {
				c.s.logf("read from pid %d: %v", c.id.PID, err)
			}
			return
		}
		if len(line) == 0 {
			continue
		}
		// One strict reading (property 9): names matched exactly,
		// duplicate names refused at any depth, valid UTF-8. Under
		// encoding/json's rules a frame could carry "verb" and "Verb" and
		// be one request to a reader that keeps the first and another to
		// one that keeps the last.
		var f protocol.Frame
		if err := grant.DecodeStrict(line, &f); err != nil {
			c.send(errorFrame("", &protocol.Error{Code: protocol.CodeBadFrame, Message: "the frame is not one strict JSON object: " + jsonErr(err)}))
			continue
		}
		if f.ID == "" || len(f.ID) > 128 {
			c.send(errorFrame("", &protocol.Error{Code: protocol.CodeBadFrame, Message: "the frame needs an \"id\" string of at most 128 bytes"}))
			continue
		}
		if f.Parley != protocol.Version {
			c.send(errorFrame(f.ID, &protocol.Error{Code: protocol.CodeBadFrame, Message: fmt.Sprintf("the frame must carry \"parley\": %d", protocol.Version)}))
			continue
		}
		h := c.s.handler(f.Verb)
		if h == nil {
			c.send(errorFrame(f.ID, &protocol.Error{Code: protocol.CodeBadFrame, Message: fmt.Sprintf("unknown verb %q", f.Verb),
				Fix: "send HELLO to list the verbs"}))
			continue
		}
		if !c.claimID(f.ID) {
			c.send(errorFrame(f.ID, &protocol.Error{Code: protocol.CodeBadFrame, Message: fmt.Sprintf("id %q is already in use on this connection", f.ID)}))
			continue
		}
		select {
		case c.sem <- struct{}{}:
		default:
			c.releaseID(f.ID)
			c.send(errorFrame(f.ID, &protocol.Error{Code: protocol.CodeLimit, Message: "too many requests in flight on this connection", Retry: 1}))
			continue
		}
		size := int64(len(line))
		if err := c.bytes.Acquire(c.ctx, size); err != nil {
			<-c.sem
			c.releaseID(f.ID)
			return
		}
		c.handlers.Add(1)
		go func(f protocol.Frame) {
			defer c.handlers.Done()
			defer c.bytes.Release(size)
			defer func() { <-c.sem }()
			defer c.releaseID(f.ID)
			defer func() {
				// The daemon never crashes on input: a handler bug
				// answers "internal" and the connection lives on.
				if r := recover(); r != nil {
					c.s.logf("panic in %s: %v", f.Verb, r)
					c.send(errorFrame(f.ID, &protocol.Error{Code: protocol.CodeInternal, Message: "the daemon failed to handle the request"}))
				}
			}()
			reply, err := h(c, &f)
			if err != nil {
				var e *protocol.Error
				if !errors.As(err, &e) {
					c.s.logf("%s from pid %d: %v", f.Verb, c.id.PID, err)
					e = &protocol.Error{Code: protocol.CodeInternal, Message: "the daemon failed to handle the request"}
				}
				reply = errorFrame(f.ID, e)
			}
			if reply != nil {
				reply.Re = f.ID
				if reply.ID == "" {
					reply.ID = "r" + f.ID
				}
				// The id is free again once its final reply is on its
				// way: a client that reuses it as soon as it reads the
				// reply must not be told it is still in use.
				c.releaseID(f.ID)
				c.send(reply)
			}
		}(f)
	}
}

// role returns the caller's roles under the configuration in force now, so
// that a reload that takes a role away applies to connections already open.
func (c *conn) role() Roles { return c.s.cfg.Load().roles(c.id) }

func (c *conn) claimID(id string) bool {
	c.idsMu.Lock()
	defer c.idsMu.Unlock()
	if c.ids[id] {
		return false
	}
	c.ids[id] = true
	return true
}

func (c *conn) releaseID(id string) {
	c.idsMu.Lock()
	delete(c.ids, id)
	c.idsMu.Unlock()
}

// send writes one frame. Writes are serialized; a client that stops reading
// is cut off after a deadline rather than blocking its handlers forever.
func (c *conn) send(f *protocol.Frame) bool {
	b, err := protocol.EncodeFrame(f)
	if err != nil {
		b, _ = protocol.EncodeFrame(errorFrame(f.Re, &protocol.Error{Code: protocol.CodeInternal, Message: "the reply was too large to send"}))
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.nc.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.nc.Write(b); err != nil {
		// A client that does not read its replies is cut off at once:
		// closing the socket makes every queued send fail fast instead
		// of each waiting out its own deadline while holding its frame.
		c.cancel()
		c.nc.Close()
		return false
	}
	return true
}

// event sends a non-final EVENT reply for request re.
func (c *conn) event(re, message string, data any) {
	raw, _ := json.Marshal(data)
	c.send(&protocol.Frame{Kind: protocol.KindEvent, ID: "v" + re, Re: re, Message: message, Data: raw})
}

// jsonErr is the message of a strict decoding error, which names the
// member at fault; grant bounds the names it quotes.
func jsonErr(err error) string {
	s := err.Error()
	if len(s) > 300 {
		i := 300
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s = s[:i] + "…"
	}
	return s
}

func shortErr(err error) string {
	s := err.Error()
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}
