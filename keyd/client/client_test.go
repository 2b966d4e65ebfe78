package client

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testpeer.Cleanup()
	os.Exit(code)
}

// serverHelperEnv tells TestServerHelper where to listen.
const serverHelperEnv = "PARLEY_CLIENT_SERVER"

// TestServerHelper runs as another OS user in a child process: it serves a
// socket at the path given, prints "listening", and then, for each
// connection, how many bytes the client sent before it left.
func TestServerHelper(t *testing.T) {
	sock := os.Getenv(serverHelperEnv)
	if sock == "" {
		return // an ordinary test run: this runs only as a helper process
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Chmod(sock, 0o666)
	fmt.Println("listening")
	for {
		nc, err := ln.Accept()
		if err != nil {
			os.Exit(0)
		}
		go func() {
			defer nc.Close()
			nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, _ := bufio.NewReader(nc).Discard(1 << 20)
			fmt.Printf("received %d\n", n)
		}()
	}
}

// TestDialChecksServer: a socket served by another user than root, this
// one, or the ones named is refused before a byte is sent, with an error
// that names the user that serves it.
func TestDialChecksServer(t *testing.T) {
	testpeer.RequirePeers(t)
	stranger := testpeer.Name("stranger")
	uid, gid := testpeer.EnsureUser(t, stranger)
	// A folder anyone may write to, such as /tmp: the stranger got there
	// first.
	dir := testpeer.SharedDir(t)
	if err := os.Chmod(dir, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "agent.sock")
	cmd := testpeer.Helper(t, uid, gid, nil, "TestServerHelper", serverHelperEnv+"="+sock)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := make(chan string, 8)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func() string {
		t.Helper()
		select {
		case l := <-lines:
			return l
		case <-time.After(15 * time.Second):
			t.Fatal("the server helper said nothing")
		}
		return ""
	}
	if l := next(); l != "listening" {
		t.Fatalf("helper: %q", l)
	}

	_, err = Dial(sock)
	var se *ServerError
	if !errors.Is(err, ErrWrongServer) || !errors.As(err, &se) || se.UID != uid || !strings.Contains(err.Error(), stranger) {
		t.Fatalf("Dial = %v; want a ServerError naming %s", err, stranger)
	}
	if l := next(); l != "received 0" {
		t.Errorf("the refused server %s", l)
	}
	// Named as the daemon's user, by name or uid, it is accepted.
	for _, who := range []string{stranger, fmt.Sprint(uid)} {
		c, err := DialWith(sock, Options{ServerUsers: []string{"nobody-such", who}})
		if err != nil {
			t.Fatalf("DialWith(ServerUsers: %s) = %v", who, err)
		}
		c.Close()
		next()
	}
}
