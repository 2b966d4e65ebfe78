package audit

import (
	"crypto/ed25519"

	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
)

// Principal keys rotated out (parley-keyd key rotate, docs/key-rotation.md).
//
// The log's checkpoints are signed with the principal key, so a log kept
// across a rotation holds checkpoints of the old key before those of the
// new one. Options.Previous and VerifyOptions.Previous name the old keys,
// oldest first. A checkpoint may be signed by the current key or by one of
// them, and keys only move forward: once a checkpoint verifies under a key,
// no later checkpoint may be signed by a key that came before it. So a key
// rotated out cannot sign checkpoints after its successor's first one:
// whoever still holds it can no longer vouch for what follows.

// verifyCheckpoint checks cp's signature under the verifier's keys: the
// pinned or learnt key when no previous keys are given, else the previous
// keys from the last one used on, then the current key. The error is the
// current key's.
func (v *verifier) verifyCheckpoint(cp *checkpoint.Checkpoint) error {
	if len(v.previous) == 0 {
		return cp.Verify(v.key)
	}
	for i := v.keyAt; i < len(v.previous); i++ {
		if cp.Verify(v.previous[i]) == nil {
			v.keyAt = i
			return nil
		}
	}
	err := cp.Verify(v.key)
	if err == nil {
		v.keyAt = len(v.previous)
	}
	return err
}

// verifyAnyKey checks a checkpoint kept elsewhere under key or any of the
// previous keys: a witness may hold one made before the rotation.
func verifyAnyKey(cp *checkpoint.Checkpoint, key ed25519.PublicKey, previous []ed25519.PublicKey) error {
	err := cp.Verify(key)
	if err == nil {
		return nil
	}
	for _, p := range previous {
		if cp.Verify(p) == nil {
			return nil
		}
	}
	return err
}
