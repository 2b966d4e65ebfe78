package keyd

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// The approver's verbs: PENDING, APPROVE, DENY and WATCH. They go through
// Handle like every request, so each is audited, and the phone page decides
// through the same path as the socket (Decide).

func (s *Server) pending(r *request) (*protocol.Frame, error) {
	raw, err := json.Marshal(map[string]any{"pending": s.queue.list()})
	if err != nil {
		return nil, err
	}
	return &protocol.Frame{Kind: protocol.KindPending, Data: raw}, nil
}

// approvalChannel is the channel an approval from r counts as: the phone for
// a paired device, else the terminal, unless the desktop approver says it
// relays a notification click.
func approvalChannel(r *request) (string, error) {
	if r.caller.Device != "" {
		return "phone", nil
	}
	switch r.f.Channel {
	case "", "terminal":
		return "terminal", nil
	case "desktop":
		return "desktop", nil
	}
	return "", &protocol.Error{Code: protocol.CodeInvalidParams, Message: fmt.Sprintf("channel %q cannot approve over the socket", r.f.Channel)}
}

// decide runs APPROVE (approve true) and DENY.
func (s *Server) decide(r *request, approve bool) (*protocol.Frame, error) {
	r.rec.Target = r.f.Request
	if r.f.Request == "" {
		return nil, &protocol.Error{Code: protocol.CodeInvalidParams, Message: r.f.Verb + " needs \"request\""}
	}
	if approve && r.f.Match == "" {
		return nil, &protocol.Error{Code: protocol.CodeInvalidParams, Message: "APPROVE needs \"match\": the code shown where the agent asked"}
	}
	ch, err := approvalChannel(r)
	if err != nil {
		return nil, err
	}
	a := Approval{Approver: r.caller.name(), Channel: ch, Weak: r.caller.Roles.Weak}
	if a.Remember, err = rememberFrom(r.f); err != nil {
		return nil, err
	}
	if a.Remember > 0 {
		r.rec.Message = "remember " + r.f.Remember
	}
	if err := s.queue.decide(r.f.Request, approve, r.f.Match, a); err != nil {
		return nil, err
	}
	r.rec.Kind, r.rec.Decision = audit.KindDecide, "denied"
	if approve {
		r.rec.Decision = "approved"
	}
	return &protocol.Frame{Kind: protocol.KindOK}, nil
}

// Decide approves or denies a pending request for the paired phone named
// device: the phone page, which has authenticated the device and checked
// that the request came from another machine, calls it. It goes through the
// pipeline as an APPROVE or DENY from that device, on the phone channel, and
// is audited as one.
func (s *Server) Decide(id string, approve bool, match, device string) error {
	f := &protocol.Frame{Verb: protocol.VerbDeny, Request: id}
	if approve {
		f.Verb, f.Match = protocol.VerbApprove, match
	}
	_, err := s.Handle(context.Background(), phoneCaller(device), f, nil)
	return err
}

// DecideRemember approves a pending request for the paired phone named
// device, as Decide does, and has the approval remembered for remember
// (issue 24: "2h", one of the request's Remember choices).
func (s *Server) DecideRemember(id, match, device, remember string) error {
	f := &protocol.Frame{Verb: protocol.VerbApprove, Request: id, Match: match, Remember: remember}
	_, err := s.Handle(context.Background(), phoneCaller(device), f, nil)
	return err
}

// watchNotifier streams queue news to an approver as EVENTs. It never
// blocks the request that reports the news: events go into a buffer that
// the watch's own goroutine writes out. A watcher that falls that far
// behind is cut off. Attack: an approver connection that stops reading,
// which would otherwise stall every request for the write deadline.
type watchNotifier struct {
	events chan watchEvent
	lost   chan struct{}
	once   sync.Once
}

type watchEvent struct {
	message string
	data    any
}

const watchBuffer = 1024

func (w *watchNotifier) push(message string, data any) {
	select {
	case w.events <- watchEvent{message, data}:
	default:
		w.once.Do(func() { close(w.lost) })
	}
}

func (w *watchNotifier) Pending(v protocol.PendingView) { w.push("pending", v) }
func (w *watchNotifier) Ended(id, outcome, reason string) {
	w.push("ended", map[string]string{"id": id, "outcome": outcome, "reason": reason})
}

// errWatchBehind ends a WATCH whose approver stopped reading its events.
var errWatchBehind = &protocol.Error{Code: protocol.CodeLimit, Message: "the approver fell behind its WATCH feed"}

// watch streams every pending request and its end to an approver until the
// requester goes away: the desktop approver's feed. Its final reply comes
// only when the daemon shuts down.
func (s *Server) watch(r *request) (*protocol.Frame, error) {
	w := &watchNotifier{events: make(chan watchEvent, watchBuffer), lost: make(chan struct{})}
	cancel := s.queue.subscribe(w)
	defer cancel()
	// The audit log's signed checkpoints go to approvers too, who keep the
	// latest out of the daemon's reach: a log cut, rolled back or rewritten
	// later contradicts what they kept (docs/audit.md).
	var checkpoints <-chan *checkpoint.Checkpoint
	if feed, ok := s.audit.(checkpointFeed); ok {
		ch, stop := feed.Subscribe()
		defer stop()
		checkpoints = ch
		if cp := feed.LastCheckpoint(); cp != nil {
			r.event("checkpoint", cp)
		}
	}
	// Damage the scrub found: approvers see that issuance stopped, and why.
	var damage <-chan *audit.Damage
	if feed, ok := s.audit.(damageFeed); ok {
		ch, stop := feed.SubscribeDamage()
		defer stop()
		damage = ch
		if d := feed.Damage(); d != nil {
			r.event("audit-damage", damageView(d))
		}
	}
	for _, v := range s.queue.list() {
		w.Pending(v)
	}
	// Attack: a user whose approver role a reload took away keeping a
	// WATCH it opened before, and with it every waiting request. The role
	// is checked again, under the configuration in force, before each
	// event goes out (the first one included: a reload may have come
	// since the role was read).
	var cfg *Config
	stillApprover := func() bool {
		if r.caller.Device != "" {
			return true
		}
		if now := s.cfg.Load(); now != cfg {
			cfg = now
			if !cfg.roles(r.caller.Identity).Approver {
				return false
			}
		}
		return true
	}
	revoked := func() error {
		return &protocol.Error{Code: protocol.CodeForbidden,
			Message: fmt.Sprintf("%s is no longer an approver under the reloaded configuration; the WATCH ended", r.caller.phrase())}
	}
	for {
		select {
		case cp, ok := <-checkpoints:
			if !ok {
				checkpoints = nil
				continue
			}
			if !stillApprover() {
				return nil, revoked()
			}
			r.event("checkpoint", cp)
		case d := <-damage:
			if !stillApprover() {
				return nil, revoked()
			}
			r.event("audit-damage", damageView(d))
		case ev := <-w.events:
			if !stillApprover() {
				return nil, revoked()
			}
			r.event(ev.message, ev.data)
		case <-w.lost:
			s.logf("approver %s fell behind its WATCH feed; closing it", r.caller.name())
			return nil, errWatchBehind
		case <-r.ctx.Done():
			return &protocol.Frame{Kind: protocol.KindOK}, nil
		}
	}
}
