package keyd

import (
	"fmt"

	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// The audit log's scrub (keyd/audit/scrub.go) verifies the whole log behind
// the fast start. When it finds damage the daemon fails closed: every new
// GRANT and CONSENT is refused with "unavailable" and a message naming the
// damage, a grant signed meanwhile is discarded, and approvers are told on
// their WATCH stream, until an admin runs parley-keyd audit acknowledge.

// damageFeed is an audit sink that scrubs itself: the daemon's audit.Log.
type damageFeed interface {
	Damage() *audit.Damage
	SubscribeDamage() (<-chan *audit.Damage, func())
}

// auditDamage returns the damage the scrub found and no admin acknowledged,
// or nil.
func (s *Server) auditDamage() *audit.Damage {
	if f, ok := s.audit.(damageFeed); ok {
		return f.Damage()
	}
	return nil
}

// refuseIfDamaged is the scrub's check of the request pipeline: GRANT and
// CONSENT call it first, and a grant signed is checked again before it
// leaves (Server.finish).
func (s *Server) refuseIfDamaged() *protocol.Error {
	d := s.auditDamage()
	if d == nil {
		return nil
	}
	return damagedError(d)
}

func damagedError(d *audit.Damage) *protocol.Error {
	return &protocol.Error{Code: protocol.CodeUnavailable,
		Message: fmt.Sprintf("parley-keyd issues nothing: its audit log failed verification (%s), found %s", d, d.Found),
		Fix:     "stop and tell the human; an admin finds the damage with parley-keyd audit verify and, once it is understood, resumes issuance with parley-keyd audit acknowledge --reason TEXT"}
}

// damageView is what WATCH sends approvers about the damage: the damage, or
// Cleared once an admin acknowledged it.
func damageView(d *audit.Damage) *protocol.AuditDamage {
	if d == nil {
		return &protocol.AuditDamage{Cleared: true}
	}
	return &protocol.AuditDamage{Reason: string(d.Reason), File: d.File, Line: d.Line, Seq: d.Seq, Detail: d.Detail, Found: d.Found,
		Message: damagedError(d).Message}
}

// AuditAlert is what the phone page shows while the scrub's damage stops
// issuance, or "".
func (s *Server) AuditAlert() string {
	if d := s.auditDamage(); d != nil {
		return damagedError(d).Message + ". An admin resumes issuance with parley-keyd audit acknowledge."
	}
	return ""
}
