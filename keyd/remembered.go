package keyd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/grant/lens"
	"github.com/parley-keyd/parley-keyd/internal/durable"
	"github.com/parley-keyd/parley-keyd/internal/duration"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/parley-keyd/parley-keyd/policies"
)

// Remembered approvals (issue 24). A human who approves a GRANT may have
// the daemon keep approving the same request for a while: until it ends,
// a GRANT from the same policy agent and the same uid whose grant is within
// the approved one is issued at once, each living a short slice (the
// rule's remember_exp), never past the approval's end. The human ends it at
// any time (FORGET), and so do LOCK, a reload whose policy no longer allows
// it, and its end time.
//
// The store. The audit log is the truth: a remembered approval is its
// "remember" record, which is chained, checkpointed and scrubbed like every
// other, and it ends with a "forget" record. The file RememberedFileName in
// the state folder only says where to look: for each live approval its id,
// the seq of its remember record and that record's chain hash. At start the
// daemon honours an entry only when the log holds, at that seq, a remember
// record of that id whose line has that hash, and no forget record of it
// follows; what the approval allows is read from the log, never from the
// file. So a file written by anyone but the daemon (an agent that could
// reach the state folder) can at most point at approvals the daemon itself
// started and has not ended: it cannot widen one, make one up, or bring an
// ended one back. Deriving the whole store from the log instead would read
// the log from its start at every start; the file bounds that to the oldest
// live approval's record.
//
// Ending is durable before it is reported: the forget record is appended,
// under the lock a grant's release holds from its checks to its own record
// (lockState.mu), before FORGET answers. So every grant under an approval
// was recorded before its end, none is signed and released after it, and
// a crash at any step either leaves it live (FORGET never answered) or
// ended for good.

// RememberedFileName is the file in the state folder that lists the live
// remembered approvals by their records.
const RememberedFileName = "remembered"

// rememberLadder are the lengths an approver is offered, those shorter than
// the rule's remember; the rule's remember itself is always offered last.
var rememberLadder = []int64{15 * 60, 3600, 2 * 3600, 8 * 3600}

// rememberChoices returns the lengths offered for a rule whose remember is
// max seconds (0: none).
func rememberChoices(max int64) []string {
	if max <= 0 {
		return nil
	}
	var out []string
	for _, l := range rememberLadder {
		if l < max {
			out = append(out, duration.Format(time.Duration(l)*time.Second))
		}
	}
	return append(out, duration.Format(time.Duration(max)*time.Second))
}

// rememberedApproval is one remembered approval.
type rememberedApproval struct {
	id, agent, user, rule string
	uid                   uint32
	scope                 grant.Request  // the approved grant; its times are not used
	cavs                  []grant.Caveat // scope as approved, for the listing
	text                  string
	started, until        int64 // unix seconds
	slice                 int64 // remember_exp when it started, seconds
	// deadline is until on the monotonic clock: a wall clock set back
	// does not stretch the approval (the slices are cut to it too).
	deadline                      time.Time
	approvedBy, channel, strength string
	seq                           uint64 // its remember record
	hash                          string // that record's chain hash ("" without a log file)

	// Guarded by rememberStore.mu; ended also only changes under
	// Server.lock.mu held for writing (see Server.endRemembered).
	ended  bool
	issued int
	timer  *time.Timer
}

// rememberStore holds the live remembered approvals.
type rememberStore struct {
	mu    sync.Mutex
	items map[string]*rememberedApproval
	// path is the store file, logPath the audit log's active segment;
	// both empty when the daemon has no state folder (tests).
	path, logPath string
	// saveMu orders the file's rewrites.
	saveMu sync.Mutex
	// unarmed are the approvals loaded at start, whose timers start once
	// the audit log takes records (armRemembered); closed is set when the
	// daemon stops, after which nothing is ended or saved.
	unarmed []*rememberedApproval
	closed  bool
}

func newRememberStore() *rememberStore {
	return &rememberStore{items: map[string]*rememberedApproval{}}
}

// live returns the approvals not ended, oldest first.
func (st *rememberStore) live() []*rememberedApproval {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]*rememberedApproval, 0, len(st.items))
	for _, m := range st.items {
		if !m.ended {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].started != out[j].started {
			return out[i].started < out[j].started
		}
		return out[i].id < out[j].id
	})
	return out
}

