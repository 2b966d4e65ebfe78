package client

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// scriptedDaemon listens on a real Unix socket and runs serve on the first
// connection.
func scriptedDaemon(t *testing.T, serve func(nc net.Conn, r *bufio.Reader)) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		serve(nc, bufio.NewReader(nc))
	}()
	c, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func readID(t *testing.T, r *bufio.Reader) string {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return ""
	}
	var f protocol.Frame
	if err := json.Unmarshal(line, &f); err != nil {
		t.Errorf("daemon got a bad frame %q", line)
	}
	return f.ID
}

// TestClientCancelMidFrame ends a request's context while its goroutine, as
// the reader, has read half of another request's reply. The half must not be
// lost: the next reader completes the frame, and the other request gets it.
func TestClientCancelMidFrame(t *testing.T) {
	gotA, gotB, halfSent, aDone := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	c := scriptedDaemon(t, func(nc net.Conn, r *bufio.Reader) {
		readID(t, r)
		close(gotA)
		idB := readID(t, r)
		close(gotB)
		reply := fmt.Sprintf(`{"parley":1,"id":"b","re":%q,"kind":"OK","message":"%0200d"}`+"\n", idB, 7)
		nc.Write([]byte(reply[:100]))
		close(halfSent)
		<-aDone
		nc.Write([]byte(reply[100:]))
		r.ReadByte() // until the client closes
	})
	ctxA, cancelA := context.WithCancel(context.Background())
	errA := make(chan error, 1)
	go func() {
		_, err := c.Do(ctxA, &protocol.Frame{Verb: protocol.VerbPending}, nil)
		errA <- err
	}()
	<-gotA
	// A waits alone, so it takes the reader token.
	for deadline := time.Now().Add(10 * time.Second); len(c.reader) != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("request A never took the reader token")
		}
	}
	replyB := make(chan *protocol.Frame, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := c.Do(ctx, &protocol.Frame{Verb: protocol.VerbPending}, nil)
		if err != nil {
			t.Errorf("request B: %v", err)
		}
		replyB <- r
	}()
	<-gotB
	<-halfSent
	time.Sleep(20 * time.Millisecond) // let A's read take the half in
	cancelA()
	if err := <-errA; !errors.Is(err, context.Canceled) {
		t.Fatalf("request A: %v, want context.Canceled", err)
	}
	close(aDone)
	if r := <-replyB; r == nil || r.Message != fmt.Sprintf("%0200d", 7) {
		t.Fatalf("request B got %+v", r)
	}
}

// TestClientManyWaiters sends requests from many goroutines on one client to
// a daemon that answers them out of order, with events in between: every
// request gets its own reply and its own events, whichever goroutine reads.
func TestClientManyWaiters(t *testing.T) {
	const goroutines, each = 16, 40
	c := scriptedDaemon(t, func(nc net.Conn, r *bufio.Reader) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range goroutines * each {
			id := readID(t, r)
			if id == "" {
				break
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
				mu.Lock()
				defer mu.Unlock()
				fmt.Fprintf(nc, `{"parley":1,"id":"e","re":%q,"kind":"EVENT","message":"event for %s"}`+"\n", id, id)
				fmt.Fprintf(nc, `{"parley":1,"id":"r","re":%q,"kind":"OK","message":"reply to %s"}`+"\n", id, id)
			}()
		}
		wg.Wait()
		r.ReadByte()
	})
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				var events []string
				f := &protocol.Frame{Verb: protocol.VerbPending}
				r, err := c.Do(ctx, f, func(e *protocol.Frame) { events = append(events, e.Message) })
				cancel()
				if err != nil {
					errs <- err
					return
				}
				if r.Message != "reply to "+f.ID || len(events) != 1 || events[0] != "event for "+f.ID {
					errs <- fmt.Errorf("request %s got %q with events %q", f.ID, r.Message, events)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestClientRefusedConnection checks that a refusal of the whole connection
// (an ERROR with re empty, then the daemon closes) reaches the request as
// the daemon's *Error, whoever reads it.
func TestClientRefusedConnection(t *testing.T) {
	c := scriptedDaemon(t, func(nc net.Conn, r *bufio.Reader) {
		fmt.Fprintf(nc, `{"parley":1,"id":"x","kind":"ERROR","code":"unauthorized","message":"not allowed"}`+"\n")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 {
		_, err := c.Do(ctx, &protocol.Frame{Verb: protocol.VerbHello}, nil)
		var e *protocol.Error
		if !errors.As(err, &e) || e.Code != protocol.CodeUnauthorized {
			t.Fatalf("got %v, want the daemon's unauthorized", err)
		}
	}
}

// TestClientGrantReply drives Client.Grant against a scripted daemon: the
// reply decoded in one pass by the waiting goroutine must be the reply the
// general path decodes, events before it still reach the caller, and a
// reply without a token is refused either way.
func TestClientGrantReply(t *testing.T) {
	hello := func(nc net.Conn, r *bufio.Reader) {
		id := readID(t, r)
		fmt.Fprintf(nc, `{"parley":1,"id":"h","re":%q,"kind":"BRIEF","data":{"principal":"ed25519:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}}`+"\n", id)
	}
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		data string
		want *protocol.GrantResult
	}{
		"ok": {`{"token":"pg1.x","grant_id":"g","expires":5,"caveats":[{"svc":["a.example"]}],"decision":"ask","rule":"r","approver":"alice","channel":"terminal","strength":"strong","narrowed":["n"],"request":"r_1"}`,
			&protocol.GrantResult{Token: "pg1.x", GrantID: "g", Expires: 5, Caveats: []grant.Caveat{grant.Svc("a.example")}, Decision: "ask", Rule: "r",
				Approver: "alice", Channel: "terminal", Strength: "strong", Narrowed: []string{"n"}, RequestID: "r_1"}},
		"fail/no-token": {`{"decision":"auto"}`, nil},
	} {
		t.Run(name, func(t *testing.T) {
			c := scriptedDaemon(t, func(nc net.Conn, r *bufio.Reader) {
				hello(nc, r)
				id := readID(t, r)
				fmt.Fprintf(nc, `{"parley":1,"id":"e","re":%q,"kind":"EVENT","message":"waiting","data":{"request":"r_1","code":"47"}}`+"\n", id)
				fmt.Fprintf(nc, `{"parley":1,"id":"g","re":%q,"kind":"GRANT","data":%s}`+"\n", id, tc.data)
				r.ReadByte()
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var events []protocol.Event
			res, err := c.Grant(ctx, key, []grant.Caveat{grant.Svc("a.example")}, func(e protocol.Event) { events = append(events, e) })
			if len(events) != 1 || events[0].Code != "47" {
				t.Errorf("events %+v", events)
			}
			if tc.want == nil {
				if err == nil {
					t.Fatalf("accepted %+v", res)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, res); diff != "" {
				t.Fatalf("reply (-want +got):\n%s", diff)
			}
		})
	}
}
