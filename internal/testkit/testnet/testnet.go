// Package testnet gives tests a private network peer: a network namespace
// joined to the host by a veth pair, with a /30 of 10.231.0.0/16 on it. A
// process run inside the namespace (NS.Command) reaches the host only at
// HostIP, and the host sees its connections come from PeerIP, which is not
// an address of the host. Nothing else is routed: test traffic stays on the
// link the test made.
//
// Creating namespaces needs root and the ip command (iproute2). New skips
// the test when it cannot have them, except under PARLEY_REQUIRE_PEERS=1,
// where it fails (see internal/testkit/testpeer). Everything New makes is removed
// when the test ends, processes left in the namespace included.
package testnet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"golang.org/x/sys/unix"
)

// NS is a network namespace joined to the host by a veth pair.
type NS struct {
	// Name is the namespace's name, as `ip netns` knows it.
	Name string
	// HostIf and PeerIf are the veth ends on the host and in the namespace.
	HostIf, PeerIf string
	// HostIP is the host's end (10.231.N.1), PeerIP the namespace's
	// (10.231.N.2).
	HostIP, PeerIP netip.Addr
}

// lockPath serializes the choice of a free /30 between test processes.
var lockPath = filepath.Join(os.TempDir(), "parley-testnet.lock")

// New creates a namespace named "pkd-PREFIX-XXXX" with a veth pair whose
// host end is 10.231.N.1/30 and namespace end 10.231.N.2/30, for a N no
// interface of the host uses yet, both ends and the namespace's loopback up.
// It is removed by t.Cleanup.
func New(t testing.TB, prefix string) *NS {
	t.Helper()
	testpeer.RequireRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		testpeer.Unavailable(t, "needs the ip command (Debian package iproute2) for network namespaces")
	}
	suffix := randomHex(2)
	n := &NS{
		Name:   fmt.Sprintf("pkd-%s-%s", prefix, suffix),
		HostIf: "pkdh-" + suffix,
		PeerIf: "pkdn-" + suffix,
	}
	unlock := lock(t)
	defer unlock()
	third, err := freeSubnet()
	if err != nil {
		t.Fatal(err)
	}
	n.HostIP = netip.AddrFrom4([4]byte{10, 231, third, 1})
	n.PeerIP = netip.AddrFrom4([4]byte{10, 231, third, 2})

	if out, err := exec.Command("ip", "netns", "add", n.Name).CombinedOutput(); err != nil {
		testpeer.Unavailable(t, fmt.Sprintf("cannot create a network namespace: ip netns add: %v: %s", err, strings.TrimSpace(string(out))))
	}
	t.Cleanup(n.remove)
	steps := [][]string{
		{"link", "add", n.HostIf, "type", "veth", "peer", "name", n.PeerIf, "netns", n.Name},
		{"addr", "add", n.HostIP.String() + "/30", "dev", n.HostIf},
		{"link", "set", n.HostIf, "up"},
		{"-n", n.Name, "addr", "add", n.PeerIP.String() + "/30", "dev", n.PeerIf},
		{"-n", n.Name, "link", "set", n.PeerIf, "up"},
		{"-n", n.Name, "link", "set", "lo", "up"},
	}
	for _, args := range steps {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	n.waitUp(t)
	return n
}

// Command returns a command that runs name with args inside the namespace.
func (n *NS) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Prefix is the argument list that runs a program inside the namespace:
// prepend it to the program's own (for wrapper scripts).
func (n *NS) Prefix() []string { return []string{"ip", "netns", "exec", n.Name} }

// Dial connects to addr from inside the namespace, so that the peer sees
// the connection come from PeerIP. The connection stays in the namespace
// after. It serves as an http.Transport's DialContext.
func (n *NS) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Do runs f on an OS thread that has joined the namespace, so that sockets f
// makes (a connection, a netlink query) belong to the namespace.
func (n *NS) Do(f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(filepath.Join("/run/netns", n.Name))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- fmt.Errorf("joining %s: %w", n.Name, err)
			return
		}
		err = f()
		// Back to the host's namespace before the thread serves any
		// other goroutine; if that fails, the thread stays locked and
		// ends with this goroutine.
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		ch <- err
	}()
	return <-ch
}

// WaitRoute waits until the kernel's own route lookup in the namespace
// (ip route get ADDR) resolves addr to a route of type kind ("local",
// "anycast", "unicast"), or fails the test after 10 s. Routes the kernel
// derives from an address appear after the command that added the address
// has returned: IPv6 installs an address's local route and its
// subnet-router anycast route from the addrconf work queue once duplicate
// address detection is over (at once with nodad, but still later), and
// that work waits for the link to be ready and for the RTNL lock.
func (n *NS) WaitRoute(t testing.TB, addr, kind string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command("ip", "-n", n.Name, "route", "get", addr).CombinedOutput()
		got, _, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
		if err == nil && got == kind {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("in %s, %s never resolved to a %s route: ip route get: %v: %s", n.Name, addr, kind, err, strings.TrimSpace(string(out)))
		}
		time.Sleep(10 * time.Millisecond) // polling the kernel's routing table
	}
}

// waitUp waits until the host end of the link can be bound, which it can
// only once the address is no longer tentative.
func (n *NS) waitUp(t testing.TB) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ln, err := net.Listen("tcp", net.JoinHostPort(n.HostIP.String(), "0"))
		if err == nil {
			ln.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the veth address %s never became usable: %v", n.HostIP, err)
		}
		time.Sleep(10 * time.Millisecond) // polling the kernel's address state
	}
	// The kernel gives each veth end an IPv6 link-local address that stays
	// tentative until duplicate address detection ends, about a second
	// later; the address then changes, and a browser started in the
	// namespace meanwhile sees its network change and aborts a page load
	// (net::ERR_NETWORK_CHANGED). Wait until no address is tentative.
	for {
		out, err := exec.Command("ip", "-n", n.Name, "-6", "addr", "show", "tentative").CombinedOutput()
		if err == nil && len(strings.TrimSpace(string(out))) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("in %s, an IPv6 address is still tentative: %v: %s", n.Name, err, strings.TrimSpace(string(out)))
		}
		time.Sleep(20 * time.Millisecond) // polling the kernel's address state
	}
}

// remove kills what still runs in the namespace and deletes it with its veth
// pair.
func (n *NS) remove() {
	if out, err := exec.Command("ip", "netns", "pids", n.Name).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	exec.Command("ip", "netns", "del", n.Name).Run()
	// Deleting the namespace destroys its veth end, and with it the
	// host's; deleting the host end too makes sure of it.
	exec.Command("ip", "link", "del", n.HostIf).Run()
}

// freeSubnet returns a third octet N for which no host interface has an
// address in 10.231.N.0/30.
func freeSubnet() (byte, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return 0, err
	}
	used := map[byte]bool{}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip4 := ipn.IP.To4(); ip4 != nil && ip4[0] == 10 && ip4[1] == 231 {
				used[ip4[2]] = true
			}
		}
	}
	start := randomByte()
	for i := 0; i < 254; i++ {
		third := byte(1 + (int(start)+i)%254)
		if !used[third] {
			return third, nil
		}
	}
	return 0, errors.New("every 10.231.N.0/30 is in use")
}

// lock takes an exclusive flock shared by every test process on the
// machine, so that two never pick the same subnet.
func lock(t testing.TB) (unlock func()) {
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		t.Fatal(err)
	}
	return func() { f.Close() }
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func randomByte() byte {
	var b [1]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return b[0]
}
