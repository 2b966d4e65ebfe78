package audit

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestReadFromSeqSeeks: a reader from a seq reads the same records whether
// the log is bisected or read from its start, for every seq, with records
// of very different sizes (up to near MaxRecord), checkpoints among them
// and a preallocated NUL tail; and one after the last records of a long
// segment reads little of it.
func TestReadFromSeqSeeks(t *testing.T) {
	o := signedOptions(newTestClock())
	o.CheckpointEvery = 37
	o.Preallocate = 16 << 10
	path := filepath.Join(t.TempDir(), "audit.log")
	l := openWith(t, o, path)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 400; i++ {
		size := rng.IntN(300)
		if rng.IntN(20) == 0 {
			size = 30000 + rng.IntN(20000)
		}
		auditTestAppend(t, l, Record{Kind: KindRequest, Verb: "HELLO", Message: strings.Repeat("m", size)})
	}
	head := l.Head().Seq
	all := readSeqs(t, path, 0)
	if uint64(len(all)) != head {
		t.Fatalf("read %d records, head %d", len(all), head)
	}
	for from := uint64(0); from <= head+2; from++ {
		got := readSeqs(t, path, from)
		var want []uint64
		for _, s := range all {
			if s >= from {
				want = append(want, s)
			}
		}
		if len(got) != len(want) || len(got) > 0 && (got[0] != want[0] || got[len(got)-1] != want[len(want)-1]) {
			t.Fatalf("from %d: read seqs %v…, want %v…", from, head3(got), head3(want))
		}
	}
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	fi, _ := file.Stat()
	if off := seekSeq(file, head); fi.Size()-off > 2*(MaxRecord+64)+int64(o.Preallocate) {
		t.Errorf("a reader of the last record starts at %d of %d bytes", off, fi.Size())
	}
	mustClose(t, l)
}

func readSeqs(t *testing.T, path string, from uint64) []uint64 {
	t.Helper()
	var seqs []uint64
	if err := Read(path, Filter{FromSeq: from}, func(_ []byte, rec *Record) error {
		seqs = append(seqs, rec.Seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return seqs
}

func head3(s []uint64) []uint64 { return s[:min(3, len(s))] }

// FuzzLineSeq: lineSeq reads exactly the seq of a line that starts as the
// log writes records, and refuses anything else, whatever the bytes.
func FuzzLineSeq(f *testing.F) {
	f.Add([]byte(`{"seq":12,"prev":"x"}`))
	f.Add([]byte(`{"seq":,`))
	f.Add([]byte("\x00\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		seq, ok := lineSeq(b)
		if !ok {
			return
		}
		if want := `{"seq":` + strconv.FormatUint(seq, 10) + `,`; !strings.HasPrefix(string(b), want) {
			t.Fatalf("lineSeq(%q) = %d", b, seq)
		}
	})
}
