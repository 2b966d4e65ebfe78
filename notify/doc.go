// Package notify holds the human channels of parley-keyd, one package each,
// and the QR codes they share:
//
//   - notify/desktop, the desktop approver: pending requests as freedesktop
//     notifications over the session bus, run in the human's session by
//     parley-grant approver;
//   - notify/phone, the phone page the daemon serves on the LAN, where a
//     paired phone approves from another device;
//   - here, QR codes that carry a request's phone link, for a terminal
//     (WriteTerminalQR) or a notification image (QRPNG).
//
// The daemon's package keyd never imports notify: the commands plug the
// channels into the daemon, and a dependency test keeps D-Bus out of the
// daemon's binary.
package notify
