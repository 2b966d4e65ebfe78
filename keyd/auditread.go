package keyd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// Approvers read the audit log through the daemon (AUDIT), since the log's
// files are readable by the daemon's user alone, and receive its signed
// checkpoints on their WATCH stream, so that they can keep the latest where
// the daemon's user cannot reach it (docs/audit.md, witnesses).

// auditFiles is an audit sink whose records can be read back: the daemon's
// audit.Log.
type auditFiles interface {
	Path() string
	Head() audit.Head
}

// checkpointFeed is an audit sink that signs checkpoints: the daemon's
// audit.Log.
type checkpointFeed interface {
	Subscribe() (<-chan *checkpoint.Checkpoint, func())
	LastCheckpoint() *checkpoint.Checkpoint
}

// maxAuditReads is how many AUDIT requests of one uid the daemon serves at
// once: each may wait up to auditWait, or read every segment.
const maxAuditReads = 2

// auditReaders counts the AUDIT requests in progress per uid.
type auditReaders struct {
	mu sync.Mutex
	n  map[uint32]int
}

func (a *auditReaders) acquire(uid uint32) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n[uid] >= maxAuditReads {
		return false
	}
	if a.n == nil {
		a.n = map[uint32]int{}
	}
	a.n[uid]++
	return true
}

func (a *auditReaders) release(uid uint32) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n[uid]--; a.n[uid] <= 0 {
		delete(a.n, uid)
	}
}

// auditWait bounds how long an AUDIT with "wait" waits for a new record,
// and auditPoll how often it looks.
const (
	auditWait = 25 * time.Second
	auditPoll = 200 * time.Millisecond
)

// auditRead answers AUDIT: a page of the records the query selects, as
// stored and as rendered for a person. With wait, an empty page is first
// waited for (a reader that follows the log).
func (s *Server) auditRead(r *request) (*protocol.Frame, error) {
	// Attack: an approver's user (perhaps an agent running as the
	// human's user) opening AUDIT reads by the dozen, each waiting or
	// scanning every segment. A few run at a time per uid.
	uid := r.caller.Identity.UID
	if !s.auditReads.acquire(uid) {
		return nil, &protocol.Error{Code: protocol.CodeLimit, Retry: 1,
			Message: fmt.Sprintf("%s already has %d audit reads in progress", r.caller.phrase(), maxAuditReads),
			Fix:     "wait for them to end: one reader that follows the log is enough"}
	}
	defer s.auditReads.release(uid)
	files, ok := s.audit.(auditFiles)
	if !ok {
		return nil, &protocol.Error{Code: protocol.CodeUnavailable, Message: "this daemon keeps no audit log it can read back"}
	}
	var q protocol.AuditQuery
	if r.f.Audit != nil {
		q = *r.f.Audit
	}
	limit := q.Limit
	if limit <= 0 || limit > protocol.MaxAuditPage {
		limit = protocol.MaxAuditPage
	}
	f := audit.Filter{FromSeq: q.From, GrantID: q.Grant}
	if q.Since != 0 {
		f.Since = time.Unix(q.Since, 0)
	}
	if q.Until != 0 {
		f.Until = time.Unix(q.Until, 0)
	}
	page, news, err := readAuditPage(files, f, limit)
	if err == nil && q.Wait && !news && !page.More {
		page, err = s.waitAuditPage(r.ctx, files, f, limit, page)
	}
	if err != nil {
		s.logf("AUDIT from %s: %v", r.caller.name(), err)
		return nil, &protocol.Error{Code: protocol.CodeUnavailable, Message: "the audit log could not be read", Retry: 5}
	}
	r.rec.Message = fmt.Sprintf("%d records from seq %d", len(page.Records), q.From)
	raw, err := json.Marshal(page)
	if err != nil {
		return nil, err
	}
	return &protocol.Frame{Kind: protocol.KindAudit, Data: raw}, nil
}

