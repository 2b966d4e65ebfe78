package keyd

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base32"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/parley-keyd/parley-keyd/policies"
)

// Approval says who decided a pending request and through which channel.
type Approval struct {
	Approved bool
	Approver string        // user name and uid, or the paired device's name
	Channel  string        // "terminal", "desktop", "phone"
	Weak     bool          // the approver could have been the agent itself
	Code     protocol.Code // for a refusal: denied, timeout, unavailable
	Reason   string        // for a refusal: one sentence
	// Remember, for an approval, is how long the human has it
	// remembered (issue 24); 0 approves once.
	Remember time.Duration

	// issued carries, for an approval, how the request then ended: nil
	// when its grant was issued, else why not (a key service that did not
	// answer). The approver's decide waits for it, so that both sides hear
	// of a failure after the approval.
	issued chan error
}

// settle reports to the approver how an approved request ended. It is a
// no-op for an approval that nobody waits on.
func (a Approval) settle(err error) {
	if a.issued != nil {
		select {
		case a.issued <- err:
		default:
		}
	}
}

// issueWait bounds how long an approver's APPROVE waits to hear whether the
// grant was issued; signing has its own, shorter deadline.
const issueWait = 30 * time.Second

// notIssued is the approver's answer for an approved request that ended
// without a grant: the requester's refusal, said to the approver.
func notIssued(id string, err error) error {
	var e *protocol.Error
	if errors.As(err, &e) {
		return &protocol.Error{Code: e.Code, Message: fmt.Sprintf("request %s was approved, but no grant was issued: %s", id, e.Message),
			Fix: "the agent was told the same and may ask again", Retry: e.Retry}
	}
	return &protocol.Error{Code: protocol.CodeInternal, Message: fmt.Sprintf("request %s was approved, but no grant was issued", id)}
}

// Notifier is a human channel that wants to hear about pending requests: the
// desktop approver (over WATCH) and the phone page plug in here. Ended says
// how a request ended ("approved", or the code of its refusal) and, for a
// refusal, why in one sentence.
type Notifier interface {
	Pending(v protocol.PendingView)
	Ended(id, outcome, reason string)
}

type pendingItem struct {
	view  protocol.PendingView
	who   quotaKey
	code  string
	done  chan Approval // buffered 1; written once under queue.mu
	ended bool
	// pol is the policy that decided to ask, or the latest reloaded one
	// that decides the same; redecide tells whether another policy does
	// (nil) or how it differs. Both are guarded by queue.mu.
	pol      *policies.Policy
	redecide func(*policies.Policy) *protocol.Error
	mu       *sync.Mutex
}

// decidedBy returns the latest policy known to decide it as it was asked.
func (it *pendingItem) decidedBy() *policies.Policy {
	it.mu.Lock()
	defer it.mu.Unlock()
	return it.pol
}

// quotaKey is who a pending request counts against: an agent of the policy
// and the uid it matched. An agent that matches many users (any = true, a
// group) is many callers, each with the agent's pending limit.
type quotaKey struct {
	agent string
	uid   uint32
}

// queue holds requests waiting for a human. Every method is safe for
// concurrent use.
type queue struct {
	mu        sync.Mutex
	items     map[string]*pendingItem
	perCaller map[quotaKey]int
	notifiers []*notifierReg
	locked    bool // the daemon is locked: add refuses (lock.go)
}

type notifierReg struct{ n Notifier }

func newQueue() *queue {
	return &queue{items: map[string]*pendingItem{}, perCaller: map[quotaKey]int{}}
}

var idEncoding = base32.NewEncoding("abcdefghijkmnpqrstuvwxyz23456789").WithPadding(base32.NoPadding)

func newRequestID() string {
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return "r_" + idEncoding.EncodeToString(b[:])
}

// newMatchCode returns a two-digit code from 10 to 99 and two distinct decoys.
func newMatchCode() (code string, choices []string) {
	pick := func() string {
		n, err := rand.Int(rand.Reader, big.NewInt(90))
		if err != nil {
			panic(err)
		}
		return fmt.Sprint(10 + n.Int64())
	}
	code = pick()
	choices = []string{code}
	for len(choices) < 3 {
		if c := pick(); !slices.Contains(choices, c) {
			choices = append(choices, c)
		}
	}
	// Shuffle so that the real code's position says nothing.
	for i := len(choices) - 1; i > 0; i-- {
		j, _ := rand.Int(rand.Reader, big.NewInt(int64(i+1)))
		choices[i], choices[j.Int64()] = choices[j.Int64()], choices[i]
	}
	return code, choices
}

