// Package audit is parley-keyd's audit log: an append-only, hash-chained log
// of JSON records, one per line, in segments, whose head is signed at
// intervals and handed to witnesses outside the daemon's reach. The daemon
// writes a record before any grant leaves it. The format is described in
// docs/audit.md.
//
// # Guarantees
//
//   - Append returns only once its record is durable (written and fsynced or
//     fdatasynced), and a failed write leaves no partial record behind; the
//     log retries taking a failed write back before its next one, so a full
//     or read-only disk needs no restart once it takes writes again.
//   - Every record is bounded: no field a caller influences makes it longer
//     than MaxRecord, and a cut field is marked and keeps its original's
//     size and hash. AppendFolded folds repeated refusals into counted
//     records and never drops one without a count.
//   - Before every write, the file at the log's path must be the file the
//     log writes, with the length it left; a log renamed, deleted, replaced,
//     truncated or written by someone else makes Append fail with a
//     *VanishedError (ErrUnavailable) until the file is back or Reopen.
//   - With a signer, a Checkpoint is written every so many records and so
//     much time, at open, at every new segment and at close; it goes to the
//     journal and to the witnesses. Verify names the file and line of any
//     record removed, edited, reordered or inserted, of a bad checkpoint and
//     of records after the stop checkpoint; given a checkpoint kept
//     elsewhere, also a cut tail, a rollback and a rewrite. A checkpoint
//     signature can never be a valid Parley grant or proof signature.
//   - Open reads the last checkpoint of the active segment and the records
//     after it only, so its cost does not grow with the log; it cuts a torn
//     or NUL-filled tail and records what it cut, and refuses any other
//     damage, a log that contradicts a witness, and an empty file.
//   - One process at a time: the active segment is locked (flock).
package audit
