package phone_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testnet"
	"github.com/parley-keyd/parley-keyd/notify/phone"
)

// pairOverHTTP pairs a phone from inside ns, as its browser would, confirms
// the code the page showed, and returns the device cookie.
func pairOverHTTP(t *testing.T, d *phoneDaemon, pc *http.Client, name string) string {
	t.Helper()
	token, _, err := phone.OpenDevices(d.state).NewPairing(name, 10*time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", d.base+"/pair", strings.NewReader(url.Values{"t": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", d.base)
	resp, err := pc.Do(req)
	if err != nil {
		t.Fatalf("pairing: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	code := regexp.MustCompile(`\b\d{4}\b`).Find(body)
	if resp.StatusCode != http.StatusOK || code == nil {
		t.Fatalf("pairing: %d %s", resp.StatusCode, body)
	}
	if _, err := phone.OpenDevices(d.state).Confirm(name, string(code), time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, c := range resp.Cookies() {
		if c.Name == phone.DeviceCookie {
			return c.Value
		}
	}
	t.Fatal("pairing set no cookie")
	return ""
}

// localFlood is a local agent holding phone-page connections open from
// many loopback addresses: each connection completes TLS and then asks for
// the index page again and again, so that no server timeout ends it.
type localFlood struct {
	held, refused atomic.Int64
	wg            sync.WaitGroup
	stop          chan struct{}
}

func startLocalFlood(t *testing.T, addr string, addrs, perAddr int) *localFlood {
	t.Helper()
	f := &localFlood{stop: make(chan struct{})}
	t.Cleanup(func() { close(f.stop); f.wg.Wait() })
	ready := make(chan struct{}, addrs*perAddr)
	for a := 1; a <= addrs; a++ {
		for range perAddr {
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				ok := f.hold(addr, net.IPv4(127, 0, 0, byte(a)), ready)
				if !ok {
					f.refused.Add(1)
					ready <- struct{}{}
				}
			}()
		}
	}
	for range addrs * perAddr {
		select {
		case <-ready:
		case <-time.After(30 * time.Second):
			t.Fatalf("the flood's connections did not settle: %d held, %d refused", f.held.Load(), f.refused.Load())
		}
	}
	return f
}

// hold opens one connection from ip and keeps it busy until the flood
// stops. It reports false when the page never served it.
func (f *localFlood) hold(addr string, ip net.IP, ready chan<- struct{}) bool {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 10 * time.Second}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return false
	}
	defer nc.Close()
	tc := tls.Client(nc, &tls.Config{InsecureSkipVerify: true}) // the attacker does not care whose page it is
	br := bufio.NewReader(tc)
	ask := func() bool {
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: phone\r\n\r\n"); err != nil {
			return false
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return false
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return true
	}
	if !ask() {
		return false
	}
	f.held.Add(1)
	ready <- struct{}{}
	defer f.held.Add(-1)
	for {
		select {
		case <-f.stop:
			return true
		case <-time.After(time.Second):
		}
		if !ask() {
			return true
		}
	}
}

// TestPhoneLocalFlood is the attack of item 4 on the phone page: a local
// agent binds 16 loopback addresses and holds four connections from each,
// as many as the page has slots. The paired phone, on another device, must
// still be served; the local connections share a small pool of their own.
func TestPhoneLocalFlood(t *testing.T) {
	ns := testnet.New(t, "flood")
	ln, err := net.Listen("tcp", net.JoinHostPort(ns.HostIP.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	d := startPhoneDaemon(t, ln)
	pc := phoneClient(d, ns.Dial)
	cred := pairOverHTTP(t, d, pc, "pixel")
	pc.CloseIdleConnections()

	flood := startLocalFlood(t, ln.Addr().String(), 16, 4)
	t.Logf("local flood: %d connections held, %d refused", flood.held.Load(), flood.refused.Load())
	// Every local address counts as one: 4 connections (docs/phone.md).
	if n := flood.held.Load(); n > 4 {
		t.Errorf("the local flood holds %d connections; every address of this host together may hold 4", n)
	}

	// The phone, from its own network, opens the page and sees a request.
	a := askPhone(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", d.base+"/", nil)
	req.AddCookie(&http.Cookie{Name: phone.DeviceCookie, Value: cred})
	resp, err := pc.Do(req)
	if err != nil {
		t.Fatalf("the paired phone was not served while %d local connections were held: %v", flood.held.Load(), err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), a.id) {
		t.Errorf("the phone's index: %d, want 200 listing %s: %s", resp.StatusCode, a.id, body)
	}
}
