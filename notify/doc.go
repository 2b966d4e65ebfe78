// Package notify holds the human channels of parley-keyd: the desktop
// approver, which shows pending requests as freedesktop notifications over
// the session bus; the phone page, where a paired phone approves from
// another device; and the QR codes that carry a request's phone link.
//
// # Desktop
//
// Desktop speaks to org.freedesktop.Notifications with godbus. Approver
// turns the daemon's WATCH feed (keyd.PendingView events and their ends)
// into notifications and relays the human's choice back to the daemon:
//
//   - Only requests routed to the "desktop" channel are shown. When the
//     approver is weak (its user may also act as an agent), requests that
//     need a strong channel are not offered at all, and every notification
//     says plainly that the approval is weak.
//   - The actions are the daemon's three codes (one of them the match code
//     shown where the agent asked) and Deny. Choosing a wrong code denies
//     the request, and a short follow-up notification says so.
//   - Dismissing a notification leaves the request pending for the other
//     channels. When a request ends anywhere else, its notification is
//     closed.
//   - The body is the daemon's own rendering passed through
//     grant.SafeLines once more, with markup characters escaped for servers
//     that parse body markup; nothing the agent wrote is shown raw.
//
// # Phone
//
// Phone serves the opt-in phone page over HTTPS on a LAN address, with a
// self-signed certificate made at set-up (EnsurePhoneCert). A phone becomes
// a paired device by opening a one-time pairing link (Devices.NewPairing,
// shown as a terminal QR code by WriteTerminalQR); its credential is stored
// hashed. A paired phone sees each request routed to the phone as the daemon
// rendered it and approves with the match code. An approval is accepted only
// from a paired device, with a one-time request token, from the page's own
// origin, and only from an address that is not one of this host's own: a
// connection from this machine, loopback included, can view but never
// approve. That is what makes the phone a strong channel against an agent
// running on the same machine. docs/phone.md has the details.
//
// The daemon's package keyd never imports notify: the command line plugs an
// Approver into a keyd.Client (or, through keyd.Notifier, into a server).
package notify
