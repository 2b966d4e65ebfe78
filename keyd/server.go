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
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/keyd/peercred"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/policies"
	"golang.org/x/sync/semaphore"
)

// serverOptions configure a Server; New fills them from Options.
type serverOptions struct {
	Config   *Config
	Policy   *policies.Policy
	Signer   crypto.Signer
	Audit    AuditSink
	Logf     func(format string, args ...any)
	Now      func() time.Time
	Identify func(*net.UnixConn) (peercred.Identity, error)
	verify   func(pub ed25519.PublicKey, msg, sig []byte) bool
}

// Server answers the daemon's socket: it accepts connections, learns each
// peer's identity from the kernel, and runs every request through one
// pipeline: read → validate → decide → (approve) → sign → audit → reply.
type Server struct {
	cfg       atomic.Pointer[Config]
	policy    atomic.Pointer[policies.Policy]
	signer    crypto.Signer
	pub       ed25519.PublicKey // the principal key, as signer had it at start
	verify    func(pub ed25519.PublicKey, msg, sig []byte) bool
	principal string
	audit     AuditSink
	logf      func(string, ...any)
	now       func() time.Time
	peerOf    func(*net.UnixConn) (peercred.Identity, error)
	queue     *queue
	limiter   *policies.Limiter
	lock      lockState
	previous  []protocol.PreviousKey
	// remembered holds the remembered approvals (remembered.go).
	remembered *rememberStore

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[*conn]struct{}
	closing   bool
	wg        sync.WaitGroup
	nconns    atomic.Int64
	// issuing counts the GRANT and CONSENT requests in the pipeline,
	// less those waiting for a human (sigcheck.go).
	issuing atomic.Int64
	// Requests a connection's reader ran itself, and how many of those
	// had reading move away (runInline); for tests.
	inlineRuns, readMoves atomic.Int64

	slots    share         // connection slots (connLimits)
	frames   share         // buffered frame bytes (frameLimits)
	identify chan struct{} // bounds the identities read at once

	auditReads auditReaders // AUDIT requests in progress, per uid
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
		signer:     o.Signer,
		pub:        append(ed25519.PublicKey(nil), pub...),
		principal:  grant.FormatPublicKey(pub),
		audit:      o.Audit,
		logf:       o.Logf,
		now:        o.Now,
		peerOf:     o.Identify,
		queue:      newQueue(),
		remembered: newRememberStore(),
		limiter:    policies.NewLimiter(),
		listeners:  map[net.Listener]struct{}{},
		conns:      map[*conn]struct{}{},
		identify:   make(chan struct{}, maxIdentifying),
	}
	if s.logf == nil {
		s.logf = func(string, ...any) {}
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.peerOf == nil {
		s.peerOf = peercred.Get
	}
	if s.verify = o.verify; s.verify == nil {
		s.verify = ed25519.Verify
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
		s.queue.redecide(pol)
		s.reloadRemembered(pol)
	}
}

// Subscribe registers a human channel for pending-request news.
func (s *Server) Subscribe(n Notifier) (cancel func()) { return s.queue.subscribe(n) }

// Pending lists the waiting requests.
func (s *Server) Pending() []protocol.PendingView { return s.queue.list() }

// Serve accepts connections on ln until ln is closed or Shutdown is called.
// ln is closed when Serve returns (a Unix socket's file is removed with it).
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		// Shutdown came before Serve could register ln (a SIGTERM right
		// after start): it closed the listeners it knew, not this one.
		ln.Close()
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
			c.stopHandlers()
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

// maxIdentifying bounds the connections whose identity is being read at
// once. Reading it blocks an OS thread (/proc, the user database), so a
// flood of connections would otherwise make the runtime start a thread for
// each, past the unit's TasksMax.
const maxIdentifying = 4

