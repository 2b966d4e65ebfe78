package audit

import (
	"crypto"
	"crypto/ed25519"

	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
)

// Checkpoint is a signed statement of a log's head; see package checkpoint,
// which holds its format, so that an approver can check and keep
// checkpoints without linking this package's writer.
type Checkpoint = checkpoint.Checkpoint

// Keeper keeps the latest checkpoint of a log (checkpoint.Keeper).
type Keeper = checkpoint.Keeper

// Why a checkpoint was made (checkpoint.Reason*).
const (
	ReasonCreate   = checkpoint.ReasonCreate
	ReasonOpen     = checkpoint.ReasonOpen
	ReasonCount    = checkpoint.ReasonCount
	ReasonInterval = checkpoint.ReasonInterval
	ReasonRotate   = checkpoint.ReasonRotate
	ReasonReopen   = checkpoint.ReasonReopen
	ReasonStop     = checkpoint.ReasonStop
	ReasonRequest  = checkpoint.ReasonRequest
)

// ErrCheckpoint is wrapped by every error about a checkpoint's form or
// signature.
var ErrCheckpoint = checkpoint.ErrCheckpoint

// FormatKey writes an Ed25519 public key as Parley does (§6.1).
func FormatKey(pub ed25519.PublicKey) string { return checkpoint.FormatKey(pub) }

// ParseKey reads a key written by FormatKey.
func ParseKey(s string) (ed25519.PublicKey, error) { return checkpoint.ParseKey(s) }

// LatestCheckpoint reads the last checkpoint of a file of checkpoints
// (checkpoint.Latest).
func LatestCheckpoint(path string) (*Checkpoint, error) { return checkpoint.Latest(path) }

// ReadCheckpoints reads every checkpoint of a file of checkpoints
// (checkpoint.ReadFile).
func ReadCheckpoints(path string) ([]*Checkpoint, error) { return checkpoint.ReadFile(path) }

func signCheckpoint(c *Checkpoint, signer crypto.Signer) error { return checkpoint.Sign(c, signer) }
