package main

import (
	"github.com/parley-keyd/parley-keyd/keyd"
	"github.com/parley-keyd/parley-keyd/notify/phone"
)

// startPhone starts the phone page when the configuration enables it
// ([phone] listen), making its certificate in the state folder on first
// start. The page reads paired devices from the state folder at every
// request, so `parley-keyd pair` and `parley-keyd devices revoke` take
// effect while it runs; a changed [phone] section needs a restart.
//
// The daemon is what the page approves through, remembered approvals
// included (DecideRemember, Remembered, Forget: the pipeline as the paired
// device).
func startPhone(srv *keyd.Server, cfg *keyd.Config, state string, logf func(string, ...any)) (stop func(), err error) {
	base := cfg.PhoneURL()
	if base == "" {
		return func() {}, nil
	}
	p, err := phone.Start(phone.Options{Requests: srv, Listen: cfg.Phone.Listen, URL: base, State: state, Logf: logf,
		// The Stop button locks the daemon, as a LOCK from the device.
		Stop: srv.Stop, Alert: srv.AuditAlert, Remember: srv})
	if err != nil {
		return nil, err
	}
	logf("phone page on %s (listening on %s); certificate SHA-256 %s", base, p.Addr(), p.Cert().Fingerprint)
	return func() { p.Close() }, nil
}

var _ phone.Requests = (*keyd.Server)(nil)

var _ phone.Remembering = (*keyd.Server)(nil)
