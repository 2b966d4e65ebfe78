package keyd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

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

// maxLockReason bounds the reason an approver gives; it goes into the audit
// log and onto every refusal's message.
const maxLockReason = 200

type lockState struct {
	mu   sync.Mutex
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
	return writeFileDurably(path, append(b, '\n'), 0o600)
}

// removeLock removes the lock file durably; a missing file is no error.
func removeLock(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return syncFolder(filepath.Dir(path))
}

func syncFolder(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
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
	s.lock.mu.Lock()
	defer s.lock.mu.Unlock()
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

// Lock locks the daemon for approver a (Approver and Channel name who and
// where): every new request is refused and every waiting one is withdrawn.
// Locking an already locked daemon changes nothing and reports already. The
// lock takes effect
// even when its file or its audit record cannot be written, since stopping
// is always safe; the file's failure is returned wrapped in
// ErrLockNotDurable.
func (s *Server) Lock(a Approval, reason string) (st LockState, already bool, err error) {
	reason = safe(strings.TrimSpace(reason))
	if len(reason) > maxLockReason {
		reason = reason[:maxLockReason] + "…"
	}
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
	rec := audit.Record{Kind: audit.KindLock, Decision: "locked",
		DecidedBy: &audit.Decider{Approver: a.Approver, Channel: a.Channel, Strength: strength(a)}, Message: reason}
	if werr != nil {
		rec.Message = strings.TrimPrefix(rec.Message+"; the lock file could not be written: "+werr.Error(), "; ")
		s.logf("lock: %v", werr)
		werr = fmt.Errorf("%w: %v", ErrLockNotDurable, werr)
	}
	s.auditBestEffort(rec)
	// The lock's record comes first in the log, then the requests it
	// withdraws.
	s.queue.drain(Approval{Code: protocol.CodeLocked, Reason: lockedError(*cur).Message})
	s.logf("locked by %s on the %s channel: every request is refused until an approver runs parley-grant unlock", a.Approver, a.Channel)
	return *cur, false, werr
}

// Unlock lifts the lock for approver a. The lock file is removed first; if
// that fails the daemon stays locked and the error is returned. Unlocking a
// daemon that is not locked changes nothing and reports false.
func (s *Server) Unlock(a Approval) (bool, error) {
	s.lock.mu.Lock()
	if s.lock.cur == nil {
		s.lock.mu.Unlock()
		return false, nil
	}
	if s.lock.path != "" {
		if err := removeLock(s.lock.path); err != nil {
			s.lock.mu.Unlock()
			return false, fmt.Errorf("the lock file could not be removed, so the daemon stays locked: %w", err)
		}
	}
	was := *s.lock.cur
	s.lock.cur = nil
	s.queue.setLocked(false)
	s.lock.mu.Unlock()
	s.auditBestEffort(audit.Record{Kind: audit.KindUnlock, Decision: "unlocked",
		DecidedBy: &audit.Decider{Approver: a.Approver, Channel: a.Channel, Strength: strength(a)},
		Message:   fmt.Sprintf("locked by %s at %s", was.By, was.At.UTC().Format(time.RFC3339))})
	s.logf("unlocked by %s on the %s channel", a.Approver, a.Channel)
	return true, nil
}

func lockView(st LockState) *protocol.LockView {
	return &protocol.LockView{By: st.By, Channel: st.Channel, Reason: st.Reason, At: st.At.Unix()}
}

// lockVerb answers LOCK: an approver, weak or strong, may stop the daemon.
// Stopping is always safe, so a weak approver (who could be an agent) is
// allowed to: the worst it can do is refuse its own requests.
func (c *conn) lockVerb(f *protocol.Frame) (*protocol.Frame, error) {
	if err := c.requireApprover(f.Verb); err != nil {
		return nil, err
	}
	st, already, err := c.s.Lock(c.approver("terminal"), f.Reason)
	msg := "locked"
	if already {
		msg = "already locked"
	}
	if errors.Is(err, ErrLockNotDurable) {
		msg = "locked; warning: " + err.Error()
	} else if err != nil {
		return nil, err
	}
	return &protocol.Frame{Kind: protocol.KindOK, Message: msg, Data: mustJSON(lockView(st))}, nil
}

// unlockVerb answers UNLOCK. Attack: an agent that runs as the same OS user
// as the human (a dual-role, weak approver) lifting the lock the human just
// set to stop it. Unlocking needs an approver who is not an agent.
func (c *conn) unlockVerb(f *protocol.Frame) (*protocol.Frame, error) {
	if err := c.requireApprover(f.Verb); err != nil {
		return nil, err
	}
	if c.role().Weak {
		return nil, &protocol.Error{Code: protocol.CodeForbidden,
			Message: fmt.Sprintf("user %s may also act as an agent, so it may lock but not unlock", c.id.User),
			Fix:     "unlock as an approver who is not an agent user; or stop the daemon, remove the file " + LockFileName + " from its state folder as an admin, and start it again"}
	}
	was, err := c.s.Unlock(c.approver("terminal"))
	if err != nil {
		return nil, err
	}
	msg := "unlocked"
	if !was {
		msg = "it was not locked"
	}
	return &protocol.Frame{Kind: protocol.KindOK, Message: msg}, nil
}
