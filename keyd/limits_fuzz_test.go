package keyd

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// FuzzFrameReaderHold is FuzzFrameReader with a frame budget: Hold refuses
// the bytes of any frame past budget, as the daemon's does when its share
// is used up. A refused frame must be skipped whole and reported as
// refused, unless it is over 1 MiB (then ErrFrameTooLarge); every other
// frame must come through as without a budget; the reader must stay in step
// with the input; and what Hold accepted for a frame never exceeds budget.
func FuzzFrameReaderHold(f *testing.F) {
	f.Add([]byte(`{"parley":1,"id":"1","verb":"HELLO"}`+"\n"+`{"parley":1,"id":"2","verb":"HELLO"}`+"\n"), uint16(0), uint16(0), uint16(4096), uint16(1))
	f.Add([]byte("short\nlong line that does not fit\nok\n"), uint16(0), uint16(0), uint16(3), uint16(0))
	f.Add([]byte("x\nnext\n"), uint16(32768), uint16(0), uint16(7), uint16(100))
	f.Add([]byte("xy\nnext\n"), uint16(32768), uint16(1), uint16(4097), uint16(40000))
	f.Add([]byte("start\nno newline at all"), uint16(400), uint16(9), uint16(65535), uint16(50))
	errRefused := errors.New("refused")
	f.Fuzz(func(t *testing.T, data []byte, pad, at, chunk, budget32 uint16) {
		in := data
		if pad > 0 {
			i := int(at) % (len(data) + 1)
			in = make([]byte, 0, len(data)+int(pad)*32)
			in = append(in, data[:i]...)
			in = append(in, bytes.Repeat([]byte("0123456789abcdef0123456789abcdef"), int(pad))...)
			in = append(in, data[i:]...)
		}
		budget := int(budget32) * 32
		// The model: frameModel, then lines whose bytes with their newline
		// exceed the budget are refused, and so is a last line without a
		// newline that does (which then ends the stream at io.EOF).
		frames, tooLarge, end := frameModel(in)
		lines := bytes.Split(in, []byte("\n"))
		if last := lines[len(lines)-1]; end == io.ErrUnexpectedEOF && len(last) > budget {
			end = io.EOF
		}
		held := 0
		fr := protocol.NewFrameReader(chunkReader{bytes.NewReader(in), max(1, int(chunk))})
		fr.Hold = func(n int) error {
			if held+n > budget {
				return errRefused
			}
			held += n
			return nil
		}
		for i := 0; ; i++ {
			held = 0
			got, err := fr.Next()
			if held > budget {
				t.Fatalf("line %d: held %d bytes of a budget of %d", i, held, budget)
			}
			if i == len(frames) {
				if got != nil || err != end {
					t.Fatalf("after %d lines: got %q, %v; want the end, %v", i, got, err, end)
				}
				return
			}
			refused := !tooLarge[i] && len(lines[i])+1 > budget
			switch {
			case tooLarge[i]:
				if got != nil || !errors.Is(err, protocol.ErrFrameTooLarge) {
					t.Fatalf("line %d of %d bytes: got %d bytes, %v; want ErrFrameTooLarge", i, len(lines[i]), len(got), err)
				}
			case refused:
				if got != nil || !errors.Is(err, errRefused) {
					t.Fatalf("line %d of %d bytes, budget %d: got %d bytes, %v; want it refused", i, len(lines[i]), budget, len(got), err)
				}
			case err != nil:
				t.Fatalf("line %d: %v; want %q", i, err, frames[i])
			case !bytes.Equal(got, frames[i]):
				t.Fatalf("line %d: got %q, want %q", i, got, frames[i])
			}
		}
	})
}