// codeWithdrawn ends a request whose requester disconnected. Nobody is left
// to receive it, so it appears only in the audit log, never on the wire.
const codeWithdrawn protocol.Code = "withdrawn"

// add enqueues v for agent, as matched for uid, unless that caller already
// has maxPending requests waiting. It returns the match code to show the
// requester.
//
// pol is the policy that decided to ask; redecide tells whether another
// policy decides the request the same way (see redecide).
func (q *queue) add(v protocol.PendingView, agent string, uid uint32, maxPending int, pol *policies.Policy, redecide func(*policies.Policy) *protocol.Error) (*pendingItem, error) {
	code, choices := newMatchCode()
	v.Choices = choices
	who := quotaKey{agent, uid}
	q.mu.Lock()
	if q.locked {
		// A request that passed the lock check just before the lock
		// must not wait for a human after the drain.
		q.mu.Unlock()
		return nil, &protocol.Error{Code: protocol.CodeLocked, Message: "parley-keyd was locked while the request was decided"}
	}
	// Attack: one agent flooding the human with approval requests, which
	// also buries the requests of others. Cap what each caller has waiting,
	// per uid: a user cannot use up the slots of another that the same
	// agent matches. A limit of 0 means that none may wait: fail closed,
	// never "unlimited".
	if q.perCaller[who] >= maxPending {
		q.mu.Unlock()
		return nil, &protocol.Error{Code: protocol.CodeLimit, Message: fmt.Sprintf("agent %q, as uid %d, already has %d requests waiting for approval", agent, uid, maxPending),
			Fix: "wait for the human to answer the waiting requests", Retry: 30}
	}
	it := &pendingItem{view: v, who: who, code: code, done: make(chan Approval, 1), pol: pol, redecide: redecide, mu: &q.mu}
	q.items[v.ID] = it
	q.perCaller[who]++
	ns := slices.Clone(q.notifiers)
	q.mu.Unlock()
	for _, n := range ns {
		n.n.Pending(v)
	}
	return it, nil
}

// endLocked removes id and delivers a. It reports false when the request had
// already ended, so each request is decided exactly once.
func (q *queue) endLocked(it *pendingItem, a Approval) bool {
	if it.ended {
		return false
	}
	it.ended = true
	delete(q.items, it.view.ID)
	if q.perCaller[it.who]--; q.perCaller[it.who] <= 0 {
		delete(q.perCaller, it.who)
	}
	it.done <- a
	return true
}

func outcomeWord(a Approval) string {
	if a.Approved {
		return "approved"
	}
	return string(a.Code)
}

// end finishes a request with a, telling the notifiers. It is a no-op for a
// request that already ended.
func (q *queue) end(it *pendingItem, a Approval) bool {
	q.mu.Lock()
	ok := q.endLocked(it, a)
	ns := slices.Clone(q.notifiers)
	q.mu.Unlock()
	if ok {
		for _, n := range ns {
			n.n.Ended(it.view.ID, outcomeWord(a), a.Reason)
		}
	}
	return ok
}

// wait blocks until it is decided, ctx ends (the requester withdrew or the
// daemon stops), or timeout passes. Every path ends the request.
func (q *queue) wait(ctx context.Context, it *pendingItem, timeout time.Duration) Approval {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case a := <-it.done:
		return a
	case <-t.C:
		q.end(it, Approval{Code: protocol.CodeTimeout, Reason: fmt.Sprintf("nobody approved the request within %s", timeout)})
	case <-ctx.Done():
		q.end(it, Approval{Code: codeWithdrawn, Reason: "the requester went away, which withdraws the request"})
	}
	// The request may have been decided in the same instant; whatever
	// end delivered first is the answer.
	return <-it.done
}

