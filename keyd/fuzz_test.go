package keyd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/policies"
)

// chunkReader returns at most n bytes per Read, as a socket may.
type chunkReader struct {
	r io.Reader
	n int
}

func (c chunkReader) Read(p []byte) (int, error) {
	return c.r.Read(p[:min(len(p), c.n)])
}

// frameModel is what frameReader must return for in: one result per line,
// the model written from its contract rather than its code. A complete line
// longer than protocol.MaxFrame is protocol.ErrFrameTooLarge; any other is the line without
// its trailing "\r"s. A last line without a newline ends the stream: with
// io.ErrUnexpectedEOF when it holds more than white space and is no longer
// than a frame may grow before the reader gives up on it, else with io.EOF.
func frameModel(in []byte) (frames [][]byte, tooLarge []bool, end error) {
	lines := bytes.Split(in, []byte("\n"))
	last := lines[len(lines)-1]
	for _, l := range lines[:len(lines)-1] {
		if len(l) > protocol.MaxFrame {
			frames, tooLarge = append(frames, nil), append(tooLarge, true)
			continue
		}
		frames, tooLarge = append(frames, bytes.TrimRight(l, "\r")), append(tooLarge, false)
	}
	if len(last) > 0 && len(last) <= protocol.MaxFrame+1 && len(bytes.TrimSpace(last)) > 0 {
		return frames, tooLarge, io.ErrUnexpectedEOF
	}
	return frames, tooLarge, io.EOF
}

// FuzzFrameReader feeds arbitrary bytes, read in pieces of any size, to the
// daemon's frame reader. It must never panic, never return a frame over
// protocol.MaxFrame or one holding a newline, skip exactly the oversized lines and
// stay in step with the input after each (§2.1). pad inserts that many
// 32-byte runs at position at, so that the fuzzer reaches lines over 1 MiB.
func FuzzFrameReader(f *testing.F) {
	f.Add([]byte(`{"parley":1,"id":"1","verb":"HELLO"}`+"\n"), uint16(0), uint16(0), uint16(4096))
	f.Add([]byte("a\r\n\nb\r\r\n  \n tail"), uint16(0), uint16(0), uint16(1))
	// 32768 runs of 32 bytes are MaxFrame: lines of exactly protocol.MaxFrame and
	// one more, complete and as a last line without a newline.
	f.Add([]byte("\nnext\n"), uint16(32768), uint16(0), uint16(4095))
	f.Add([]byte("x\nnext\n"), uint16(32768), uint16(0), uint16(7))
	f.Add([]byte("x"), uint16(32768), uint16(0), uint16(4096))
	f.Add([]byte("xy"), uint16(32768), uint16(1), uint16(4097))
	f.Add([]byte("start\nno newline at all"), uint16(40000), uint16(9), uint16(65535))
	f.Add([]byte("\n\n\n"), uint16(0), uint16(0), uint16(2))
	f.Fuzz(func(t *testing.T, data []byte, pad, at, chunk uint16) {
		in := data
		if pad > 0 {
			i := int(at) % (len(data) + 1)
			in = make([]byte, 0, len(data)+int(pad)*32)
			in = append(in, data[:i]...)
			in = append(in, bytes.Repeat([]byte("0123456789abcdef0123456789abcdef"), int(pad))...)
			in = append(in, data[i:]...)
		}
		frames, tooLarge, end := frameModel(in)
		fr := protocol.NewFrameReader(chunkReader{bytes.NewReader(in), max(1, int(chunk))})
		for i := 0; ; i++ {
			got, err := fr.Next()
			if i == len(frames) {
				if got != nil || err != end {
					t.Fatalf("after %d lines: got %q, %v; want the end, %v", i, got, err, end)
				}
				return
			}
			switch {
			case tooLarge[i]:
				if got != nil || !errors.Is(err, protocol.ErrFrameTooLarge) {
					t.Fatalf("line %d of %d bytes: got %d bytes, %v; want protocol.ErrFrameTooLarge", i, len(in), len(got), err)
				}
			case err != nil:
				t.Fatalf("line %d: %v; want %q", i, err, frames[i])
			case len(got) > protocol.MaxFrame || bytes.IndexByte(got, '\n') >= 0:
				t.Fatalf("line %d: frame of %d bytes with a newline or over protocol.MaxFrame", i, len(got))
			case !bytes.Equal(got, frames[i]):
				t.Fatalf("line %d: got %q, want %q", i, got, frames[i])
			}
		}
	})
}