func (st *rememberStore) get(id string) *rememberedApproval {
	st.mu.Lock()
	defer st.mu.Unlock()
	if m := st.items[id]; m != nil && !m.ended {
		return m
	}
	return nil
}

// storeEntry is one line of the store file.
type storeEntry struct {
	ID   string `json:"id"`
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
}

type storeFile struct {
	Remembered []storeEntry `json:"remembered"`
}

// save rewrites the store file with the live approvals, durably.
func (st *rememberStore) save() error {
	if st.path == "" {
		return nil
	}
	st.saveMu.Lock()
	defer st.saveMu.Unlock()
	st.mu.Lock()
	closed := st.closed
	st.mu.Unlock()
	if closed {
		return nil
	}
	f := storeFile{Remembered: []storeEntry{}}
	for _, m := range st.live() {
		f.Remembered = append(f.Remembered, storeEntry{ID: m.id, Seq: m.seq, Hash: m.hash})
	}
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return durable.ReplaceFile(st.path, append(b, '\n'), 0o600, nil)
}

// forgetStep, when set (tests only), is told each step of ending an
// approval: "before-record", "after-record", "after-store". The crash
// tests kill the daemon there.
var forgetStep func(step string)

func step(name string) {
	if forgetStep != nil {
		forgetStep(name)
	}
}

// newRememberedID returns a new remembered approval id, "m_" and 8 letters.
func newRememberedID() string { return "m_" + strings.TrimPrefix(newRequestID(), "r_") }

// remaining is how long m has left, by the wall clock of s and by the
// monotonic clock, whichever is less; and the end the wall clock gives it
// under the policy's current remember (a reload may shorten it, never
// lengthen it).
func (s *Server) remaining(m *rememberedApproval, now time.Time, remember int64) time.Duration {
	until := m.until
	if remember > 0 {
		until = min(until, m.started+remember)
	}
	left := time.Unix(until, 0).Sub(now)
	return min(left, time.Until(m.deadline))
}

// rememberFrom parses an APPROVE's "remember".
func rememberFrom(f *protocol.Frame) (time.Duration, error) {
	if f.Remember == "" {
		return 0, nil
	}
	if f.Verb != protocol.VerbApprove {
		return 0, &protocol.Error{Code: protocol.CodeInvalidParams, Message: "\"remember\" is only for APPROVE"}
	}
	d, err := duration.Seconds(f.Remember)
	if err != nil {
		return 0, &protocol.Error{Code: protocol.CodeInvalidParams, Message: "\"remember\" is not a length of time: " + err.Error(),
			Fix: "give one of the lengths the pending request offers, such as 2h"}
	}
	return d, nil
}

// checkRemember refuses an approval that asks to be remembered when it may
// not be: the request is no GRANT, its rule does not allow remembering,
// the length is above the rule's, the channel showed the request cut, or a
// strong rule would be remembered from a weak approval. It runs before the
// approval takes effect: a refused APPROVE approves nothing.
func checkRemember(it *pendingItem, a Approval) error {
	v := it.view
	id := v.ID
	switch {
	case v.Kind != "grant":
		return &protocol.Error{Code: protocol.CodeForbidden, Message: fmt.Sprintf("request %s is a consent, which is one-shot and never remembered; nothing was approved", id),
			Fix: "approve it without --remember"}
	case len(v.Remember) == 0:
		return &protocol.Error{Code: protocol.CodeForbidden, Message: fmt.Sprintf("the policy does not let request %s be remembered; nothing was approved", id),
			Fix: "approve it without --remember"}
	}
	max, err := duration.Seconds(v.Remember[len(v.Remember)-1])
	if err != nil {
		return err
	}
	if a.Remember > max {
		return &protocol.Error{Code: protocol.CodeForbidden, Message: fmt.Sprintf("request %s may be remembered for at most %s, not %s; nothing was approved",
			id, v.Remember[len(v.Remember)-1], duration.Format(a.Remember)), Fix: "choose one of: " + strings.Join(v.Remember, ", ")}
	}
	if a.Channel == "desktop" && !protocol.FitsNotification(v) {
		return &protocol.Error{Code: protocol.CodeForbidden, Message: fmt.Sprintf("request %s is too long for a notification to show whole, so it cannot be remembered from one; nothing was approved", id),
			Fix: "read it whole and decide in a terminal: parley-grant approve " + id}
	}
	if v.Strong && a.Weak {
		return &protocol.Error{Code: protocol.CodeForbidden, Message: fmt.Sprintf("request %s needs a strong channel, so only a strong approval may be remembered; nothing was approved", id),
			Fix: "approve it from a paired phone, or as a user that is not an agent"}
	}
	return nil
}

