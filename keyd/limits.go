package keyd

import (
	"sync"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// A share divides something the daemon has a fixed amount of (connection
// slots, buffered frame bytes) among its callers, decided by the kernel's
// uid and the caller's role, never by anything a caller sends:
//
//   - one uid holds at most PerUser;
//   - agents together hold at most Total − Approvers, so the last
//     Approvers are always there for approvers. Attack: agent users that
//     fill every slot, so that the human cannot list or approve;
//   - of what agents may hold, the last Fair go only to an agent uid that
//     holds at most Small. Attack: a few agent users that together fill
//     what agents may hold, so that every other agent is refused.
//
// A connection whose uid may act as an agent counts as an agent, approver
// or not: within one uid nothing tells the agent from the human.
type share struct {
	mu     sync.Mutex
	total  int64
	agents int64
	perUID map[uint32]int64
}

// shareLimits are the bounds of a share.
type shareLimits struct {
	Total, PerUser, Approvers, Fair, Small int64
}

// take claims n for uid and reports whether it may.
func (s *share) take(l shareLimits, uid uint32, agent bool, n int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	mine := s.perUID[uid] + n
	if mine > l.PerUser || s.total+n > l.Total {
		return false
	}
	if agent {
		if s.agents+n > l.Total-l.Approvers {
			return false
		}
		if s.agents+n > l.Total-l.Approvers-l.Fair && mine > l.Small {
			return false
		}
		s.agents += n
	}
	if s.perUID == nil {
		s.perUID = map[uint32]int64{}
	}
	s.perUID[uid] = mine
	s.total += n
	return true
}

// give returns n that take granted to uid.
func (s *share) give(uid uint32, agent bool, n int64) {
	if n == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total -= n
	if agent {
		s.agents -= n
	}
	if s.perUID[uid] -= n; s.perUID[uid] <= 0 {
		delete(s.perUID, uid)
	}
}

// held returns what uid holds, and what all callers hold together.
func (s *share) held(uid uint32) (mine, total int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.perUID[uid], s.total
}

// Connection slots: the configuration sets the total and the share of one
// user; approvers keep 1/64 of the total (at least 4) and the last 1/16 of
// what agents may hold goes only to agent users with at most
// fairConnections open. With the defaults, 4096 and 1024 per user: agents
// hold at most 4032, and once they hold 3776, only an agent user with fewer
// than four connections gets another.
const fairConnections = 4

func connLimits(cfg *Config) shareLimits {
	total := int64(cfg.MaxConnections)
	l := shareLimits{Total: total, PerUser: int64(cfg.MaxConnectionsPerUser),
		Approvers: min(max(total/64, 4), total/2), Fair: total / 16, Small: fairConnections}
	return l
}

// Buffered frame bytes: every byte of a frame counts from the moment the
// daemon reads it until the request it carries is answered, on every
// connection together. Attack: a thousand connections, each holding a
// frame of almost 1 MiB that never ends (or a request that waits for a
// human), so that the daemon holds a gigabyte. A frame that does not fit is
// dropped as it arrives, without being kept, and answered with "limit".
//
// frameBudget bounds them all: 64 MiB, of which one user holds at most 16
// (16 frames of the largest size), agents at most 60, and the last 8 of
// those go only to agent users that hold at most 64 KiB, which is many
// times what a grant or consent request needs. docs/protocol.md states the
// figures and dist/parley-keyd.service derives its memory cap from them.
const (
	frameBudget        = 64 << 20
	frameBudgetPerUser = 16 * protocol.MaxFrame
	frameBudgetSmall   = 64 << 10
)

var frameLimits = shareLimits{Total: frameBudget, PerUser: frameBudgetPerUser,
	Approvers: frameBudget / 16, Fair: frameBudget / 8, Small: frameBudgetSmall}
