package testnet

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestNamespace checks the harness end to end: the namespace has its end of
// the link, and a connection made from inside reaches the host's end and
// comes from the namespace's address, which is not one of the host's.
func TestNamespace(t *testing.T) {
	n := New(t, "tn")
	out, err := n.Command("ip", "-br", "addr", "show", "dev", n.PeerIf).CombinedOutput()
	if err != nil {
		t.Fatalf("ip addr in the namespace: %v: %s", err, out)
	}
	if !strings.Contains(string(out), n.PeerIP.String()+"/30") {
		t.Errorf("namespace end has %q, want %s/30", out, n.PeerIP)
	}

	ln, err := net.Listen("tcp", net.JoinHostPort(n.HostIP.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.RemoteAddr)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{DialContext: n.Dial}}
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+ln.Addr().String()+"/", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	ap, err := netip.ParseAddrPort(string(body))
	if err != nil {
		t.Fatalf("server saw %q: %v", body, err)
	}
	if ap.Addr() != n.PeerIP {
		t.Errorf("server saw the connection from %s, want %s", ap.Addr(), n.PeerIP)
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.Equal(net.IP(n.PeerIP.AsSlice())) {
			t.Errorf("the namespace's address %s is one of the host's", n.PeerIP)
		}
	}

	// Removing it leaves neither the namespace nor the host's veth end.
	n.remove()
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), n.Name) {
		t.Errorf("namespace %s still exists after remove", n.Name)
	}
	if _, err := net.InterfaceByName(n.HostIf); err == nil {
		t.Errorf("veth %s still exists after remove", n.HostIf)
	}
}