// waitAuditPage waits, at most auditWait and while ctx lasts, for a record
// that is news past the page it was given (one that is not the record of a
// read of the log, see isNews), then reads the page again. At the end of
// the wait it returns the page as it then stands.
//
// Attack (issue 20 item 3): a follower (parley-grant audit --follow) whose
// every AUDIT's own record woke its next one wrote 3,198 records in 5 s on
// an idle daemon, and two followers would wake each other for ever. Reads
// of the log wake no reader, whoever made them.
func (s *Server) waitAuditPage(ctx context.Context, files auditFiles, f audit.Filter, limit int, page protocol.AuditPage) (protocol.AuditPage, error) {
	deadline := time.NewTimer(auditWait)
	defer deadline.Stop()
	tick := time.NewTicker(auditPoll)
	defer tick.Stop()
	// seen is the last seq known to hold no news.
	seen := page.Head
	again := func() (protocol.AuditPage, error) {
		p, _, err := readAuditPage(files, f, limit)
		return p, err
	}
	for {
		select {
		case <-ctx.Done():
			return page, nil
		case <-deadline.C:
			return again()
		case <-tick.C:
			head := files.Head().Seq
			if head <= seen {
				continue
			}
			news, last, err := newsAfter(files, f, seen)
			if err != nil {
				return page, err
			}
			if news {
				return again()
			}
			// Everything up to head was read (the scan reads on to the
			// end): none of it is news for this reader.
			seen = max(seen, last, head)
		}
	}
}

// isNews reports whether a follower of the log is woken by rec: every
// record but one of a read of the log (an AUDIT or a WATCH, whoever made
// it, folded or not) and the log's checkpoints (which sign what is there
// and come with the next record that is news).
func isNews(rec *audit.Record) bool {
	if rec.Kind == audit.KindCheckpoint {
		return false
	}
	return rec.Verb != protocol.VerbAudit && rec.Verb != protocol.VerbWatch
}

var errNews = errors.New("news")

// newsAfter reports whether a record after seq after that f selects is
// news, and the last seq it read when none is. It reads from the first
// record after after on (audit.Read finds it by bisecting), so a reader
// that waits reads only what came while it waited.
func newsAfter(files auditFiles, f audit.Filter, after uint64) (news bool, last uint64, err error) {
	f.FromSeq = max(f.FromSeq, after+1)
	last = after
	err = audit.Read(files.Path(), f, func(_ []byte, rec *audit.Record) error {
		if isNews(rec) {
			return errNews
		}
		last = rec.Seq
		return nil
	})
	if errors.Is(err, errNews) {
		return true, last, nil
	}
	return false, last, err
}

var errPageFull = errors.New("page full")

// readAuditPage reads at most limit records (and MaxAuditPageBytes) that f
// selects, and reports whether one of them is news (isNews). Next is where
// the following page starts: after the last record read, or past the head
// when nothing more was there.
func readAuditPage(files auditFiles, f audit.Filter, limit int) (page protocol.AuditPage, news bool, err error) {
	page = protocol.AuditPage{Records: []json.RawMessage{}, Lines: []string{}}
	head := files.Head().Seq
	if f.FromSeq > head+1 {
		// Past the head: nothing to read (a follower ahead of the log).
		page.Next, page.Head = f.FromSeq, head
		return page, false, nil
	}
	size := 0
	err = audit.Read(files.Path(), f, func(line []byte, rec *audit.Record) error {
		if len(page.Records) >= limit || size+len(line) > protocol.MaxAuditPageBytes {
			page.More = true
			return errPageFull
		}
		page.Records = append(page.Records, json.RawMessage(append([]byte(nil), line...)))
		page.Lines = append(page.Lines, audit.FormatRecord(rec))
		page.Next = rec.Seq + 1
		size += len(line)
		news = news || isNews(rec)
		return nil
	})
	if err != nil && !errors.Is(err, errPageFull) {
		return page, news, err
	}
	page.Head = head
	if page.Next > 0 {
		page.Head = max(head, page.Next-1)
	}
	if !page.More {
		page.Next = max(page.Next, head+1, f.FromSeq)
	}
	return page, news, nil
}
