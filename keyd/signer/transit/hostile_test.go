package transit

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testtransit"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
)

// These tests play a hostile key service, or whoever answers at its
// address: one that streams for ever, drips, or redirects the daemon to a
// listener of its own to collect the token. Issue 20 item 4: an endless
// signature took the daemon from 18 MiB to 1.4–2.3 GiB within one
// deadline, and a 307 made it send its token to another host and port.

// allocatedDuring returns the bytes the process allocated while fn ran,
// the whole heap's traffic (runtime.MemStats.TotalAlloc), so that a
// buffered body shows whatever the garbage collector did meanwhile.
func allocatedDuring(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// maxAllocated bounds what one refused call may allocate: the reply limit
// is a few KiB, and the HTTP client's own buffers come on top.
const maxAllocated = 4 << 20

func TestHostileBodiesAreBounded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault testtransit.Fault
		want  string
	}{
		{"fail/endless-signature", testtransit.Fault{Path: "/sign/", Endless: true}, "longer than"},
		{"fail/endless-error-body", testtransit.Fault{Path: "/sign/", Endless: true, Status: 500}, "HTTP 500"},
		{"fail/endless-403-body", testtransit.Fault{Path: "/sign/", Endless: true, Status: 403}, "HTTP 403"},
		{"fail/endless-key-read", testtransit.Fault{Path: "/keys/", Endless: true}, "longer than"},
		// A gzip bomb: the client asks for gzip and inflates what comes,
		// so the bound must hold on the inflated bytes.
		{"fail/gzip-bomb-signature", testtransit.Fault{Path: "/sign/", Endless: true, Gzip: true}, "longer than"},
		{"fail/gzip-bomb-error-body", testtransit.Fault{Path: "/sign/", Endless: true, Gzip: true, Status: 500}, "HTTP 500"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, false)
			f.cfg.Timeout.Duration = 2 * time.Second
			s := f.open()
			f.srv.SetFault(&tc.fault)
			var err error
			var took time.Duration
			n := allocatedDuring(func() {
				start := time.Now()
				if tc.fault.Path == "/keys/" {
					err = s.Check(t.Context())
				} else {
					err = signErr(s)
				}
				took = time.Since(start)
			})
			t.Logf("refused in %v after allocating %d KiB; the server sent %d KiB", took, n>>10, f.srv.Streamed.Load()>>10)
			wantUnavailable(t, err, tc.want)
			if n > maxAllocated {
				t.Fatalf("one call against an endless body allocated %d MiB", n>>20)
			}
			if took >= f.cfg.Timeout.Duration {
				t.Fatalf("the endless body was read until the deadline (%v): it must be cut at the limit", took)
			}
			f.srv.SetFault(nil)
			mustSign(t, s, f.pub)
		})
	}
}

func TestSlowDripEndsAtTheDeadline(t *testing.T) {
	f := newFixture(t, false)
	f.cfg.Timeout.Duration = 500 * time.Millisecond
	s := f.open()
	// A genuine reply, one byte every 50 ms: some 20 s in all.
	f.srv.SetFault(&testtransit.Fault{Path: "/sign/", Drip: 50 * time.Millisecond})
	start := time.Now()
	err := signErr(s)
	took := time.Since(start)
	wantUnavailable(t, err, "deadline")
	if took > 3*time.Second {
		t.Fatalf("a dripping reply held Sign for %v with a %v deadline", took, f.cfg.Timeout.Duration)
	}
}

// TestRedirectsAreNotFollowed sends the daemon's every call (token lookup,
// key read, sign) to another listener with each redirect status, and checks
// that the token never arrives there. The other listener is a working
// transit service with the same key and token, so that following the
// redirect would even have "worked".
func TestRedirectsAreNotFollowed(t *testing.T) {
	for _, code := range []int{301, 302, 303, 307, 308} {
		for _, path := range []string{"/sign/", "/keys/", "/auth/"} {
			t.Run(testName(code, path), func(t *testing.T) {
				f := newFixture(t, false)
				thief := testtransit.New()
				defer thief.Close()
				thief.ImportKey(keyName, f.srv.PrivateKey(keyName, 1))
				thief.AddToken("s.daemon", testtransit.Token{})
				f.cfg.Timeout.Duration = time.Second
				fault := &testtransit.Fault{Path: path, Redirect: thief.URL, RedirectStatus: code}
				if path == "/auth/" {
					// From the start: the token's first use is its lookup.
					f.srv.SetFault(fault)
					s, err := Open(f.config(), Options{Principal: f.pub, Logf: t.Logf})
					wantUnavailable(t, err, "redirect")
					defer s.Close()
					wantUnavailable(t, signErr(s), "redirect")
				} else {
					s := f.open()
					f.srv.SetFault(fault)
					if path == "/keys/" {
						wantUnavailable(t, s.Check(t.Context()), "redirect")
					} else {
						wantUnavailable(t, signErr(s), "redirect")
					}
				}
				if f.srv.Failed.Load() == 0 {
					t.Fatal("the redirect was never sent: the test tested nothing")
				}
				if n := thief.TokenSeen("s.daemon"); n != 0 || thief.Requests.Load() != 0 {
					t.Fatalf("the other listener got %d requests, %d with the daemon's token", thief.Requests.Load(), n)
				}
			})
		}
	}
}

func testName(code int, path string) string {
	return "fail/" + map[int]string{301: "301", 302: "302", 303: "303", 307: "307", 308: "308"}[code] + "-" + path[1:len(path)-1]
}

// TestAnsweredTellsRefusalFromOutage: a 403 is the service refusing the
// daemon's token, not an outage; status tells them apart by Answered, and
// the error says the status in one line.
func TestAnsweredTellsRefusalFromOutage(t *testing.T) {
	for _, tc := range []struct {
		fault    testtransit.Fault
		answered bool
		want     string
	}{
		{testtransit.Fault{Path: "/sign/", Status: 403}, true, "HTTP 403 (Forbidden): Forbidden"},
		{testtransit.Fault{Path: "/sign/", Status: 400}, true, "HTTP 400"},
		{testtransit.Fault{Path: "/sign/", BadSignature: true}, true, "does not verify"},
		{testtransit.Fault{Path: "/sign/", Status: 503}, false, "HTTP 503 (Service Unavailable)"},
		{testtransit.Fault{Path: "/sign/", Close: true}, false, "EOF"},
		{testtransit.Fault{Path: "/sign/", Redirect: "http://192.0.2.1"}, false, "redirect (307)"},
	} {
		f := newFixture(t, false)
		f.cfg.Timeout.Duration = 500 * time.Millisecond
		s := f.open()
		f.srv.SetFault(&tc.fault)
		err := signErr(s)
		wantUnavailable(t, err, tc.want)
		var u *signer.UnavailableError
		errors.As(err, &u)
		if u.Answered != tc.answered {
			t.Errorf("fault %+v: Answered %v, want %v (%v)", tc.fault, u.Answered, tc.answered, err)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("fault %+v: the error runs over several lines: %q", tc.fault, err)
		}
	}
}
