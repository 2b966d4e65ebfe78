package keyd

import (
	"slices"
	"strings"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// The words of refusals that tell a caller what to do instead.

// channelFix says where a request may be approved, for an approver who
// tried a channel the request does not allow.
func channelFix(v protocol.PendingView) string {
	switch {
	case slices.Contains(v.Channels, "phone") && v.Link != "":
		return "approve it on your paired phone: open " + v.Link + " (as a QR code: parley-grant pending --qr " + v.ID + ")"
	case slices.Contains(v.Channels, "phone"):
		return "approve it on your paired phone; the phone page is off, so an admin sets [phone] listen in the daemon's configuration and restarts it"
	case slices.Contains(v.Channels, "desktop"):
		return "approve it in the desktop notification (parley-grant approver runs in your session)"
	}
	return "approve it where the policy allows: " + strings.Join(v.Channels, ", ")
}
