package phone

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testnet"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
)

// TestKernelLocal checks the addresses the kernel delivers to this host but
// that no interface lists: an IPv6 subnet-router anycast address (present
// once IPv6 forwarding is on) and an AnyIP route. A process of any user can
// bind such an address and connect from it.
func TestKernelLocal(t *testing.T) {
	testpeer.RequireRoot(t)
	ns := testnet.New(t, "local")
	for _, args := range [][]string{
		{"sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"},
		{"ip", "-6", "addr", "add", "2001:db8:7::5/64", "dev", ns.PeerIf, "nodad"},
		{"ip", "route", "add", "local", "10.99.0.0/16", "dev", "lo"},
	} {
		if out, err := ns.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			testpeer.Unavailable(t, "setting up the namespace: "+err.Error()+": "+string(out))
		}
	}
	// The kernel installs the IPv6 address's local route and its
	// subnet-router anycast route asynchronously, after ip addr add has
	// returned (testnet.NS.WaitRoute says why): checking at once raced it
	// and failed now and then under load. Wait until the kernel's own route
	// lookup resolves each address as the case expects; localAddress must
	// then find it in the table by itself.
	ns.WaitRoute(t, "2001:db8:7::", "anycast")
	ns.WaitRoute(t, "2001:db8:7::5", "local")
	ns.WaitRoute(t, "10.99.3.4", "local")
	cases := []struct {
		name  string
		ip    string
		local bool
	}{
		{"local/ipv6-anycast", "2001:db8:7::", true},
		{"local/ipv6-address", "2001:db8:7::5", true},
		{"local/anyip-route", "10.99.3.4", true},
		{"local/loopback", "127.0.0.1", true},
		{"remote/ipv6-neighbour", "2001:db8:7::9", false},
		{"remote/ipv4", "192.0.2.7", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got, listed bool
			if err := ns.Do(func() error {
				got = localAddress(net.ParseIP(tc.ip))
				listed = interfaceListed(net.ParseIP(tc.ip))
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if got != tc.local {
				t.Errorf("localAddress(%s) = %v, want %v", tc.ip, got, tc.local)
			}
			if tc.name == "local/ipv6-anycast" && listed {
				t.Log("the interface list names the anycast address too; the test still holds")
			}
		})
	}
}

// interfaceListed is the old check alone: the interface addresses.
func interfaceListed(ip net.IP) bool {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// TestPhonePerAddressCap: one address cannot hold every connection slot,
// and every address of this host counts as one: a local process binding
// many loopback addresses gets no more than one address's share.
func TestPhonePerAddressCap(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := &limitListener{Listener: inner, isLocal: localAddress}
	defer ln.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	var conns []net.Conn
	for i := 0; i < maxPhoneConnsPerAddr+1; i++ {
		// From 127.0.0.1, 127.0.0.2, …: all of them this host.
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(1+i))}}
		c, err := d.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	for i := 0; i < maxPhoneConnsPerAddr; i++ {
		<-accepted
	}
	// The one past the cap is closed by the server.
	last := conns[maxPhoneConnsPerAddr]
	last.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := last.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection past the per-address cap: read err %v, want it closed", err)
	}
	select {
	case c := <-accepted:
		t.Fatalf("accepted a connection past the cap from %s", c.RemoteAddr())
	default:
	}
}
