// Package phone is the phone page of parley-keyd.
//
// Page serves the opt-in phone page over HTTPS on a LAN address, with a
// self-signed certificate made at set-up (EnsureCert). A phone becomes
// a paired device by opening a one-time pairing link (Devices.NewPairing,
// shown as a terminal QR code by notify.WriteTerminalQR); its credential is stored
// hashed. A paired phone sees each request routed to the phone as the daemon
// rendered it and approves with the match code. An approval is accepted only
// from a paired device, with a one-time request token, from the page's own
// origin, and only from an address that is not one of this host's own: a
// connection from this machine, loopback included, can view but never
// approve. That is what makes the phone a strong channel against an agent
// running on the same machine. docs/phone.md has the details.
package phone
