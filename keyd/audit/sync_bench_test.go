package audit

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkWriteSync measures issue 15's lever on this machine's disk: the
// log's tail preallocated (zeros written ahead and fsynced once a MiB), each
// record written in place and made durable with fdatasync, which then has
// no size or extent change to journal; against what the log does, an
// O_APPEND write and fsync, and an O_APPEND write and fdatasync (which must
// journal the new size anyway). One record of a grant's size per op, the
// latency case; in the same run, so the figures compare (docs/audit.md).
func BenchmarkWriteSync(b *testing.B) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	rec := auditTestRecords(1)[0]
	rec.Prev, rec.Time, rec.Seq = lineHash([]byte("x")), "2030-01-02T03:04:05.123456789Z", 123456
	enc.Encode(&rec)
	line := buf.Bytes()
	dir := b.TempDir()
	if d := os.Getenv("PARLEY_BENCH_DIR"); d != "" {
		dir = d
	}
	b.Run("append+fsync", func(b *testing.B) {
		f, _ := os.OpenFile(filepath.Join(dir, "a"), os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
		defer f.Close()
		for b.Loop() {
			f.Write(line)
			unix.Fsync(int(f.Fd()))
		}
	})
	b.Run("append+fdatasync", func(b *testing.B) {
		f, _ := os.OpenFile(filepath.Join(dir, "b"), os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
		defer f.Close()
		for b.Loop() {
			f.Write(line)
			unix.Fdatasync(int(f.Fd()))
		}
	})
	b.Run("prealloc+pwrite+fdatasync", func(b *testing.B) {
		f, _ := os.OpenFile(filepath.Join(dir, "c"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		defer f.Close()
		zeros := make([]byte, 1<<20)
		var off, end int64
		for b.Loop() {
			if off+int64(len(line)) > end {
				f.WriteAt(zeros, end)
				unix.Fsync(int(f.Fd()))
				end += int64(len(zeros))
			}
			f.WriteAt(line, off)
			unix.Fdatasync(int(f.Fd()))
			off += int64(len(line))
		}
	})
}
