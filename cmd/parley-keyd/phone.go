package main

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/parley-keyd/parley-keyd/keyd"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
	"github.com/parley-keyd/parley-keyd/notify/phone"
)

// startPhone starts the phone page when the configuration enables it
// ([phone] listen), making its certificate in the state folder on first
// start. The page reads paired devices from the state folder at every
// request, so `parley-keyd pair` and `parley-keyd devices revoke` take
// effect while it runs; a changed [phone] section needs a restart.
//
// The daemon is what the page approves through.
func startPhone(srv *keyd.Server, cfg *keyd.Config, state string, logf func(string, ...any)) (stop func(), err error) {
	base := cfg.PhoneURL()
	if base == "" {
		return func() {}, nil
	}
	p, err := phone.Start(phone.Options{Requests: srv, Listen: cfg.Phone.Listen, URL: base, State: state, Logf: logf,
		// The Stop button locks the daemon, as a LOCK from the device.
		Stop: srv.Stop, Alert: srv.AuditAlert, Remember: phoneRemember{srv}})
	if err != nil {
		return nil, err
	}
	logf("phone page on %s (listening on %s); certificate SHA-256 %s", base, p.Addr(), p.Cert().Fingerprint)
	return func() { p.Close() }, nil
}

var _ phone.Requests = (*keyd.Server)(nil)

// phoneRemember is the daemon's side of the phone page's remembered
// approvals: each call goes through the daemon's pipeline as a REMEMBERED or
// FORGET from the paired device, an approver on the phone channel, as
// keyd.Server.Decide does for APPROVE and DENY.
type phoneRemember struct{ srv *keyd.Server }

var _ phone.Remembering = phoneRemember{}

func (p phoneRemember) DecideRemember(id, match, device, remember string) error {
	return p.srv.DecideRemember(id, match, device, remember)
}

func (p phoneRemember) Remembered(device string) ([]protocol.RememberedView, error) {
	r, err := p.srv.Handle(context.Background(), phoneDevice(device), &protocol.Frame{Verb: protocol.VerbRemembered}, nil)
	if err != nil {
		return nil, err
	}
	var out protocol.RememberedList
	if err := json.Unmarshal(r.Data, &out); err != nil {
		return nil, errors.New("the daemon answered REMEMBERED with malformed data")
	}
	return out.Remembered, nil
}

func (p phoneRemember) Forget(id, reason, device string) error {
	_, err := p.srv.Handle(context.Background(), phoneDevice(device), &protocol.Frame{Verb: protocol.VerbForget, Request: id, Reason: reason}, nil)
	return err
}

// phoneDevice is the caller the phone page relays for: the paired device,
// an approver (as keyd's own phone caller).
func phoneDevice(device string) keyd.Caller {
	return keyd.Caller{Roles: keyd.Roles{Approver: true}, Device: device}
}
