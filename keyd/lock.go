package keyd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/parley-keyd/parley-keyd/grant/lens"
	"github.com/parley-keyd/parley-keyd/internal/durable"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// The lock is the stop button: the moment a human sees an agent misbehave,
// an approver locks the daemon (parley-grant lock, or Stop on the phone
// page). From then on every GRANT, CONSENT and EXPLAIN is refused with the
// wire code "locked", every request waiting for a human is withdrawn, and
// nothing is signed until an approver unlocks it.
//
// The lock lives in the file LockFileName in the state folder, written
// durably (a temporary file, fsync, rename, fsync of the folder) before the
// lock is reported as durable, so that it survives a restart or a crash. Its
// absence means unlocked. A lock file that cannot be read or parsed means
// locked: fail closed, because the only way to lose a lock must be to lift
// it on purpose.

// LockFileName is the lock file in the state folder.
const LockFileName = "locked"

// LockState is a lock in force.
type LockState struct {
	By      string    // the approver: "alice (uid 1000)", "phone:Pixel"
	Channel string    // terminal, desktop or phone
	Reason  string    // what the approver gave as the reason, if anything
	At      time.Time // when it was locked
}

// lockFile is the lock file's content: one JSON object.
type lockFile struct {
	By      string `json:"by"`
	Channel string `json:"channel"`
	Reason  string `json:"reason,omitempty"`
	At      int64  `json:"at"`
}

// maxLockReason bounds the reason an approver gives, in runes; it goes into the audit
// log and onto every refusal's message.
const maxLockReason = 200

type lockState struct {
	// mu is held for reading by a grant's release (Server.finish) from
	// its lock check to its durable record, so that a LOCK waits for the
	// grants already being released and every grant after it is discarded.
	mu   sync.RWMutex
	path string // "" keeps the lock in memory only (no state folder)
	cur  *LockState
}

// readLock reads the lock file at path. It returns nil when the file does
// not exist, and a lock when it exists, even when it cannot be read.
func readLock(path string) (*LockState, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	var lf lockFile
	if err == nil {
		err = json.Unmarshal(b, &lf)
	}
	if err == nil && (lf.By == "" || lf.At <= 0) {
		err = errors.New("it names no approver or no time")
	}
	if err != nil {
		// Fail closed: a damaged lock file stays a lock.
		return &LockState{By: "unknown", Channel: "unknown", At: time.Unix(0, 0),
			Reason: fmt.Sprintf("the lock file %s could not be read (%v), so the daemon stays locked", path, err)}, err
	}
	return &LockState{By: lf.By, Channel: lf.Channel, Reason: lf.Reason, At: time.Unix(lf.At, 0)}, nil
}

// writeLock replaces the lock file durably.
func writeLock(path string, st *LockState) error {
	b, err := json.Marshal(lockFile{By: st.By, Channel: st.Channel, Reason: st.Reason, At: st.At.Unix()})
	if err != nil {
		return err
	}
	return durable.ReplaceFile(path, append(b, '\n'), 0o600, nil)
}

// removeLock removes the lock file durably; a missing file is no error.
func removeLock(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return durable.SyncDir(filepath.Dir(path))
}

// loadLock reads the lock file in state at start. A daemon started with a
// lock file stays locked.
func (s *Server) loadLock(state string) {
	if state == "" {
		return
	}
	s.lock.path = filepath.Join(state, LockFileName)
	st, err := readLock(s.lock.path)
	if err != nil {
		s.logf("lock: %v; the daemon stays locked until an approver runs parley-grant unlock", err)
	}
	if st != nil {
		s.lock.cur = st
		s.queue.setLocked(true)
		s.logf("locked by %s since %s: every request is refused until an approver runs parley-grant unlock", st.By, st.At.UTC().Format(time.RFC3339))
	}
}

// LockState returns the lock in force, if any.
func (s *Server) LockState() (LockState, bool) {
	s.lock.mu.RLock()
	defer s.lock.mu.RUnlock()
	if s.lock.cur == nil {
		return LockState{}, false
	}
	return *s.lock.cur, true
}

// refuseIfLocked is the lock check of the request pipeline: GRANT, CONSENT
// and EXPLAIN call it first, so that nothing new is decided, queued or
// signed while the daemon is locked.
func (s *Server) refuseIfLocked() error {
	st, ok := s.LockState()
	if !ok {
		return nil
	}
	return lockedError(st)
}

func lockedError(st LockState) *protocol.Error {
	msg := fmt.Sprintf("parley-keyd is locked (by %s at %s), so every request is refused", st.By, st.At.UTC().Format(time.RFC3339))
	if st.Reason != "" {
		msg += ": " + st.Reason
	}
	return &protocol.Error{Code: protocol.CodeLocked, Message: msg,
		Fix: "stop and tell the human; only an approver can lift the lock, with: parley-grant unlock"}
}

// ErrLockNotDurable says that the daemon is locked but the lock file could
// not be written, so the lock would not survive a restart.
var ErrLockNotDurable = errors.New("the lock holds, but the lock file could not be written, so it would not survive a restart")