// startRemembered makes the human's approval a of r's request remembered:
// it writes the approval's remember record (durably, before the grant it
// approved leaves) and keeps it. d is what the policy decided, and how
// long and for what a human may have it remembered.
func (s *Server) startRemembered(r *request, agent string, d policies.Decision, a Approval) (*rememberedApproval, error) {
	now := s.now()
	// The policy that decided may have been reloaded while the request
	// waited: the current one must still allow this length.
	cur := s.policy.Load()
	if rem, _, _, why := cur.RememberAllowed(agent, d.Rule, d.Grant); why != "" || int64(a.Remember/time.Second) > rem {
		if why == "" {
			why = fmt.Sprintf("the reloaded policy lets it be remembered for at most %s", duration.Format(time.Duration(rem)*time.Second))
		}
		return nil, &protocol.Error{Code: protocol.CodeConflict, Message: "the approval could not be remembered: " + why,
			Fix: "the agent asks again, and the human approves it anew"}
	}
	cavs := d.Grant.Caveats()
	cavs = slices.DeleteFunc(cavs, func(c grant.Caveat) bool { return c.Name == "exp" || c.Name == "nbf" })
	m := &rememberedApproval{
		id: newRememberedID(), agent: agent, user: r.caller.Identity.User, rule: d.Rule, uid: r.caller.Identity.UID,
		scope: d.Grant, cavs: cavs, started: now.Unix(), until: now.Add(a.Remember).Unix(),
		slice: d.RememberExp, deadline: time.Now().Add(a.Remember),
		approvedBy: a.Approver, channel: a.Channel, strength: strength(a),
	}
	m.text = rememberedText(m)
	rec := audit.Record{Kind: audit.KindRemember, RequestID: r.rec.RequestID, Verb: r.f.Verb, Target: r.f.Request,
		Caller: r.caller.audit(), Holder: r.rec.Holder, Issued: caveatsJSON(cavs), Decision: "remembered",
		DecidedBy:  &audit.Decider{Rule: d.Rule, Approver: a.Approver, Channel: a.Channel, Strength: m.strength},
		Remembered: &audit.Remembered{ID: m.id, Agent: agent, UID: m.uid, Rule: d.Rule, Until: m.until, Slice: m.slice},
		Message:    fmt.Sprintf("approved for %s: grants within it are issued at once, each for %s", duration.Format(a.Remember), fmtSeconds(m.slice))}
	// Attack: an approval a moment before the human pressed Stop. LOCK
	// ends every remembered approval after it set the lock, with the lock
	// held for writing; this one is kept with it held for reading, so it
	// either sees the lock and is refused or is kept before LOCK ends all.
	s.lock.mu.RLock()
	defer s.lock.mu.RUnlock()
	if st := s.lock.cur; st != nil {
		return nil, lockedError(*st)
	}
	seq, err := s.audit.Append(rec)
	if err != nil {
		s.logf("audit append failed for remember %s: %v", m.id, err)
		return nil, s.unavailableAudit(err)
	}
	m.seq = seq
	if st := s.remembered; st.logPath != "" {
		h, err := audit.HashAt(st.logPath, seq)
		if err != nil {
			return nil, err
		}
		m.hash = h.Hash
	}
	s.keepRemembered(m, true)
	if err := s.remembered.save(); err != nil {
		s.logf("remembered: the store file could not be written (%v); %s ends at the next restart", err, m.id)
	}
	s.logf("remembered %s for agent %q (uid %d) until %s, approved by %s", m.id, agent, m.uid, time.Unix(m.until, 0).UTC().Format(time.RFC3339), a.Approver)
	return m, nil
}

// keepRemembered adds m to the store, with a timer that ends it at its end
// when arm is set.
func (s *Server) keepRemembered(m *rememberedApproval, arm bool) {
	st := s.remembered
	st.mu.Lock()
	defer st.mu.Unlock()
	st.items[m.id] = m
	if !arm {
		st.unarmed = append(st.unarmed, m)
		return
	}
	s.armLocked(m)
}