// decide approves or denies id on behalf of an approver. A wrong match code
// denies the request: a guess must not be retried until it hits.
func (q *queue) decide(id string, approve bool, match string, a Approval) error {
	q.mu.Lock()
	it, ok := q.items[id]
	if !ok {
		q.mu.Unlock()
		return &protocol.Error{Code: protocol.CodeNotFound, Message: fmt.Sprintf("no pending request %q", id), Fix: "list waiting requests with: parley-grant pending"}
	}
	// Denying is safe from any channel; approving only from one the
	// request allows.
	if approve && !slices.Contains(it.view.Channels, a.Channel) {
		q.mu.Unlock()
		return &protocol.Error{Code: protocol.CodeForbidden, Message: fmt.Sprintf("request %s may not be approved over the %s channel (allowed: %s)", id, a.Channel, strings.Join(it.view.Channels, ", ")),
			Fix: channelFix(it.view)}
	}
	if approve && it.view.Strong && a.Weak {
		q.mu.Unlock()
		return &protocol.Error{Code: protocol.CodeForbidden, Message: fmt.Sprintf("request %s needs a strong channel, and an approval from a user who may also act as an agent is weak", id),
			Fix: "approve it from a paired phone, or as a user that is not an agent"}
	}
	if approve && a.Remember > 0 {
		// Checked before the match code: a refused APPROVE approves
		// nothing and denies nothing, and tells nothing of the code.
		if err := checkRemember(it, a); err != nil {
			q.mu.Unlock()
			return err
		}
	}
	var err error
	var issued chan error
	if approve {
		if subtle.ConstantTimeCompare([]byte(match), []byte(it.code)) != 1 {
			approve = false
			a.Code, a.Reason = protocol.CodeDenied, "the approver entered a match code that does not match the requester's"
			err = &protocol.Error{Code: protocol.CodeDenied, Message: fmt.Sprintf("the match code does not match: request %s was denied", id),
				Fix: "compare the code shown where the agent asked; if it differed, someone else's request raced yours"}
		}
	} else {
		a.Code, a.Reason = protocol.CodeDenied, "the human denied the request"
	}
	a.Approved = approve
	if approve {
		issued = make(chan error, 1)
		a.issued = issued
	}
	ended := q.endLocked(it, a)
	ns := slices.Clone(q.notifiers)
	q.mu.Unlock()
	if ended {
		for _, n := range ns {
			n.n.Ended(id, outcomeWord(a), a.Reason)
		}
	}
	if ended && issued != nil {
		// The grant is signed now, after the approval: a key service that
		// is down at this moment is reported to the approver as well.
		t := time.NewTimer(issueWait)
		defer t.Stop()
		select {
		case ierr := <-issued:
			if ierr != nil {
				return notIssued(id, ierr)
			}
		case <-t.C:
		}
	}
	return err
}

// list returns the waiting requests, oldest first.
func (q *queue) list() []protocol.PendingView {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]protocol.PendingView, 0, len(q.items))
	for _, it := range q.items {
		out = append(out, it.view)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Created != out[j].Created {
			return out[i].Created < out[j].Created
		}
		return out[i].ID < out[j].ID
	})
	return out
}

func (q *queue) subscribe(n Notifier) (cancel func()) {
	reg := &notifierReg{n}
	q.mu.Lock()
	q.notifiers = append(q.notifiers, reg)
	q.mu.Unlock()
	return func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		for i, x := range q.notifiers {
			if x == reg {
				q.notifiers = slices.Delete(q.notifiers, i, i+1)
				return
			}
		}
	}
}

// setLocked makes add refuse new requests (true) or accept them again.
func (q *queue) setLocked(locked bool) {
	q.mu.Lock()
	q.locked = locked
	q.mu.Unlock()
}

// drain ends every waiting request with a (on shutdown, and on lock).
func (q *queue) drain(a Approval) {
	q.mu.Lock()
	items := make([]*pendingItem, 0, len(q.items))
	for _, it := range q.items {
		items = append(items, it)
	}
	q.mu.Unlock()
	for _, it := range items {
		q.end(it, a)
	}
}

// redecide asks every waiting request whether pol, just put in force,
// decides it as the policy that asked did. Those it decides the same wait
// on, now under pol; the others end at once with pol's answer, which the
// requester and the approvers are told (property 6 and issue 10: a reload
// that changes nothing voids no approval).
func (q *queue) redecide(pol *policies.Policy) {
	q.mu.Lock()
	items := make([]*pendingItem, 0, len(q.items))
	for _, it := range q.items {
		if it.pol != pol && it.redecide != nil {
			items = append(items, it)
		}
	}
	q.mu.Unlock()
	for _, it := range items {
		e := it.redecide(pol)
		if e == nil {
			q.mu.Lock()
			it.pol = pol
			q.mu.Unlock()
			continue
		}
		q.end(it, Approval{Code: e.Code, Reason: e.Message})
	}
}
