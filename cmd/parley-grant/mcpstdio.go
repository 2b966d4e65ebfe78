package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxMCPLine bounds one JSON-RPC message read from the client. A tool call
// carries at most a consent frame and a PROPOSALS frame of 1 MiB each (§2.1),
// which JSON string escaping can make larger; more is refused, not buffered.
const maxMCPLine = 4 << 20

// stdioTransport is the MCP transport of parley-grant mcp: newline-delimited
// JSON-RPC on stdin and stdout, like the SDK's StdioTransport, except that a
// line that is not one JSON-RPC message gets a JSON-RPC error (parse error,
// invalid request) and the server reads on. The SDK's own reader ends the
// session at the first such line, so one stray byte from a client, or from
// whatever writes to the agent's pipes, would take every tool away.
type stdioTransport struct {
	in  io.Reader
	out io.Writer
}

// Connect starts the filter and returns the SDK's connection over what
// passes it.
func (t *stdioTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	pr, pw := io.Pipe()
	out := &lineWriter{w: t.out}
	go filterMessages(t.in, pw, out)
	return (&mcp.IOTransport{Reader: pr, Writer: out}).Connect(ctx)
}

// lineWriter serializes writes to the client: the SDK writes each message
// with one Write, and the filter's error replies go between them, never
// inside one.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// What the client shows may reach a terminal: no control, bidi or
	// invisible character goes out raw (escapeJSONText keeps values).
	if _, err := l.w.Write(escapeJSONText(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (l *lineWriter) Close() error { return nil }

// filterMessages copies the lines of in that hold one JSON-RPC message to
// sdk, and answers every other line on out. It closes sdk when in ends.
func filterMessages(in io.Reader, sdk *io.PipeWriter, out io.Writer) {
	r := bufio.NewReaderSize(in, 64<<10)
	for {
		line, err := readLine(r, maxMCPLine)
		line = bytes.TrimSpace(line)
		switch {
		case errors.Is(err, errLineTooLong):
			replyError(out, nil, jsonrpc.CodeInvalidRequest, "message too large: at most 4 MiB per line")
		case len(line) == 0:
		default:
			if ok := checkMessage(line, out); ok {
				if _, werr := sdk.Write(append(line, '\n')); werr != nil {
					return
				}
			}
		}
		if err != nil && !errors.Is(err, errLineTooLong) {
			sdk.Close()
			return
		}
	}
}

var errLineTooLong = errors.New("line too long")

// readLine returns the next line of r without its newline. A line longer
// than max is read to its end and dropped, with errLineTooLong. At the end of
// r it returns what is left and io.EOF.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	long := false
	for {
		chunk, err := r.ReadSlice('\n')
		if !long {
			if len(line)+len(chunk) > max+1 {
				long, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil:
			if long {
				return nil, errLineTooLong
			}
			return line, err
		case long:
			return nil, errLineTooLong
		}
		return bytes.TrimSuffix(line, []byte("\n")), nil
	}
}

// checkMessage reports whether line is one JSON-RPC message the SDK can
// take; otherwise it answers it on out.
func checkMessage(line []byte, out io.Writer) bool {
	if !json.Valid(line) {
		replyError(out, nil, jsonrpc.CodeParseError, "parse error: a line is not one JSON value")
		return false
	}
	if line[0] != '{' {
		// The protocol since 2025-06-18 has no batches; an array or a
		// scalar is no message.
		replyError(out, nil, jsonrpc.CodeInvalidRequest, "invalid request: send one JSON-RPC message object per line")
		return false
	}
	if _, err := jsonrpc.DecodeMessage(line); err != nil {
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		json.Unmarshal(line, &m)
		replyError(out, m.ID, jsonrpc.CodeInvalidRequest, "invalid request: not a JSON-RPC 2.0 request, notification or response")
		return false
	}
	return true
}

// replyError writes a JSON-RPC error response. id is the request's id when
// it could be read and is a string or a number, else null.
func replyError(out io.Writer, id json.RawMessage, code int, message string) {
	var v any
	if json.Unmarshal(id, &v) != nil {
		id = nil
	}
	switch v.(type) {
	case string, float64:
	default:
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   jsonrpc.Error   `json:"error"`
	}{"2.0", id, jsonrpc.Error{Code: int64(code), Message: message}})
	out.Write(append(b, '\n'))
}
