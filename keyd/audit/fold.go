package audit

import (
	"encoding/json"
	"sync"
	"time"
)

// maxFoldRuns bounds the table of records being folded. Past it, a record
// that would start a new run is appended on its own: folding saves space, it
// must not cost memory without bound either.
const maxFoldRuns = 4096

type folds struct {
	mu        sync.Mutex
	runs      map[string]*foldRun
	unwritten []*foldRun // runs ended whose record is not written yet
}

type foldRun struct {
	rec   Record // as first written, bounded
	until time.Time
	count int
	first time.Time
	last  time.Time
	ids   []string
}

func (f *folds) init() { f.runs = map[string]*foldRun{} }

// AppendFolded is Append for refusals that a caller may repeat in a flood:
// records of kind deny, timeout, withdrawn, error, request or decide (every
// record but a grant's, a start, a stop and a reload). The first of a run is
// appended at once (seq > 0, folded false). A record alike in everything but
// its request id, time and process id that comes within Options.FoldWindow
// of it is counted instead (seq 0, folded true): when the window ends, one
// record of the same kind with "folded" says how many there were, when the
// first and last came, and up to 8 of their request ids. So a flood of
// identical refusals costs a record per window, and none goes unrecorded.
//
// A counted record is durable only once its window ends (the refusal it
// stands for is answered before): if the daemon dies meanwhile, the counts
// of the last window are lost, and the next start's "recovered" record says
// the run ended without its stop checkpoint. Grants are never folded:
// records of other kinds go to Append.
func (l *Log) AppendFolded(rec Record) (seq uint64, folded bool, err error) {
	return l.AppendFoldedFor(rec, l.o.FoldWindow)
}

// AppendFoldedFor is AppendFolded with a window of its own: repeats that
// come within window of the run's first record are counted into one record
// written when the window ends (at the latest when the log closes). The
// daemon folds the refusals of a caller past its rate for as long as the
// rate's horizon, so that such a caller adds a record or two a minute, not
// one a second (DESIGN.md property 14). A window of zero or less is
// Options.FoldWindow.
func (l *Log) AppendFoldedFor(rec Record, window time.Duration) (seq uint64, folded bool, err error) {
	if window <= 0 {
		window = l.o.FoldWindow
	}
	switch rec.Kind {
	case KindDeny, KindTimeout, KindWithdrawn, KindError, KindRequest, KindDecide:
	default:
		seq, err = l.Append(rec)
		return seq, false, err
	}
	// The run keeps the record as Append will write it; Append gets the
	// caller's, so that what it cuts is named in the record.
	b := rec
	b.Seq, b.Prev, b.Time = 0, "", ""
	b.Cut, b.Folded, b.Checkpoint = nil, nil, nil
	bound(&b)
	key := foldKey(b)
	now := l.now()
	l.folds.mu.Lock()
	run := l.folds.runs[key]
	if run != nil && now.Before(run.until) {
		if run.count == 0 {
			run.first = now
		}
		run.count++
		run.last = now
		if len(run.ids) < maxFoldIDs && b.RequestID != "" {
			run.ids = append(run.ids, cutString(b.RequestID, maxFoldIDSize))
		}
		l.folds.mu.Unlock()
		return 0, true, nil
	}
	// The run starts before its first record is written, so that repeats
	// that come while it is written fold into it. Attack: thirty-two
	// requests in flight that each found no run while the first one's
	// record waited for its fsync, and were each written on their own.
	// A run whose window ended, with counts not yet written, is written at
	// the next flush; until then its repeats start the next run (else
	// each of them would be written on its own until that flush).
	if run != nil && run.count > 0 {
		l.folds.unwritten = append(l.folds.unwritten, run)
	}
	// Runs of a longer window (callers past their rate) have room of
	// their own past maxFoldRuns. Attack: a caller with a high rate that
	// fills the table with refusals each unlike the last, so that another
	// caller's repeats past its rate start no run and are each written.
	room := maxFoldRuns
	if window > l.o.FoldWindow {
		room = 2 * maxFoldRuns
	}
	if run != nil || len(l.folds.runs) < room {
		l.folds.runs[key] = &foldRun{rec: b, until: now.Add(window)}
	}
	l.folds.mu.Unlock()
	seq, err = l.Append(rec)
	if err != nil {
		return 0, false, err
	}
	return seq, false, nil
}

// foldKey identifies records alike but for request id, time and pid.
func foldKey(rec Record) string {
	rec.RequestID = ""
	if rec.Caller != nil {
		c := *rec.Caller
		c.PID = 0
		rec.Caller = &c
	}
	b, _ := json.Marshal(rec)
	return chainHash(b)
}

// flushFolds writes a record for every run whose window ended (every run,
// with all), holding wmu. Runs whose record cannot be written
// are kept, counts and all, for the next attempt.
func (l *Log) flushFolds(all bool) error {
	if !l.started.Load() {
		// A deferred log writes nothing before its open checkpoint; the
		// counts wait for it.
		return nil
	}
	now := l.now()
	l.folds.mu.Lock()
	runs := l.folds.unwritten
	l.folds.unwritten = nil
	for k, run := range l.folds.runs {
		if !all && now.Before(run.until) {
			continue
		}
		delete(l.folds.runs, k)
		if run.count > 0 {
			runs = append(runs, run)
		}
	}
	l.folds.mu.Unlock()
	if len(runs) == 0 {
		return nil
	}
	recs := make([]Record, len(runs))
	for i, run := range runs {
		rec := run.rec
		rec.RequestID = ""
		rec.Folded = &Folded{
			Count:      run.count,
			First:      run.first.UTC().Format(time.RFC3339Nano),
			Last:       run.last.UTC().Format(time.RFC3339Nano),
			RequestIDs: run.ids,
		}
		recs[i] = rec
	}
	if err := l.commitInternal(recs...); err != nil {
		l.folds.mu.Lock()
		l.folds.unwritten = append(l.folds.unwritten, runs...)
		l.folds.mu.Unlock()
		return err
	}
	return nil
}
