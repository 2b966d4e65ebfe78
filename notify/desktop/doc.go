// Package desktop is the desktop approver of parley-keyd.
//
// Desktop speaks to org.freedesktop.Notifications with godbus. Approver
// turns the daemon's WATCH feed (protocol.PendingView events and their ends)
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
//     lens.SafeLines once more, with markup characters escaped for servers
//     that parse body markup; nothing the agent wrote is shown raw.
package desktop
