package keyd

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/durable"
)

// HeadReportFile is where the daemon reports its audit log's head when it
// starts and when it stops, next to the log. The same head goes to the
// journal. parley-keyd status compares the log with the head the daemon
// reported last: a log cut or rewritten under the daemon no longer holds
// it. The file is as much within the daemon user's reach as the log
// itself, so it catches mistakes and careless tools, not an attacker who
// is that user; a signed checkpoint kept outside the daemon's reach is
// what answers that (docs/audit.md).
const HeadReportFile = "audit.head"

// HeadReport is the content of HeadReportFile.
type HeadReport struct {
	Seq   uint64 `json:"seq"`
	Hash  string `json:"hash"`
	Event string `json:"event"` // "start" or "stop"
	PID   int    `json:"pid"`
	Time  string `json:"time"` // RFC 3339, UTC
	// Principal is the key the daemon signs with: status compares it
	// with the state folder's when it may not ask the daemon itself.
	Principal string `json:"principal,omitempty"`
}

// ReadHeadReport reads the head the daemon reported last in state.
func ReadHeadReport(state string) (HeadReport, error) {
	var r HeadReport
	b, err := os.ReadFile(filepath.Join(state, HeadReportFile))
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: %w", HeadReportFile, err)
	}
	if r.Event != "start" && r.Event != "stop" {
		return r, fmt.Errorf("%s: event %q is neither start nor stop", HeadReportFile, r.Event)
	}
	return r, nil
}

// reportHead writes the log's head to the journal and to HeadReportFile,
// replacing it durably. A failure is logged: the log itself is intact.
func (d *Daemon) reportHead(event string) {
	if d.log == nil || d.opts.State == "" {
		return
	}
	h := d.log.Head()
	r := HeadReport{Seq: h.Seq, Hash: h.Hash, Event: event, PID: os.Getpid(), Time: time.Now().UTC().Format(time.RFC3339), Principal: d.principal}
	d.logf("audit log head at %s: record %d, hash %s", event, h.Seq, h.Hash)
	b, _ := json.Marshal(r)
	if err := durable.ReplaceFile(filepath.Join(d.opts.State, HeadReportFile), append(b, '\n'), 0o600, nil); err != nil {
		d.logf("could not write %s: %v", HeadReportFile, err)
	}
}

// String says what was reported, when and by whom.
func (r HeadReport) String() string {
	return fmt.Sprintf("%d records, head %s, reported at %s by pid %d at %s", r.Seq, r.Hash, r.Event, r.PID, r.Time)
}