func (s *Server) armLocked(m *rememberedApproval) {
	m.timer = time.AfterFunc(time.Until(m.deadline), func() {
		s.endRemembered(m, "expired", nil, "its time ended", "")
	})
}

// armRemembered starts the timers of the approvals loaded at start, once
// the audit log takes records: one whose end passed while the daemon was
// down ends now, with its record; so does one the policy no longer allows.
func (s *Server) armRemembered() {
	st := s.remembered
	st.mu.Lock()
	for _, m := range st.unarmed {
		if !m.ended {
			s.armLocked(m)
		}
	}
	st.unarmed = nil
	st.mu.Unlock()
	s.reloadRemembered(s.policy.Load())
}

// closeRemembered stops the timers when the daemon stops: an approval
// outlives a stop, and the store file is left as it is.
func (s *Server) closeRemembered() {
	st := s.remembered
	st.mu.Lock()
	defer st.mu.Unlock()
	st.closed = true
	for _, m := range st.items {
		if m.timer != nil {
			m.timer.Stop()
		}
	}
}

func fmtSeconds(n int64) string { return duration.Format(time.Duration(n) * time.Second) }

// rememberedText renders m's scope for a human, as a pending request's.
func rememberedText(m *rememberedApproval) string {
	g := m.scope
	var out rendering
	out.line("Remembered %s: grants for agent %q, uid %d", m.id, safe(m.agent), m.uid)
	out.scope(g)
	if g.Risk != "" {
		out.line("Risk: actions of risk %s or lower", safe(g.Risk))
	}
	out.line("Each grant lives %s; the approval ends %s UTC", fmtSeconds(m.slice), time.Unix(m.until, 0).UTC().Format("2006-01-02 15:04:05"))
	out.line("Approved by %s on the %s channel (%s)", safe(m.approvedBy), safe(m.channel), m.strength)
	return out.b.String()
}

// underRemembered issues r's GRANT under a remembered approval when one
// covers it (coveringRemembered): it cuts d's expiry to the slice and the
// approval's end, fills the record and reports true; else it changes
// nothing and the request is decided as if nothing were remembered.
func (s *Server) underRemembered(r *request, agent string, d *policies.Decision, req grant.Request) bool {
	m, exp, now := s.coveringRemembered(r, agent, *d)
	if m == nil {
		return false
	}
	cutToSlice(d, m, req, exp, now)
	r.under = m
	r.rec.Decision = "remembered"
	r.rec.DecidedBy = &audit.Decider{Rule: d.Rule, Approver: m.approvedBy, Channel: m.channel, Strength: m.strength, Remembered: m.id}
	return true
}

// coveringRemembered returns the live remembered approval that covers d
// for r's caller, with the expiry a grant under it gets and the time that
// was decided at: the policy asks a human for it (d), d allows
// remembering, and an approval of the same agent and uid holds d's grant
// within its scope, on a strong channel if d needs one. Nil when none
// does. It changes nothing, so EXPLAIN asks it too.
func (s *Server) coveringRemembered(r *request, agent string, d policies.Decision) (*rememberedApproval, int64, int64) {
	if d.Action != policies.Ask || d.Remember == 0 || r.caller.Device != "" {
		return nil, 0, 0
	}
	now := s.now()
	for _, m := range s.remembered.live() {
		if m.agent != agent || m.uid != r.caller.Identity.UID {
			continue
		}
		if d.Strong && m.strength != "strong" {
			continue
		}
		if ok, _ := policies.Within(d.Grant, m.scope); !ok {
			continue
		}
		left := s.remaining(m, now, d.Remember)
		if left < time.Second {
			continue
		}
		slice := min(d.RememberExp, m.slice)
		exp := min(d.Grant.Exp, now.Unix()+slice, now.Add(left).Unix())
		if exp <= now.Unix() || (d.Grant.Nbf != 0 && d.Grant.Nbf >= exp) {
			continue
		}
		return m, exp, now.Unix()
	}
	return nil, 0, 0
}

