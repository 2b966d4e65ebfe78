// Package audit is parley-keyd's audit log: an append-only, hash-chained file
// of JSON records, one per line, that the daemon writes before any grant
// leaves it.
//
// It guarantees that Append returns only once its record is written and
// fsynced, that a failed write leaves no partial record behind, and that a
// removed, edited, reordered or inserted record breaks the chain where
// Verify finds it and names the line. The file format is described in
// docs/audit.md.
package audit
