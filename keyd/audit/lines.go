package audit

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"io"
	"strconv"
)

// maxLine caps one line that readers accept. Append writes at most
// MaxRecord; older logs held records of up to 4 MiB, which still read. The
// cap keeps a corrupt or hostile file from making a reader buffer without
// end.
const maxLine = 4 << 20

// lineHash is the chain hash of one line (without its newline).
func lineHash(line []byte) string { return chainHash(line) }

// readLine returns the next line without its newline. complete is false
// for a last line that has no newline. Lines above maxLine are an error.
func readLine(br *bufio.Reader) (line []byte, complete bool, err error) {
	var long []byte
	for {
		chunk, err := br.ReadSlice('\n')
		switch {
		case err == nil:
			if long == nil {
				return chunk[:len(chunk)-1], true, nil
			}
			long = append(long, chunk[:len(chunk)-1]...)
			if len(long) > maxLine {
				return nil, false, fmt.Errorf("line longer than %d bytes", maxLine)
			}
			return long, true, nil
		case err == bufio.ErrBufferFull:
			long = append(long, chunk...)
			if len(long) > maxLine {
				return nil, false, fmt.Errorf("line longer than %d bytes", maxLine)
			}
		case err == io.EOF:
			long = append(long, chunk...)
			if len(long) == 0 {
				return nil, false, io.EOF
			}
			return long, false, nil
		default:
			return nil, false, err
		}
	}
}

// allZero reports whether b holds only NUL bytes.
func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// leadSeq reads the seq a record line starts with, {"seq":N, written as
// the log writes it (digits, no leading zero, at most 20), and returns the
// bytes after it.
func leadSeq(line []byte) (seq uint64, rest []byte, ok bool) {
	rest, found := bytes.CutPrefix(line, []byte(`{"seq":`))
	if !found {
		return 0, nil, false
	}
	i := 0
	for i < len(rest) && i < 20 && rest[i] >= '0' && rest[i] <= '9' {
		i++
	}
	if i == 0 || (i > 1 && rest[0] == '0') {
		return 0, nil, false
	}
	seq, err := strconv.ParseUint(string(rest[:i]), 10, 64)
	if err != nil {
		return 0, nil, false
	}
	return seq, rest[i:], true
}

// peek reads seq and prev from the start of a record as the log writes
// it: {"seq":N,"prev":"…",…}. ok is false for anything else.
func peek(line []byte) (seq uint64, prev string, ok bool) {
	seq, rest, ok := leadSeq(line)
	if !ok {
		return 0, "", false
	}
	rest, found := bytes.CutPrefix(rest, []byte(`,"prev":"`))
	if !found {
		return 0, "", false
	}
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return 0, "", false
	}
	if !isB64(string(rest[:end])) {
		return 0, "", false
	}
	return seq, string(rest[:end]), true
}

// isCheckpointLine is a cheap test for a checkpoint record as the log
// writes it: {"seq":…,"prev":"…","time":"…","kind":"checkpoint","checkpoint":{…}.
// It looks at the record's own fields only, in their place, so that text a
// caller put into a record (a caveat list can hold any JSON) cannot make a
// line look like a checkpoint.
func isCheckpointLine(line []byte) bool {
	if _, _, ok := peek(line); !ok {
		return false
	}
	i := bytes.Index(line, []byte(`,"prev":"`)) + len(`,"prev":"`)
	j := bytes.IndexByte(line[i:], '"')
	rest, ok := bytes.CutPrefix(line[i+j+1:], []byte(`,"time":"`))
	if !ok {
		return false
	}
	k := bytes.IndexByte(rest, '"')
	if k < 0 {
		return false
	}
	return bytes.HasPrefix(rest[k+1:], []byte(`,"kind":"checkpoint","checkpoint":{`))
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n *int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n += int64(n)
	return n, err
}

// tailLines reads f backwards from end and returns the complete lines of its
// last part, in order, with their offsets, up to and including the last
// line for which stop returns true, or all of them when none does. The bytes
// after the last newline (a torn or NUL-filled tail) are not a line here.
// read counts the bytes read.
func tailLines(f io.ReaderAt, end int64, stop func(line []byte) bool, read *int64) (lines [][]byte, offs []int64, err error) {
	const chunk = 64 << 10
	var buf []byte // the bytes from pos up to the last newline
	pos := end     // file offset of buf[0]
	examined := -1 // buf[examined:] has been split into lines; -1: no newline seen yet
	for pos > 0 {
		n := int64(chunk)
		if n > pos {
			n = pos
		}
		pos -= n
		b := make([]byte, n, n+int64(len(buf)))
		if _, err := f.ReadAt(b, pos); err != nil && err != io.EOF {
			return nil, nil, err
		}
		*read += n
		buf = append(b, buf...)
		if examined < 0 {
			i := bytes.LastIndexByte(buf, '\n')
			if i < 0 {
				buf = buf[:0]
				continue
			}
			buf = buf[:i+1]
			examined = len(buf)
		} else {
			examined += int(n)
		}
		// Lines end at examined-1 (a newline); split those that begin
		// inside buf. At the start of the file the first piece is a line.
		for examined > 0 {
			start := bytes.LastIndexByte(buf[:examined-1], '\n') + 1
			if start == 0 && pos != 0 {
				break // this line may begin before buf
			}
			line := buf[start : examined-1]
			lines = append(lines, line)
			offs = append(offs, pos+int64(start))
			examined = start
			if stop != nil && stop(line) {
				reverse(lines, offs)
				return lines, offs, nil
			}
		}
		if examined > maxLine+1 {
			return nil, nil, fmt.Errorf("line longer than %d bytes", maxLine)
		}
	}
	reverse(lines, offs)
	return lines, offs, nil
}

func reverse(lines [][]byte, offs []int64) {
	for i, j := 0, len(lines)-1; i < j; i, j = i+1, j-1 {
		lines[i], lines[j] = lines[j], lines[i]
		offs[i], offs[j] = offs[j], offs[i]
	}
}

// newLineReader buffers r for readLine, counting the bytes read into read.
func newLineReader(r io.Reader, read *int64) *bufio.Reader {
	return bufio.NewReaderSize(countingReader{r, read}, 64<<10)
}

// hasher computes a chain hash over bytes written in pieces.
type hasher struct{ h hash.Hash }

func newHasher() *hasher { return &hasher{sha256.New()} }

func (h *hasher) Write(b []byte) { h.h.Write(b) }

func (h *hasher) Sum() string { return base64.RawURLEncoding.EncodeToString(h.h.Sum(nil)) }

func isB64(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
