package main

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"time"
)

// rawClient is a GRANT client written from docs/protocol.md alone, the way
// an independent client would be: the standard library, one connection,
// one request at a time, the frames written by hand and the replies read
// with encoding/json. It is the yardstick for client.Client's own cost.
type rawClient struct {
	nc        net.Conn
	r         *bufio.Reader
	key       ed25519.PrivateKey
	holder    string // "ed25519:" + b64url of the public key
	principal string // from HELLO, the proof's aud
	n         int
	buf       []byte
	// lastReq and lastReply are the lengths of the last GRANT frame and its
	// reply, with their newlines: the echo floor sends frames of these sizes.
	lastReq, lastReply int
}

var b64url = base64.RawURLEncoding

func dialRaw(sock string) (*rawClient, error) {
	nc, err := net.Dial("unix", sock)
	if err != nil {
		return nil, err
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c := &rawClient{nc: nc, r: bufio.NewReaderSize(nc, 16<<10), key: key,
		holder: "ed25519:" + b64url.EncodeToString(key.Public().(ed25519.PublicKey))}
	var hello struct {
		Kind string `json:"kind"`
		Data struct {
			Principal string `json:"principal"`
		} `json:"data"`
	}
	if err := c.roundTrip([]byte(`{"parley":1,"id":"h","verb":"HELLO"}`+"\n"), &hello); err != nil {
		nc.Close()
		return nil, err
	}
	if hello.Kind != "BRIEF" || hello.Data.Principal == "" {
		nc.Close()
		return nil, fmt.Errorf("HELLO answered %q without a principal", hello.Kind)
	}
	c.principal = hello.Data.Principal
	return c, nil
}

func (c *rawClient) close() { c.nc.Close() }

// roundTrip sends one frame and decodes the next line into v.
func (c *rawClient) roundTrip(frame []byte, v any) error {
	if _, err := c.nc.Write(frame); err != nil {
		return err
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return err
	}
	c.lastReq, c.lastReply = len(frame), len(line)
	return json.Unmarshal(line, v)
}

// appendJSONString appends s as a JSON string. The bench's strings are
// plain ASCII without quotes or backslashes, so no escaping is needed.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// grant asks for a grant with the bench's caveats: svc cal.example, can
// calendar.find, exp now+1h, and checks that the policy issued it at once.
func (c *rawClient) grant() error {
	now := time.Now().Unix()
	// The grant object, written in canonical form (§10: keys sorted, no
	// spaces), so its digest is the SHA-256 of these very bytes.
	g := c.buf[:0]
	g = append(g, `{"caveats":[{"svc":["cal.example"]},{"can":["calendar.find"]},{"exp":`...)
	g = strconv.AppendInt(g, now+3600, 10)
	g = append(g, `}],"holder":`...)
	g = appendJSONString(g, c.holder)
	g = append(g, '}')
	sum := sha256.Sum256(g)
	target := b64url.EncodeToString(sum[:])
	// The proof: Ed25519 over canonical({"aud","target","ts","verb"}).
	msg := make([]byte, 0, 256)
	msg = append(msg, `{"aud":`...)
	msg = appendJSONString(msg, c.principal)
	msg = append(msg, `,"target":`...)
	msg = appendJSONString(msg, target)
	msg = append(msg, `,"ts":`...)
	msg = strconv.AppendInt(msg, now, 10)
	msg = append(msg, `,"verb":"GRANT"}`...)
	sig := ed25519.Sign(c.key, msg)

	c.n++
	f := make([]byte, 0, len(g)+320)
	f = append(f, `{"parley":1,"id":"`...)
	f = strconv.AppendInt(f, int64(c.n), 10)
	f = append(f, `","verb":"GRANT","grant":`...)
	f = append(f, g...)
	f = append(f, `,"proof":{"key":`...)
	f = appendJSONString(f, c.holder)
	f = append(f, `,"ts":`...)
	f = strconv.AppendInt(f, now, 10)
	f = append(f, `,"sig":"`...)
	f = b64url.AppendEncode(f, sig)
	f = append(f, "\"}}\n"...)
	c.buf = g

	var reply struct {
		Re      string `json:"re"`
		Kind    string `json:"kind"`
		Code    string `json:"code"`
		Message string `json:"message"`
		Data    struct {
			Token    string `json:"token"`
			Decision string `json:"decision"`
		} `json:"data"`
	}
	if err := c.roundTrip(f, &reply); err != nil {
		return err
	}
	switch {
	case reply.Kind == "ERROR":
		return fmt.Errorf("%s: %s", reply.Code, reply.Message)
	case reply.Kind != "GRANT" || reply.Re != strconv.Itoa(c.n) || reply.Data.Token == "":
		return fmt.Errorf("unexpected reply %q to request %d", reply.Kind, c.n)
	case reply.Data.Decision != "auto":
		return fmt.Errorf("grant decided by %q, want auto", reply.Data.Decision)
	}
	return nil
}

// rawClients connects n protocol clients, each with its own holder key.
func rawClients(sock string, n int) ([]op, func(), error) {
	var ops []op
	var clients []*rawClient
	closeAll := func() {
		for _, c := range clients {
			c.close()
		}
	}
	for i := 0; i < n; i++ {
		c, err := dialRaw(sock)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		clients = append(clients, c)
		ops = append(ops, c.grant)
	}
	return ops, closeAll, nil
}