type conn struct {
	s        *Server
	nc       *net.UnixConn
	id       peercred.Identity
	agent    bool // the slot and the frame bytes count as an agent's
	ctx      context.Context
	cancel   context.CancelFunc
	wmu      sync.Mutex
	handlers sync.WaitGroup
	// hmu orders the reader's handlers.Add against Shutdown's Wait: once
	// hstopped is set no handler starts, so Wait sees every one.
	hmu      sync.Mutex
	hstopped bool
	sem      chan struct{}
	bytes    *semaphore.Weighted
	// Frame bytes of the frame being read: own from the connection's
	// allowance, shared from s.frames. Read loop only.
	held frameHold
	// free is what is left of the connection's allowance.
	free     atomic.Int64
	watching atomic.Bool
	work     chan job // to a handler waiting for the next request
	idsMu    sync.Mutex
	ids      map[string]bool

	// Reading the connection's frames: rs is its state, owned by the one
	// goroutine reading at a time; inline says whether the reader is
	// running a request itself (inlineRunning) and whether reading has
	// moved away from it (inlineMoved); mover moves it, when it fires
	// while a request runs.
	rs     readState
	inline atomic.Int32
	mover  *time.Timer
}

func (s *Server) serveConn(nc *net.UnixConn) {
	s.nconns.Add(1)
	// Once the connection is served, its end is the business of the
	// goroutine that ends reading it (conn.read).
	served := false
	defer func() {
		if !served {
			nc.Close()
			s.nconns.Add(-1)
		}
	}()

	// The caller's identity comes from the kernel (SO_PEERCRED), read once,
	// before any byte of the request: nothing the client sends can change it.
	s.identify <- struct{}{}
	id, err := s.peerOf(nc)
	<-s.identify
	if err != nil {
		s.logf("peer credentials: %v", err)
		s.writeRefusal(nc, &protocol.Error{Code: protocol.CodeInternal, Message: "could not read the peer's credentials"})
		return
	}
	cfg := s.cfg.Load()
	roles := cfg.roles(id)
	if !roles.Agent && !roles.Approver {
		// A caller the configuration does not admit sends no request and
		// gets no audit record; it leaves a line, which the logger's
		// flood control folds when it repeats.
		s.logf("refused a connection from user %s (uid %d, pid %d): not named in access", safe(id.User), id.UID, id.PID)
		s.writeRefusal(nc, &protocol.Error{Code: protocol.CodeUnauthorized,
			Message: fmt.Sprintf("user %s (uid %d) may not use parley-keyd", id.User, id.UID),
			Fix:     "an admin adds the user to access.agent_users or access.approver_users in the daemon's configuration"})
		return
	}
	// Slots by uid and role, decided here before a byte is read: agents
	// cannot take the approvers' slots, nor a few agent users all of the
	// agents' (share). The role at accept decides for the connection's life.
	limits := connLimits(cfg)
	if !s.slots.take(limits, id.UID, roles.Agent, 1) {
		msg := "the daemon has too many open connections"
		if mine, _ := s.slots.held(id.UID); mine >= limits.PerUser {
			msg = fmt.Sprintf("user %s has too many open connections", id.User)
		}
		s.logf("refused a connection from user %s (uid %d, pid %d): %s", safe(id.User), id.UID, id.PID, msg)
		s.writeRefusal(nc, &protocol.Error{Code: protocol.CodeLimit, Message: msg, Retry: 1})
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &conn{s: s, nc: nc, id: id, agent: roles.Agent, ctx: ctx, cancel: cancel,
		sem: make(chan struct{}, maxInflight), bytes: semaphore.NewWeighted(maxInflightBytes), ids: map[string]bool{},
		work: make(chan job)}
	c.free.Store(connAllowance)
	c.mover = time.AfterFunc(time.Hour, c.moveReading)
	c.mover.Stop()
	c.rs = readState{clock: &frameClock{nc: nc}, timeout: cfg.FrameTimeout.Duration}
	c.rs.fr = protocol.NewFrameReader(c.rs.clock)
	c.rs.fr.Hold = c.hold
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		cancel()
		s.slots.give(id.UID, roles.Agent, 1)
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	served = true
	c.read()
}

// read reads and runs the connection's frames. If reading moves to another
// goroutine meanwhile, read returns; the goroutine that ends reading ends
// the connection.
func (c *conn) read() {
	if c.readLoop() {
		return
	}
	c.endReading()
	c.finish()
}

// finish ends the connection once its client is gone and reading has
// ended (which withdrew what it was waiting for): it waits for its
// handlers, then gives back what it holds of the daemon.
func (c *conn) finish() {
	c.handlers.Wait()
	c.mover.Stop()
	c.s.mu.Lock()
	delete(c.s.conns, c)
	c.s.mu.Unlock()
	c.nc.Close()
	c.s.slots.give(c.id.UID, c.agent, 1)
	c.s.nconns.Add(-1)
}

// readState is what reading a connection's frames keeps between frames.
type readState struct {
	clock   *frameClock
	fr      *protocol.FrameReader
	timeout time.Duration
	// unclaimed is what the last frame holds while no handler has taken
	// it over: given back before the next frame is read.
	unclaimed frameHold
}

// endReading ends reading for good: what the last frame held is given back,
// and whatever the client was waiting for is withdrawn.
func (c *conn) endReading() {
	c.release(c.rs.unclaimed)
	c.rs.unclaimed = frameHold{}
	c.cancel()
}

// A connection's reader runs a request itself, on its own goroutine, when
// it is the only one the connection has in flight and no other frame is
// waiting behind it: a client that sends one request at a time (most) then
// costs no hand-off to another goroutine, which on a 2-core machine cost
// the daemon a quarter of its CPU per grant in sequence (docs/performance.md).
// While it runs the request nobody reads the connection; a request that
// takes longer than inlineFor (one that waits for a human, for a slow disk
// or key service) gets reading moved to a new goroutine, so that the
// client's next frames, and its leaving, are seen as before.
const inlineFor = 10 * time.Millisecond

// The states of conn.inline; a new connection's is the zero value.
const (
	inlineIdle    = iota // the reader reads
	inlineRunning        // the reader runs a request
	inlineMoved          // reading moved to another goroutine while it did
)

// runInline runs j on the reader's goroutine and reports whether reading
// moved away meanwhile; then the caller must not read any more.
// The caller has counted it with startHandler.
func (c *conn) runInline(j job) (moved bool) {
	c.s.inlineRuns.Add(1)
	c.inline.Store(inlineRunning)
	c.mover.Reset(inlineFor)
	c.handle(j)
	c.handlers.Done()
	if c.inline.CompareAndSwap(inlineRunning, inlineIdle) {
		c.mover.Stop()
		return false
	}
	return true
}

// moveReading starts a goroutine that reads on, if the reader is still
// running a request. (It may fire late, for an earlier request: the state
// says whether any request is running now, and reading moves only then.)
func (c *conn) moveReading() {
	if c.inline.CompareAndSwap(inlineRunning, inlineMoved) {
		c.s.readMoves.Add(1)
		// The goroutine reading until now is still running its request,
		// and counts in s.wg until it returns: the count never drops to
		// zero between the two.
		c.s.wg.Add(1)
		go func() {
			defer c.s.wg.Done()
			c.read()
		}()
	}
}

// errFrameBudget is a frame dropped because the daemon holds as many frame
// bytes as it may (frameLimits).
var errFrameBudget = errors.New("frame budget exhausted")

// connAllowance is what each connection may hold of frame bytes without
// drawing on the shared budget: a connection that sends one small request
// at a time is never refused for frames that other connections hold. Slots
// bound what the allowances add up to (4096 × 4 KiB = 16 MiB).
const connAllowance = 4 << 10

// frameHold is what one frame holds: from the connection's allowance, and
// from the daemon's frame budget.
type frameHold struct{ own, shared int64 }

// hold counts n more bytes of the frame being read: against the
// connection's allowance while it lasts, then against the daemon's frame
// budget.
func (c *conn) hold(n int) error {
	own := min(int64(n), c.free.Load()) // only the read loop takes from free
	if shared := int64(n) - own; shared > 0 {
		if !c.s.frames.take(frameLimits, c.id.UID, c.agent, shared) {
			return errFrameBudget
		}
		c.held.shared += shared
	}
	c.free.Add(-own)
	c.held.own += own
	return nil
}

// release gives back what a frame held.
func (c *conn) release(h frameHold) {
	c.free.Add(h.own)
	c.s.frames.give(c.id.UID, c.agent, h.shared)
}

// budgetRefusal says why a frame did not fit in the budget.
func (c *conn) budgetRefusal() *protocol.Error {
	msg := "the daemon holds as many unanswered frames as it may; the frame was dropped"
	if mine, _ := c.s.frames.held(c.id.UID); mine+protocol.MaxFrame > frameLimits.PerUser {
		msg = fmt.Sprintf("user %s has as many unanswered frames as it may; the frame was dropped", c.id.User)
	}
	return &protocol.Error{Code: protocol.CodeLimit, Message: msg, Fix: "send it again once earlier requests are answered", Retry: 1}
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

// frameClock reads from a connection. Armed, it lets its reads wait for
// the client at most a given time in all, and then fails them with
// os.ErrDeadlineExceeded. It counts only the time spent waiting in reads,
// not the time the daemon takes between them: a daemon slowed down by load
// does not cut off a client that sends its frame at once.
type frameClock struct {
	nc    *net.UnixConn
	armed bool
	left  time.Duration
}

func (k *frameClock) Read(p []byte) (int, error) {
	if !k.armed {
		return k.nc.Read(p)
	}
	if k.left <= 0 {
		return 0, os.ErrDeadlineExceeded
	}
	start := time.Now()
	k.nc.SetReadDeadline(start.Add(k.left))
	n, err := k.nc.Read(p)
	k.left -= time.Since(start)
	return n, err
}

// arm starts a frame's allowance of waiting; disarm ends it.
func (k *frameClock) arm(d time.Duration) { k.armed, k.left = true, d }
func (k *frameClock) disarm() {
	k.armed = false
	k.nc.SetReadDeadline(time.Time{})
}

// readLoop reads and runs the connection's frames until the connection
// ends, or until reading moves to another goroutine (it returns true).
func (c *conn) readLoop() (moved bool) {
	rs := &c.rs
	clock, fr, timeout := rs.clock, rs.fr, rs.timeout
	for {
		c.release(rs.unclaimed)
		rs.unclaimed = frameHold{}
		whole, err := fr.Wait()
		if !whole && err == nil {
			// Attack: a client that starts a frame and never finishes it
			// (slow loris), or sends it a byte at a time, holding its
			// bytes and its slot. Once a frame's first byte has arrived,
			// the daemon waits at most the frame timeout, in all, for the
			// rest of it.
			clock.arm(timeout)
		}
		var line []byte
		if err == nil {
			line, err = fr.Next()
			if !whole {
				clock.disarm()
			}
		}
		rs.unclaimed, c.held = c.held, frameHold{}
		switch {
		case errors.Is(err, protocol.ErrFrameTooLarge):
			c.refuse("", "", &protocol.Error{Code: protocol.CodeBadFrame, Message: "the frame is larger than 1 MiB and was skipped"})
			continue
		case errors.Is(err, errFrameBudget):
			c.refuse("", "", c.budgetRefusal())
			continue
		case errors.Is(err, os.ErrDeadlineExceeded):
			c.s.logf("pid %d did not send the rest of a frame within %s; closing its connection", c.id.PID, timeout)
			c.refuse("", "", &protocol.Error{Code: protocol.CodeLimit,
				Message: fmt.Sprintf("the rest of the frame did not arrive within %s; the connection is closed", timeout)})
			return false
		case err != nil:
			// A client that leaves, with its reply still unread (a reset)
			// or not, is no news; anything else is logged.
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, syscall.ECONNRESET) && c.ctx.Err() == nil {
				c.s.logf("read from pid %d: %v", c.id.PID, err)
			}
			return false
		}
		if len(line) == 0 {
			continue
		}
		// One strict reading (property 9): names matched exactly,
		// duplicate names refused at any depth, valid UTF-8. Under
		// encoding/json's rules a frame could carry "verb" and "Verb" and
		// be one request to a reader that keeps the first and another to
		// one that keeps the last.
		f := new(protocol.Frame)
		if err := grant.DecodeStrict(line, f); err != nil {
			c.refuse("", "", &protocol.Error{Code: protocol.CodeBadFrame, Message: "the frame is not one strict JSON object: " + jsonErr(err)})
			continue
		}
		if f.ID == "" || len(f.ID) > 128 {
			c.refuse("", f.Verb, &protocol.Error{Code: protocol.CodeBadFrame, Message: "the frame needs an \"id\" string of at most 128 bytes"})
			continue
		}
		if f.Parley != protocol.Version {
			c.refuse(f.ID, f.Verb, &protocol.Error{Code: protocol.CodeBadFrame, Message: fmt.Sprintf("the frame must carry \"parley\": %d", protocol.Version)})
			continue
		}
		v, ok := lookupVerb(f.Verb)
		if !ok {
			c.refuse(f.ID, f.Verb, unknownVerb(f.Verb))
			continue
		}
		if !c.claimID(f.ID) {
			c.refuse(f.ID, f.Verb, &protocol.Error{Code: protocol.CodeBadFrame, Message: fmt.Sprintf("id %q is already in use on this connection", f.ID)})
			continue
		}
		if f.Verb == protocol.VerbWatch && !c.watching.CompareAndSwap(false, true) {
			c.releaseID(f.ID)
			c.refuse(f.ID, f.Verb, &protocol.Error{Code: protocol.CodeLimit, Message: "this connection is already watching"})
			continue
		}
		select {
		case c.sem <- struct{}{}:
		default:
			c.releaseID(f.ID)
			if f.Verb == protocol.VerbWatch {
				c.watching.Store(false)
			}
			c.refuse(f.ID, f.Verb, &protocol.Error{Code: protocol.CodeLimit, Message: "too many requests in flight on this connection", Retry: 1})
			continue
		}
		size := int64(len(line))
		if err := c.bytes.Acquire(c.ctx, size); err != nil {
			<-c.sem
			c.releaseID(f.ID)
			return false
		}
		// The handler holds the frame's bytes in the budget until it has
		// answered.
		j := job{f: f, held: rs.unclaimed, size: size}
		rs.unclaimed = frameHold{}
		if len(c.sem) == 1 && fr.Buffered() == 0 && v.inline {
			if !c.startHandler() {
				c.drop(j)
				return false
			}
			if c.runInline(j) {
				return true
			}
			continue
		}
		select {
		case c.work <- j:
			// A handler of this connection that finished its request
			// takes the next one, with the stack it grew for the last.
		default:
			if !c.startHandler() {
				c.drop(j)
				return false
			}
			go c.worker(j)
		}
	}
}

// startHandler counts a handler about to run j and reports true, unless
// the daemon is shutting down and has stopped the connection's handlers
// (stopHandlers): then nothing may start, as Shutdown's Wait would not see
// it.
func (c *conn) startHandler() bool {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	if c.hstopped {
		return false
	}
	c.handlers.Add(1)
	return true
}

// stopHandlers lets no new handler start and waits for those running.
func (c *conn) stopHandlers() {
	c.hmu.Lock()
	c.hstopped = true
	c.hmu.Unlock()
	c.handlers.Wait()
}

// drop gives back what j holds without running it: its connection is
// closing with the daemon.
func (c *conn) drop(j job) {
	c.leaveFlight(j.f)
	c.bytes.Release(j.size)
	c.release(j.held)
}

// leaveFlight ends f's time in flight: its id is free again, its slot
// given back, and a WATCH no longer counts as the connection's watch.
func (c *conn) leaveFlight(f *protocol.Frame) {
	if f.Verb == protocol.VerbWatch {
		c.watching.Store(false)
	}
	c.releaseID(f.ID)
	<-c.sem
}

// job is one request a handler runs, with what its frame holds. It points
// to the frame read rather than holding a copy: a copy moved to the heap
// in handle, where the deferred functions keep it, and so cost each
// request a second frame's allocation (docs/performance.md).
type job struct {
	f    *protocol.Frame
	held frameHold
	size int64
}

// spareFor is how long a handler that finished its request waits for the
// connection's next one before it ends. A goroutine that runs a request
// grows its stack for the Ed25519 work, which costs a grant about as much
// as its JSON did (docs/performance.md); a handler kept for the next
// request keeps its stack. An idle connection keeps none after this.
const spareFor = 50 * time.Millisecond

// worker runs j, then the connection's next requests for as long as they
// come within spareFor of each other.
func (c *conn) worker(j job) {
	defer c.handlers.Done()
	var idle *time.Timer
	for {
		c.handle(j)
		if idle == nil {
			idle = time.NewTimer(spareFor)
			defer idle.Stop()
		} else {
			idle.Reset(spareFor)
		}
		select {
		case j = <-c.work:
		case <-idle.C:
			return
		case <-c.ctx.Done():
			return
		}
	}
}

// handle runs one request and sends its final reply.
func (c *conn) handle(j job) {
	f := j.f
	defer c.release(j.held)
	defer c.bytes.Release(j.size)
	// The request stops being in flight, and its id is free again,
	// before its final reply goes out: a client may send the next
	// request, with the same id, as soon as it has read the reply.
	done := false
	settle := func() {
		if !done {
			done = true
			c.leaveFlight(f)
		}
	}
	defer settle()
	defer func() {
		// The daemon never crashes on input: a handler bug
		// answers "internal" and the connection lives on.
		if r := recover(); r != nil {
			c.s.logf("panic in %s: %v", f.Verb, r)
			settle()
			c.send(errorFrame(f.ID, &protocol.Error{Code: protocol.CodeInternal, Message: "the daemon failed to handle the request"}))
		}
	}()
	events := func(message string, data any) { c.event(f.ID, message, data) }
	reply, err := c.s.Handle(c.ctx, c.caller(), f, events)
	if err == errWatchBehind {
		// A watcher that stopped reading is cut off: closing the
		// socket frees what it holds at once.
		c.cancel()
		c.nc.Close()
		return
	}
	if err != nil {
		var e *protocol.Error
		if !errors.As(err, &e) {
			e = &protocol.Error{Code: protocol.CodeInternal, Message: "the daemon failed to handle the request"}
		}
		reply = errorFrame(f.ID, e)
	}
	if reply != nil {
		reply.Re = f.ID
		if reply.ID == "" {
			reply.ID = "r" + f.ID
		}
		settle()
		c.send(reply)
	}
}

// caller is the connection's caller with the roles the configuration in
// force now gives it, so that a reload that takes a role away applies to
// connections already open.
func (c *conn) caller() Caller {
	return Caller{Identity: c.id, Roles: c.s.cfg.Load().roles(c.id)}
}

// refuse answers a frame that never became a request (it could not be read,
// or the connection may not take it now), and records the refusal: every
// frame from an accepted caller leaves a record (property 11), folded when
// it repeats, and counts against the caller's rate (property 14), past
// which its record is cut to what the caller does not choose.
func (c *conn) refuse(re, verb string, e *protocol.Error) {
	c.send(errorFrame(re, e))
	caller := c.caller()
	rec := audit.Record{Kind: refusalKind(verb, e.Code), RequestID: newRequestID(), Verb: verb,
		Caller: caller.audit(), Decision: string(e.Code), Message: e.Message}
	if over, _, who := c.s.overRate(caller, c.s.policy.Load(), ""); over {
		c.s.auditOver(rec, who)
		return
	}
	c.s.auditFolded(rec)
}

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

// sendBuffers holds the buffers replies are written through, shared by
// all connections: a reply's bytes are done with once Write returns, and
// a buffer allocated for every reply was a tenth of what a grant
// allocated (docs/performance.md). A buffer grown past maxSendBuffer, by
// an AUDIT reply say, is left to the garbage collector.
var sendBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 2<<10); return &b }}

const maxSendBuffer = 64 << 10

// send writes one frame. Writes are serialized; a client that stops reading
// is cut off after a deadline rather than blocking its handlers forever.
func (c *conn) send(f *protocol.Frame) bool {
	bp := sendBuffers.Get().(*[]byte)
	b, err := protocol.AppendFrame((*bp)[:0], f)
	if err != nil {
		b, _ = protocol.AppendFrame((*bp)[:0], errorFrame(f.Re, &protocol.Error{Code: protocol.CodeInternal, Message: "the reply was too large to send"}))
	}
	defer func() {
		if cap(b) <= maxSendBuffer {
			*bp = b[:0]
			sendBuffers.Put(bp)
		}
	}()
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
