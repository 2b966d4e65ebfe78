package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A request that waits for a human outlives the tool call that made it.
//
// MCP clients give up on a tool call after a time of their own: the
// TypeScript SDK's client after 60 s by default, and it does not send the
// progress token that would let progress notifications reset that timer.
// An approval may take the daemon's approval_timeout (120 s by default). So
// a tool call waits for the human at most callWaitMax, well inside such
// defaults, and then returns the request as waiting, with its id, match code
// and time left; parley_wait waits on for it, and parley_withdraw takes it
// back. The request itself lives on its own daemon connection in this
// process until the daemon decides it or it times out there, or until this
// server ends. Cancelling a tool call (which is also what a client's own
// timeout does) ends that call only, never the request: a client with a
// shorter timeout can still get a grant the human approves later.

// Wait bounds, in seconds, for the wait argument of the waiting tools.
const (
	// callWaitDefault is how long a call waits for a human by default:
	// 15 s less than the 60 s the TypeScript SDK's client gives a call.
	callWaitDefault = 45
	// callWaitMax is the most a caller may ask one call to wait.
	callWaitMax = 50
)

// maxKeptRequests bounds the requests this server remembers: waiting ones
// (the daemon caps those per caller too) and decided ones whose result no
// call has collected yet. The oldest decided one is dropped first.
const maxKeptRequests = 64

// progressEvery is how often a waiting call sends a progress notification
// (when the client asked for progress). A variable for tests.
var progressEvery = 15 * time.Second

// eventWait bounds how long a call waits for the daemon to say that a
// request waits for a human, beyond the call's own wait: the daemon says it
// at once, unless it is overloaded.
const eventWait = 10 * time.Second

// humanRequest is a grant or consent request sent to the daemon, decided by
// policy or waiting for a human.
type humanRequest struct {
	what     string // "Grant" or "Consent grant", for the result's text
	withdraw context.CancelFunc

	mu        sync.Mutex
	ev        *protocol.Event
	evc       chan struct{} // closed when ev is set
	done      chan struct{} // closed when res or err is set
	res       *protocol.GrantResult
	err       error
	decidedAt time.Time
}

func (h *humanRequest) event() *protocol.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ev
}

// requestID returns the daemon's id for the request, once it waits.
func (h *humanRequest) requestID() string {
	if e := h.event(); e != nil {
		return e.Request
	}
	return ""
}

// humanRequests are the requests this server sent that wait, or were
// decided and not yet returned to the client, by the daemon's request id.
type humanRequests struct {
	mu   sync.Mutex
	byID map[string]*humanRequest
}

// start sends a request with do on a connection of its own, which ends with
// the request. The request does not depend on any tool call's context: it
// ends when the daemon decides, when withdrawn, or when the server exits.
func (rs *humanRequests) start(what string, do func(ctx context.Context, events func(protocol.Event)) (*protocol.GrantResult, error)) *humanRequest {
	ctx, cancel := context.WithCancel(context.Background())
	h := &humanRequest{what: what, withdraw: cancel, evc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer cancel()
		res, err := do(ctx, func(e protocol.Event) { rs.waiting(h, e) })
		h.mu.Lock()
		h.res, h.err, h.decidedAt = res, err, time.Now()
		h.mu.Unlock()
		close(h.done)
	}()
	return h
}