// cutToSlice sets d's expiry to exp, the one a grant under m gets, saying
// so when that is earlier than the request asked.
func cutToSlice(d *policies.Decision, m *rememberedApproval, req grant.Request, exp, now int64) {
	if req.Exp != 0 && exp < req.Exp {
		d.Narrowed = append(d.Narrowed, fmt.Sprintf("expiry cut to %s, the slice of remembered approval %s", fmtSeconds(exp-now), m.id))
	}
	d.Grant.Exp = exp
}

// releaseRemembered is the check a grant under a remembered approval makes
// at its release, with Server.lock.mu held for reading: the approval must
// not have ended meanwhile. It counts the grant when it may leave.
func (s *Server) releaseRemembered(r *request) *protocol.Error {
	m := r.under
	if m == nil {
		return nil
	}
	st := s.remembered
	st.mu.Lock()
	defer st.mu.Unlock()
	if m.ended {
		return &protocol.Error{Code: protocol.CodeForbidden, Message: fmt.Sprintf("remembered approval %s ended before the grant left", m.id),
			Fix: "ask again: a human decides"}
	}
	m.issued++
	return nil
}

// endRemembered ends m: why is "forgotten", "locked", "reloaded" or
// "expired", by who ended it (nil for the daemon), message in its words.
// Its forget record is written with Server.lock.mu held for writing, so
// that every grant under m released before is recorded before it and none
// is released after. rec, when not nil, is the FORGET request's own record,
// which becomes the forget record. It reports false when m had ended
// already.
func (s *Server) endRemembered(m *rememberedApproval, why string, by *audit.Decider, message, requestID string) bool {
	return s.endRememberedAs(m, why, by, message, audit.Record{RequestID: requestID})
}

func (s *Server) endRememberedAs(m *rememberedApproval, why string, by *audit.Decider, message string, rec audit.Record) bool {
	s.lock.mu.Lock()
	st := s.remembered
	st.mu.Lock()
	if m.ended || st.closed {
		st.mu.Unlock()
		s.lock.mu.Unlock()
		return false
	}
	st.mu.Unlock()
	step("before-record")
	rec.Kind, rec.Decision, rec.DecidedBy, rec.Target = audit.KindForget, why, by, m.id
	rec.Remembered = &audit.Remembered{ID: m.id, Agent: m.agent, UID: m.uid, Rule: m.rule}
	rec.Message = message
	if _, err := s.audit.Append(rec); err != nil {
		// It ends anyway (fail closed); the store file without it keeps
		// it ended across a restart.
		s.logf("audit append failed for the end of remembered approval %s: %v", m.id, err)
	}
	step("after-record")
	st.mu.Lock()
	m.ended = true
	if m.timer != nil {
		m.timer.Stop()
	}
	delete(st.items, m.id)
	st.mu.Unlock()
	s.lock.mu.Unlock()
	if err := st.save(); err != nil {
		s.logf("remembered: the store file could not be written: %v", err)
	}
	step("after-store")
	s.logf("remembered approval %s ended: %s (%s)", m.id, why, message)
	return true
}

// endAllRemembered ends every remembered approval (LOCK).
func (s *Server) endAllRemembered(why string, by *audit.Decider, message, requestID string) {
	for _, m := range s.remembered.live() {
		s.endRemembered(m, why, by, message, requestID)
	}
}

// reloadRemembered ends the approvals that pol, just put in force, no
// longer allows (issue 24: a reload never keeps or stretches one the policy
// no longer covers).
func (s *Server) reloadRemembered(pol *policies.Policy) {
	for _, m := range s.remembered.live() {
		_, _, strong, why := pol.RememberAllowed(m.agent, m.rule, m.scope)
		if why == "" && strong && m.strength != "strong" {
			why = fmt.Sprintf("rule %q now needs a strong channel, and the approval was weak", m.rule)
		}
		if why != "" {
			s.endRemembered(m, "reloaded", nil, why, "")
		}
	}
}

// view is m as REMEMBERED lists it.
func (s *Server) rememberedView(m *rememberedApproval) protocol.RememberedView {
	st := s.remembered
	st.mu.Lock()
	issued := m.issued
	st.mu.Unlock()
	until := m.until
	if rem, _, _, why := s.policy.Load().RememberAllowed(m.agent, m.rule, m.scope); why == "" {
		until = min(until, m.started+rem)
	}
	cavs := m.cavs
	if cavs == nil {
		cavs = []grant.Caveat{}
	}
	return protocol.RememberedView{ID: m.id, Agent: m.agent, UID: m.uid, User: m.user, Rule: m.rule,
		Scope: protocol.Scope{Caveats: cavs}, Text: m.text, Until: until, ApprovedBy: m.approvedBy,
		Channel: m.channel, Started: m.started, Issued: issued}
}

