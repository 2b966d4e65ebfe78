package phone

import (
	"strings"
	"testing"
)

// TestIndexShowsAlert: while the daemon's audit log scrub holds damage, the
// page says so above the requests, escaped as any text from the daemon.
func TestIndexShowsAlert(t *testing.T) {
	e := newPhoneEnv(t)
	alert := ""
	e.p.alert = func() string { return alert }
	cred := e.pair(t, "Pixel")
	if body := e.do("GET", "/", phoneTestPeer, cred, nil, nil).Body.String(); strings.Contains(body, `id="alert"`) {
		t.Fatalf("an alert without damage:\n%s", body)
	}
	alert = "parley-keyd issues nothing: its audit log failed verification (<b>[chain]</b>)"
	body := e.do("GET", "/", phoneTestPeer, cred, nil, nil).Body.String()
	if !strings.Contains(body, `<p class="alert" id="alert" role="alert">parley-keyd issues nothing: its audit log failed verification (&lt;b&gt;[chain]&lt;/b&gt;)</p>`) {
		t.Fatalf("the page does not show the alert, escaped:\n%s", body)
	}
}