// lockNow locks the daemon for approver a: from its return on every new
// request is refused. Locking an already locked daemon changes nothing and
// reports already. The lock takes effect even when its file cannot be
// written, since stopping is always safe; the file's failure is returned
// wrapped in ErrLockNotDurable. The caller records the lock, then withdraws
// the waiting requests (drainLocked), so that the lock's record comes first
// in the log.
func (s *Server) lockNow(a Approval, reason string) (st LockState, already bool, err error) {
	// Cut by runes, visibly, never inside a UTF-8 sequence or an escape.
	reason = lens.SafeText(strings.TrimSpace(reason), maxLockReason)
	s.lock.mu.Lock()
	if s.lock.cur != nil {
		st := *s.lock.cur
		s.lock.mu.Unlock()
		return st, true, nil
	}
	cur := &LockState{By: a.Approver, Channel: a.Channel, Reason: reason, At: s.now()}
	s.lock.cur = cur
	var werr error
	if s.lock.path != "" {
		werr = writeLock(s.lock.path, cur)
	}
	s.lock.mu.Unlock()
	// New requests are refused from here on, at the start of the pipeline
	// and again when one that was already past that check tries to queue.
	s.queue.setLocked(true)
	if werr != nil {
		s.logf("lock: %v", werr)
		werr = fmt.Errorf("%w: %v", ErrLockNotDurable, werr)
	}
	s.logf("locked by %s on the %s channel: every request is refused until an approver runs parley-grant unlock", a.Approver, a.Channel)
	return *cur, false, werr
}

// drainLocked withdraws every waiting request with the lock's refusal.
func (s *Server) drainLocked(st LockState) {
	s.queue.drain(Approval{Code: protocol.CodeLocked, Reason: lockedError(st).Message})
}

// unlockNow lifts the lock. The lock file is removed first; if that fails the
// daemon stays locked and the error is returned. Unlocking a daemon that is
// not locked changes nothing and reports false.
func (s *Server) unlockNow(a Approval) (was LockState, ok bool, err error) {
	s.lock.mu.Lock()
	if s.lock.cur == nil {
		s.lock.mu.Unlock()
		return LockState{}, false, nil
	}
	if s.lock.path != "" {
		if err := removeLock(s.lock.path); err != nil {
			s.lock.mu.Unlock()
			return LockState{}, false, fmt.Errorf("the lock file could not be removed, so the daemon stays locked: %w", err)
		}
	}
	was = *s.lock.cur
	s.lock.cur = nil
	s.queue.setLocked(false)
	s.lock.mu.Unlock()
	s.logf("unlocked by %s on the %s channel", a.Approver, a.Channel)
	return was, true, nil
}

// Stop is the phone page's Stop button: a LOCK from the paired device,
// through the request pipeline and audited as one.
func (s *Server) Stop(device string) error {
	_, err := s.Handle(context.Background(), phoneCaller(device),
		&protocol.Frame{Verb: protocol.VerbLock, Reason: "Stop pressed on the phone page"}, nil)
	return err
}

func lockView(st LockState) *protocol.LockView {
	return &protocol.LockView{By: st.By, Channel: st.Channel, Reason: st.Reason, At: st.At.Unix()}
}

// lockRequest answers LOCK: an approver, weak or strong, may stop the
// daemon. Stopping is always safe, so a weak approver (who could be an
// agent) is allowed to: the worst it can do is refuse its own requests. The
// request's record is the lock's, written before the waiting requests are
// withdrawn, so that it comes first in the log.
func (s *Server) lockRequest(r *request) (*protocol.Frame, error) {
	ch, err := approvalChannel(r)
	if err != nil {
		return nil, err
	}
	a := Approval{Approver: r.caller.name(), Channel: ch, Weak: r.caller.Roles.Weak}
	st, already, err := s.lockNow(a, r.f.Reason)
	msg := "locked"
	switch {
	case already:
		msg = "already locked"
	case errors.Is(err, ErrLockNotDurable):
		msg = "locked; warning: " + err.Error()
	case err != nil:
		return nil, err
	}
	r.rec.Kind, r.rec.Decision, r.rec.Message = audit.KindLock, msg, st.Reason
	r.rec.DecidedBy = &audit.Decider{Approver: a.Approver, Channel: a.Channel, Strength: strength(a)}
	if !already {
		s.record(r)
		s.drainLocked(st)
	}
	// Issue 24: a lock ends every remembered approval, locked or not
	// before (one started by a request approved a moment before).
	s.endAllRemembered("locked", r.rec.DecidedBy, "the daemon was locked by "+a.Approver, r.rec.RequestID)
	return &protocol.Frame{Kind: protocol.KindOK, Message: msg, Data: mustJSON(lockView(st))}, nil
}

// unlockRequest answers UNLOCK. Attack: an agent that runs as the same OS
// user as the human (a dual-role, weak approver) lifting the lock the human
// just set to stop it. Unlocking needs an approver who is not an agent.
func (s *Server) unlockRequest(r *request) (*protocol.Frame, error) {
	if r.caller.Roles.Weak {
		return nil, &protocol.Error{Code: protocol.CodeForbidden,
			Message: fmt.Sprintf("%s may also act as an agent, so it may lock but not unlock", r.caller.phrase()),
			Fix:     "unlock as an approver who is not an agent user; or stop the daemon, remove the file " + LockFileName + " from its state folder as an admin, and start it again"}
	}
	ch, err := approvalChannel(r)
	if err != nil {
		return nil, err
	}
	a := Approval{Approver: r.caller.name(), Channel: ch}
	was, ok, err := s.unlockNow(a)
	if err != nil {
		return nil, err
	}
	msg := "unlocked"
	if !ok {
		msg = "it was not locked"
	}
	r.rec.Kind, r.rec.Decision = audit.KindUnlock, msg
	r.rec.DecidedBy = &audit.Decider{Approver: a.Approver, Channel: a.Channel, Strength: strength(a)}
	if ok {
		r.rec.Message = fmt.Sprintf("locked by %s at %s", was.By, was.At.UTC().Format(time.RFC3339))
	}
	return &protocol.Frame{Kind: protocol.KindOK, Message: msg}, nil
}