// waiting records that the daemon put h before a human, under its id.
// It registers h under that id before it makes the id visible (h.ev): a
// call that sees the id returns it to the client, which may ask
// parley_wait for it at once.
func (rs *humanRequests) waiting(h *humanRequest, e protocol.Event) {
	h.mu.Lock()
	first := h.ev == nil
	if !first || e.Request == "" {
		h.ev = &e
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	rs.mu.Lock()
	if rs.byID == nil {
		rs.byID = map[string]*humanRequest{}
	}
	rs.byID[e.Request] = h
	rs.evictLocked()
	rs.mu.Unlock()
	h.mu.Lock()
	h.ev = &e
	h.mu.Unlock()
	infof("waiting for approval of %s; match code: %s", e.Request, e.Code)
	close(h.evc)
}

// evictLocked drops the oldest decided requests while there are too many.
func (rs *humanRequests) evictLocked() {
	for len(rs.byID) > maxKeptRequests {
		var oldest string
		var at time.Time
		for id, h := range rs.byID {
			select {
			case <-h.done:
				if oldest == "" || h.decidedAt.Before(at) {
					oldest, at = id, h.decidedAt
				}
			default:
			}
		}
		if oldest == "" {
			return
		}
		delete(rs.byID, oldest)
	}
}

func (rs *humanRequests) get(id string) *humanRequest {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.byID[id]
}

// forget drops h once its result went to the client.
func (rs *humanRequests) forget(h *humanRequest) {
	id := h.requestID()
	rs.mu.Lock()
	if rs.byID[id] == h {
		delete(rs.byID, id)
	}
	rs.mu.Unlock()
}

// waitArg checks a wait argument and returns it as a duration.
func waitArg(w *int) (time.Duration, error) {
	if w == nil {
		return callWaitDefault * time.Second, nil
	}
	if *w < 0 || *w > callWaitMax {
		return 0, &toolError{Code: string(protocol.CodeInvalidParams), Message: fmt.Sprintf("wait %d: give 0 to %d seconds", *w, callWaitMax),
			Fix: fmt.Sprintf("leave wait out for %d s; a call that must return sooner gives less", callWaitDefault)}
	}
	return time.Duration(*w) * time.Second, nil
}

// await waits up to wait for the daemon to decide h, telling the client
// about it, and returns the grant, the refusal, or h as still waiting.
func (t *mcpTools) await(ctx context.Context, req *mcp.CallToolRequest, h *humanRequest, wait time.Duration) (*mcp.CallToolResult, grantOutput, error) {
	returnBy := time.Now().Add(wait)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	n := &notifier{ctx: ctx, req: req, returnBy: returnBy}
	evc := h.evc
	late := false                // the call's wait is over; it waits only for the request's id
	var noEvent <-chan time.Time // how long it waits for that
	for {
		select {
		case <-h.done:
			t.reqs.forget(h)
			return decided(h)
		case <-evc:
			evc = nil
			n.send(h.event(), true)
			if late {
				return waitingResult(h)
			}
		case <-tick.C:
			n.send(h.event(), false)
		case <-timer.C:
			if h.event() != nil {
				return waitingResult(h)
			}
			// Not before a human yet (the daemon is slow, or the policy
			// is still deciding): there is no id to wait on with yet.
			late, noEvent = true, time.After(eventWait)
		case <-noEvent:
			h.withdraw()
			<-h.done
			return nil, grantOutput{}, &toolError{Code: string(protocol.CodeUnavailable),
				Message: "parley-keyd did not answer the request in time; it was withdrawn", Fix: "try again"}
		case <-ctx.Done():
			// The client cancelled the call, or gave up on it. The SDK
			// still sends this answer; a client that cancelled drops it.
			te := &toolError{Code: codeCancelled, Message: "the call was cancelled; the request was withdrawn"}
			if e := h.event(); e != nil {
				te.Message = "the call was cancelled; the request still waits for the human, and parley_wait picks up the decision"
				te.Request, te.Match = e.Request, e.Code
			} else {
				// The client cannot name a request it never saw: take
				// it back.
				h.withdraw()
			}
			return nil, grantOutput{}, te
		}
	}
}

// decided returns the daemon's decision on h as a tool result.
func decided(h *humanRequest) (*mcp.CallToolResult, grantOutput, error) {
	h.mu.Lock()
	res, err, ev := h.res, h.err, h.ev
	h.mu.Unlock()
	if err != nil {
		te := toToolError(err)
		if ev != nil {
			te.Request, te.Match = ev.Request, ev.Code
		}
		return nil, grantOutput{}, te
	}
	out := newGrantOutput(res, ev)
	text := out.text(h.what)
	if h.what == consentWhat {
		text += "\nRe-send the COMMIT with this token in grants and a COMMIT proof (target: the proposal hash)."
	}
	return textResult("%s", text), out, nil
}

// waitingResult returns h, which waits for a human, as a result that says
// how to go on.
func waitingResult(h *humanRequest) (*mcp.CallToolResult, grantOutput, error) {
	e := h.event()
	out := grantOutput{Status: statusWaiting, Request: e.Request, MatchCode: e.Code, Channels: e.Channels, Strong: e.Strong}
	left := ""
	if e.Expires > 0 {
		out.DecideBy = e.Expires
		out.DecideByAt = time.Unix(e.Expires, 0).UTC().Format(time.RFC3339)
		out.SecondsLeft = max(0, int(time.Until(time.Unix(e.Expires, 0)).Seconds()))
		left = fmt.Sprintf(" It times out in %s (at %s) unless the human decides.", spanWords(int64(out.SecondsLeft)), out.DecideByAt)
	}
	return textResult("Request %s waits for a human on %s, who must enter match code %s: show them this code.%s\n"+
		"Call parley_wait with {\"request\": %q} to wait for the decision (each call waits up to %d s), "+
		"or parley_withdraw to take the request back.",
		e.Request, strings.Join(e.Channels, " or "), e.Code, left, e.Request, callWaitDefault), out, nil
}

// notifier tells the client of one call about a request that waits for a
// human: as progress, when the client asked for progress, and once per call
// as a log message, which every client shows; the first time on stderr too.
type notifier struct {
	ctx      context.Context
	req      *mcp.CallToolRequest
	returnBy time.Time
	step     float64
	logged   bool
}

// send sends the state of request e, if it waits for a human yet. Every
// notification says the truth about time: when the request times out at the
// daemon, and when this call returns without a decision.
func (n *notifier) send(e *protocol.Event, first bool) {
	if e == nil || n.req == nil || n.req.Session == nil {
		return
	}
	n.step++
	msg := fmt.Sprintf("waiting for a human to approve request %s on %s; match code %s: show it to the human, who must enter the same code",
		e.Request, strings.Join(e.Channels, " or "), e.Code)
	if e.Expires > 0 {
		msg += fmt.Sprintf("; the request times out in %s", spanWords(max(1, int64(time.Until(time.Unix(e.Expires, 0)).Seconds()))))
	}
	if s := int64(time.Until(n.returnBy).Seconds()); s > 0 {
		msg += fmt.Sprintf("; this call returns within %s, then parley_wait waits on", spanWords(s))
	}
	// A client that stops reading must not stall the caller: each
	// notification gets a short deadline.
	ctx, cancel := context.WithTimeout(n.ctx, notifyTimeout)
	defer cancel()
	if tok := n.req.Params.GetProgressToken(); tok != nil {
		n.req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Message: msg, Progress: n.step})
	}
	if !n.logged || first {
		n.logged = true
		lctx, lcancel := n.logContext()
		defer lcancel()
		//lint:ignore SA1019 logging is the one channel every client shows without a progress token; it stays functional through the deprecation window
		n.req.Session.Log(lctx, &mcp.LoggingMessageParams{Level: "notice", Logger: "parley-keyd", Data: msg})
	}
}

