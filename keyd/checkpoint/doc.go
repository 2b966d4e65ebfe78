// Package checkpoint is the signed checkpoint of parley-keyd's audit log:
// its format, its signature, and what a witness does with one. It links
// nothing of the log's writer, so an approver's program can check and keep
// checkpoints without it.
//
// It guarantees that a checkpoint's signed message can never be a Parley
// grant block or proof (it is not JSON), that Parse refuses a checkpoint
// with a malformed, unknown or repeated field, and that a Keeper keeps only
// a checkpoint that verifies under the principal key and is consistent with
// the one it kept (never an older one, never another hash at the same seq,
// never another log's).
package checkpoint
