package audit

import (
	"errors"
	"fmt"
)

// HashAt returns record seq of the log whose active segment is at path:
// seq and the chain hash of its line, found by its seq in whichever segment
// holds it (bisecting that segment, so that the cost does not grow with the
// log). It does not verify the log: Verify does.
func HashAt(path string, seq uint64) (Head, error) {
	var h Head
	stop := errors.New("found")
	err := Read(path, Filter{FromSeq: seq}, func(line []byte, rec *Record) error {
		if rec.Seq == seq {
			h = Head{Seq: seq, Hash: lineHash(line)}
		}
		return stop
	})
	if err != nil && err != stop {
		return Head{}, err
	}
	if h.Seq == 0 {
		return Head{}, fmt.Errorf("record %d is in no segment of %s", seq, path)
	}
	return h, nil
}
