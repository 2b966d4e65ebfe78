package protocol

import "encoding/json"

// AuditQuery selects records of the audit log for an AUDIT request (an
// approver reading the log through the daemon). Every bound is optional.
type AuditQuery struct {
	// From is the first record's seq: a reader that follows the log asks
	// again from the Next of the page before.
	From uint64 `json:"from,omitempty"`
	// Since and Until bound the records' times, unix seconds, inclusive.
	Since int64 `json:"since,omitempty"`
	Until int64 `json:"until,omitempty"`
	// Grant selects the records of one grant id.
	Grant string `json:"grant,omitempty"`
	// Limit is the most records to return; the daemon caps it (MaxAuditPage).
	Limit int `json:"limit,omitempty"`
	// Wait, when no record after From is selected yet, waits up to 25 s
	// for one: a reader that follows the log asks again at once, and one
	// request waits where a poll would make many.
	Wait bool `json:"wait,omitempty"`
}

// MaxAuditPage is the most records one AUDIT reply carries, and
// MaxAuditPageBytes the most bytes of records: a reader pages through more
// with From.
const (
	MaxAuditPage      = 500
	MaxAuditPageBytes = 512 << 10
)

// AuditPage is the data of an AUDIT reply.
type AuditPage struct {
	// Records are the selected records, each as the log stores it.
	Records []json.RawMessage `json:"records" display:"exact"`
	// Lines are the same records as the daemon renders them for a person,
	// one line each, made safe for a terminal.
	Lines []string `json:"lines"`
	// Next is the seq to ask From next; More says whether records the query
	// selects are left after this page.
	Next uint64 `json:"next"`
	More bool   `json:"more"`
	// Head is the log's last record now.
	Head uint64 `json:"head"`
}
