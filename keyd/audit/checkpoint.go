package audit

import (
	"crypto"

	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
)

// The checkpoint format is package checkpoint's, so that an approver can
// check and keep checkpoints without linking this package's writer; this
// package signs and writes them.

func signCheckpoint(c *checkpoint.Checkpoint, signer crypto.Signer) error {
	return checkpoint.Sign(c, signer)
}
