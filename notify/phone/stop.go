package phone

import (
	"net/http"
	"time"
)

// The Stop button. A human who sees an agent misbehave presses it on their
// phone, and the daemon locks: every request is refused and every waiting
// one withdrawn, until an approver runs parley-grant unlock.
//
// Pressing it takes what deciding a request takes, bar one thing: a paired
// device's credential, a one-time token of a page shown to that device, and
// a same-origin form post (attack: a page elsewhere, or a link, making the
// phone's browser post it). It does not take a non-local address. The
// strong-channel rule exists so that an agent on this machine cannot
// approve; stopping only ever refuses, so accepting it from anywhere a
// paired device can be is safe, and the worst a forged Stop could do is
// what the button is for. Unlocking is not offered here at all.

// stopRequest is the pseudo-request a Stop token is bound to. It cannot be
// a request id (requestIDRE), so a Stop token decides no request and a
// request's token presses no Stop.
const stopRequest = "!stop"

// stopToken returns a one-time token for device to press Stop, or "" when
// the page has no Stop button.
func (p *Page) stopToken(device string) string {
	if p.stop == nil {
		return ""
	}
	now := p.now()
	return p.issueToken(device, stopRequest, now, now.Add(pageTokenTTL))
}

func (p *Page) stopPressed(w http.ResponseWriter, r *http.Request) {
	if p.stop == nil {
		http.NotFound(w, r)
		return
	}
	refuse := func(msg string) {
		p.logf("phone page: refused a Stop from %s: %s", r.RemoteAddr, msg)
		p.message(w, http.StatusForbidden, "bad", "Refused", msg)
	}
	if msg := p.refuseForged(r); msg != "" {
		refuse(msg)
		return
	}
	dev, ok := p.device(nil, r)
	if !ok {
		refuse("this phone is not paired; pair it first")
		return
	}
	if !p.useToken(r.PostFormValue("token"), dev.ID, stopRequest, p.now()) {
		refuse("this page was used already or has expired; open it again")
		return
	}
	if err := p.stop(dev.Name); err != nil {
		p.logf("phone page: Stop from %s: %v", dev.Name, err)
		p.message(w, http.StatusInternalServerError, "bad", "Stopped, with a warning", err.Error())
		return
	}
	p.logf("phone page: %s pressed Stop at %s", dev.Name, p.now().UTC().Format(time.RFC3339))
	p.render(w, http.StatusOK, "message", page{Heading: "Stopped", Kind: "bad", Device: dev.Name, Back: true,
		Lines: []string{"parley-keyd now refuses every agent request, and the requests that were waiting are withdrawn.",
			"It stays stopped, even across a restart, until an approver runs: parley-grant unlock"}})
}
