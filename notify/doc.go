// Package notify holds the human channels of parley-keyd: the desktop
// approver, which shows pending requests as freedesktop notifications over
// the session bus, and the QR images that carry a request's phone link.
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
// The daemon's package keyd never imports notify: the command line plugs an
// Approver into a keyd.Client (or, through keyd.Notifier, into a server).
package notify