// logContext is the context a log message goes out under, so that the
// session's Log honours the level the client asked for in either of the
// two ways the protocol has: on the request itself (its _meta, as clients
// of the 2026-07-28 protocol do), or once for the session with
// logging/setLevel (as the Go SDK's SetLoggingLevel does). The request's
// context carries the level of its _meta even when that is absent, which
// Log reads as "send nothing" and which would hide the session's level; a
// request that names no level is therefore logged under a context that
// carries no request values, with the same deadline and cancellation.
func (n *notifier) logContext() (context.Context, context.CancelFunc) {
	//lint:ignore SA1019 the level a request asks for its log messages, as above
	if lvl, _ := n.req.Params.GetMeta()[mcp.MetaKeyLogLevel].(string); lvl != "" {
		return context.WithTimeout(n.ctx, notifyTimeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), notifyTimeout)
	stop := context.AfterFunc(n.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// notifyTimeout bounds one progress or log notification to the MCP client.
const notifyTimeout = 2 * time.Second

var errNoRequest = errors.New("no such request")

// withdraw takes back a request that waits, and returns what became of it.
func (t *mcpTools) withdrawRequest(id string) (string, error) {
	h := t.reqs.get(id)
	if h == nil {
		return "", errNoRequest
	}
	h.withdraw()
	select {
	case <-h.done:
	case <-time.After(eventWait):
	}
	t.reqs.forget(h)
	h.mu.Lock()
	res, err := h.res, h.err
	h.mu.Unlock()
	switch {
	case res != nil:
		return fmt.Sprintf("request %s had been approved already (grant %s); this server dropped the grant", id, res.GrantID), nil
	case err != nil && !errors.Is(err, context.Canceled):
		return fmt.Sprintf("request %s had been decided already: %s", id, toToolError(err).Message), nil
	}
	return fmt.Sprintf("withdrew request %s: nobody can approve it any more", id), nil
}