// owns reports whether r's caller is the agent m serves: the same uid, and
// the same policy agent (with the key the frame names, for an agent the
// policy matches by key).
func (s *Server) owns(r *request, m *rememberedApproval) bool {
	if !r.caller.Roles.Agent || r.caller.Device != "" || r.caller.Identity.UID != m.uid {
		return false
	}
	name, ok := s.policy.Load().AgentFor(r.caller.policy(r.f.Holder))
	return ok && name == m.agent
}

// rememberedRequest answers REMEMBERED: an approver sees every remembered
// approval, an agent its own.
func (s *Server) rememberedRequest(r *request) (*protocol.Frame, error) {
	if !r.caller.Roles.Approver && !r.caller.Roles.Agent {
		return nil, &protocol.Error{Code: protocol.CodeForbidden, Message: fmt.Sprintf("%s may not list remembered approvals", r.caller.phrase())}
	}
	out := protocol.RememberedList{Remembered: []protocol.RememberedView{}}
	for _, m := range s.remembered.live() {
		if r.caller.Roles.Approver || s.owns(r, m) {
			out.Remembered = append(out.Remembered, s.rememberedView(m))
		}
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return &protocol.Frame{Kind: protocol.KindRemembered, Data: raw}, nil
}

// maxForgetReason bounds FORGET's reason, in runes, as LOCK's.
const maxForgetReason = maxLockReason

// forgetRequest answers FORGET: an approver, or the agent that owns it,
// ends a remembered approval. Its OK comes once the end is durable in the
// audit log, and no grant under it leaves after that.
func (s *Server) forgetRequest(r *request) (*protocol.Frame, error) {
	if !r.caller.Roles.Approver && !r.caller.Roles.Agent {
		return nil, &protocol.Error{Code: protocol.CodeForbidden, Message: fmt.Sprintf("%s may not forget remembered approvals", r.caller.phrase())}
	}
	r.rec.Target = r.f.Request
	if r.f.Request == "" {
		return nil, &protocol.Error{Code: protocol.CodeInvalidParams, Message: "FORGET needs \"request\": the remembered approval's id",
			Fix: "list them with: parley-grant remembered"}
	}
	m := s.remembered.get(r.f.Request)
	// An agent is told the same for another's approval as for none, so
	// that it learns nothing about others'.
	if m == nil || !(r.caller.Roles.Approver || s.owns(r, m)) {
		return nil, &protocol.Error{Code: protocol.CodeNotFound, Message: fmt.Sprintf("no remembered approval %q", r.f.Request),
			Fix: "list them with: parley-grant remembered"}
	}
	who := &audit.Decider{Approver: r.caller.name()}
	if r.caller.Roles.Approver {
		ch, err := approvalChannel(r)
		if err != nil {
			return nil, err
		}
		who.Channel = ch
	} else {
		who.Rule = m.rule
	}
	reason := lens.SafeText(strings.TrimSpace(r.f.Reason), maxForgetReason)
	msg := "forgotten by " + r.caller.name()
	if reason != "" {
		msg += ": " + reason
	}
	rec := r.rec
	rec.Caller = r.caller.audit()
	if !s.endRememberedAs(m, "forgotten", who, msg, rec) {
		return nil, &protocol.Error{Code: protocol.CodeNotFound, Message: fmt.Sprintf("remembered approval %q had ended already", r.f.Request)}
	}
	// The end record is this request's record.
	r.recorded = true
	return &protocol.Frame{Kind: protocol.KindOK, Message: "forgotten"}, nil
}

// loadRemembered reads the store file in state at start and keeps the
// approvals it names that the audit log at logPath holds as started and
// not ended (see the store's comment above). Nothing is written: the log
// takes records only once the daemon runs, so approvals found ended by
// time or no longer allowed by the policy are ended by their timer, which
// fires at once, and by the first reload.
func (s *Server) loadRemembered(state, logPath string) {
	st := s.remembered
	if state == "" || logPath == "" {
		return
	}
	st.path, st.logPath = filepath.Join(state, RememberedFileName), logPath
	b, err := os.ReadFile(st.path)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var f storeFile
	if err == nil {
		err = grant.DecodeStrict(b, &f)
	}
	if err != nil {
		s.logf("remembered: the store file %s cannot be read (%v): no remembered approval is honoured", st.path, err)
		return
	}
	want := map[uint64]storeEntry{}
	from := uint64(0)
	for _, e := range f.Remembered {
		h, err := audit.HashAt(logPath, e.Seq)
		if err != nil || h.Hash != e.Hash || e.Hash == "" {
			s.logf("remembered: %q in the store file matches no record of the audit log; not honoured", e.ID)
			continue
		}
		want[e.Seq] = e
		if from == 0 || e.Seq < from {
			from = e.Seq
		}
	}
	if len(want) == 0 {
		return
	}
	found := map[string]*rememberedApproval{}
	ended := map[string]bool{}
	err = audit.Read(logPath, audit.Filter{FromSeq: from}, func(line []byte, rec *audit.Record) error {
		switch {
		case rec.Kind == audit.KindForget && rec.Remembered != nil:
			ended[rec.Remembered.ID] = true
		case rec.Kind == audit.KindRemember && rec.Remembered != nil:
			e, ok := want[rec.Seq]
			if !ok || e.ID != rec.Remembered.ID {
				return nil
			}
			m, err := rememberedFromRecord(rec)
			if err != nil {
				s.logf("remembered: record %d cannot be read back (%v); not honoured", rec.Seq, err)
				return nil
			}
			m.seq, m.hash = e.Seq, e.Hash
			found[m.id] = m
		}
		return nil
	})
	if err != nil {
		s.logf("remembered: the audit log cannot be read (%v): no remembered approval is honoured", err)
		return
	}
	now := s.now()
	for id, m := range found {
		if ended[id] {
			continue
		}
		m.deadline = time.Now().Add(time.Unix(m.until, 0).Sub(now))
		s.keepRemembered(m, false)
	}
}

// rememberedFromRecord reads a remembered approval back from its remember
// record.
func rememberedFromRecord(rec *audit.Record) (*rememberedApproval, error) {
	rm := rec.Remembered
	if rm.ID == "" || rm.Agent == "" || rm.Until == 0 || rm.Slice <= 0 || rec.DecidedBy == nil || rec.Caller == nil || len(rec.Cut) > 0 {
		return nil, errors.New("it lacks a part")
	}
	var cavs []grant.Caveat
	if err := json.Unmarshal(rec.Issued, &cavs); err != nil {
		return nil, err
	}
	t, err := time.Parse(time.RFC3339Nano, rec.Time)
	if err != nil {
		return nil, err
	}
	started := t.Unix()
	// The scope's caveats carry no expiry; one is added for the reading.
	r, err := grant.ParseRequest(append(slices.Clone(cavs), grant.Exp(rm.Until)), started)
	if err != nil {
		return nil, err
	}
	m := &rememberedApproval{
		id: rm.ID, agent: rm.Agent, user: rec.Caller.User, rule: rm.Rule, uid: rm.UID,
		scope: grant.Request{Svc: r.Svc, Verbs: r.Verbs, Can: r.Can, Per: r.Per, Spend: r.Spend, Risk: r.Risk},
		cavs:  cavs, started: started, until: rm.Until, slice: rm.Slice,
		approvedBy: rec.DecidedBy.Approver, channel: rec.DecidedBy.Channel, strength: rec.DecidedBy.Strength,
	}
	m.text = rememberedText(m)
	return m, nil
}

// Remembered lists the remembered approvals, for the phone page (an
// approver: it sees all of them).
func (s *Server) Remembered() []protocol.RememberedView {
	out := []protocol.RememberedView{}
	for _, m := range s.remembered.live() {
		out = append(out, s.rememberedView(m))
	}
	return out
}

// Forget ends the remembered approval id for the paired phone named
// device: the phone page's Forget button, through the pipeline as a FORGET
// from that device, and audited as one.
func (s *Server) Forget(id, device, reason string) error {
	_, err := s.Handle(context.Background(), phoneCaller(device),
		&protocol.Frame{Verb: protocol.VerbForget, Request: id, Reason: reason}, nil)
	return err
}