// newFuzzServer starts a daemon for FuzzServeFrame: the caller is an agent
// only, so that no verb waits (WATCH streams to approvers until the end,
// ask requests wait for a human), and approval times out at once anyway.
func newFuzzServer(tb testing.TB) string {
	dir := tb.TempDir()
	sock := filepath.Join(dir, "s")
	u, err := user.Current()
	if err != nil {
		tb.Fatal(err)
	}
	cfg, err := ParseConfig([]byte(DefaultConfig(sock, u.Username, "")), filepath.Join(dir, "config.toml"))
	if err != nil {
		tb.Fatal(err)
	}
	cfg.ApprovalTimeout.Duration = time.Millisecond
	pol, err := policies.Parse([]byte(testPolicy), "test.toml")
	if err != nil {
		tb.Fatal(err)
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	d, err := New(Options{Config: cfg, Policy: pol, Signer: key, State: dir})
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx, ln) }()
	tb.Cleanup(func() {
		stop()
		<-ran
	})
	return sock
}

// FuzzServeFrame sends arbitrary bytes to a running daemon over its socket,
// followed by a HELLO. The daemon must answer every line that is not empty
// with exactly one final reply, answer the HELLO, and then still answer on
// the same connection: a bad frame never costs the connection or the
// daemon (property 7).
func FuzzServeFrame(f *testing.F) {
	holder := grant.FormatPublicKey(make(ed25519.PublicKey, ed25519.PublicKeySize))
	for _, s := range []string{
		`{"parley":1,"id":"1","verb":"HELLO"}`,
		`{"parley":1,"id":"1","verb":"HELLO"}` + "\n" + `{"parley":1,"id":"1","verb":"HELLO"}`,
		`{"parley":1,"id":"g","verb":"GRANT","grant":{"holder":"` + holder + `","caveats":[{"can":["calendar.*"]}]},"proof":{"key":"` + holder + `","ts":1,"sig":"AA"}}`,
		`{"parley":1,"id":"e","verb":"EXPLAIN","grant":{"holder":"` + holder + `","caveats":[{"can":["mail.read"]},{"exp":99999999999}]}}`,
		`{"parley":1,"id":"c","verb":"CONSENT","service":"s","consent":{"hash":"h"},"proposal":{"proposals":[]},"holder":"` + holder + `"}`,
		`{"parley":1,"id":"w","verb":"WATCH"}` + "\n" + `{"parley":1,"id":"a","verb":"APPROVE","request":"r_x","match":"12"}`,
		`{"parley":1,"id":"p","verb":"PENDING"}` + "\r\n\r\n" + `{"parley":1,"id":"d","verb":"DENY","request":"r_x"}`,
		"{nope\n[1,2]\n\"str\"\nnull\n   \n",
		`{"parley":2,"id":"v","verb":"HELLO"}`,
		`{"parley":1,"id":"` + strings.Repeat("i", 129) + `","verb":"HELLO"}`,
		strings.Repeat(`{"parley":1,"id":"x","verb":"EXPLAIN","grant":{}}`+"\n", 80),
	} {
		f.Add([]byte(s))
	}
	sock := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 0 && data[len(data)-1] != '\n' {
			data = append(data[:len(data):len(data)], '\n')
		}
		want := 0
		for _, l := range bytes.Split(data, []byte("\n")) {
			if len(bytes.TrimRight(l, "\r\n")) > 0 {
				want++
			}
		}
		var rnd [16]byte
		rand.Read(rnd[:])
		sentinel := "sentinel-" + hex.EncodeToString(rnd[:])
		hello := []byte(`{"parley":1,"id":"` + sentinel + `","verb":"HELLO"}` + "\n")

		nc, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(20 * time.Second))
		wrote := make(chan error, 1)
		go func() {
			_, err := nc.Write(append(data[:len(data):len(data)], hello...))
			wrote <- err
		}()
		br := bufio.NewReaderSize(nc, 1<<16)
		read := func() protocol.Frame {
			line, err := br.ReadBytes('\n')
			if err != nil {
				t.Fatalf("reading replies: %v (input %q)", err, data)
			}
			var f protocol.Frame
			if err := json.Unmarshal(line, &f); err != nil || f.Parley != protocol.Version || f.Kind == "" {
				t.Fatalf("reply %q is not a frame: %v", line, err)
			}
			return f
		}
		gotSentinel := false
		for n := 0; n < want+1; {
			f := read()
			if f.Kind == protocol.KindEvent {
				continue
			}
			n++
			if f.Re == sentinel {
				if f.Kind != protocol.KindBrief {
					t.Fatalf("the HELLO after the input was answered %+v", f)
				}
				gotSentinel = true
			}
		}
		if !gotSentinel {
			t.Fatalf("%d replies, none to the HELLO after the input %q", want+1, data)
		}
		if err := <-wrote; err != nil {
			t.Fatal(err)
		}
		// Nothing else is owed: the next reply is to the next request.
		if _, err := nc.Write([]byte(`{"parley":1,"id":"` + sentinel + `-2","verb":"HELLO"}` + "\n")); err != nil {
			t.Fatal(err)
		}
		for {
			f := read()
			if f.Kind == protocol.KindEvent {
				continue
			}
			if f.Re != sentinel+"-2" || f.Kind != protocol.KindBrief {
				t.Fatalf("an extra reply %+v to input %q", f, data)
			}
			break
		}
	})
}
