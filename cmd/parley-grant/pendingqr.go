package main

import (
	"fmt"
	"io"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/notify"
)

// writePendingQR prints the phone link of the waiting request id as a QR code
// and as text, for `parley-grant pending --qr ID`. A request that the phone
// may not approve, or a daemon whose phone page is off, has no link.
func writePendingQR(w io.Writer, list []protocol.PendingView, id string) error {
	for _, v := range list {
		if v.ID != id {
			continue
		}
		if v.Link == "" {
			return &exitError{code: exitFail, err: fmt.Errorf("request %s has no phone link", id),
				hint: "the phone page is off, or the policy does not let the phone approve this request; approve it with: parley-grant approve " + id}
		}
		if err := notify.WriteTerminalQR(w, v.Link); err != nil {
			return err
		}
		fmt.Fprintln(w, v.Link)
		return nil
	}
	return &exitError{code: exitFail, err: fmt.Errorf("no pending request %q", id), hint: "list waiting requests with: parley-grant pending"}
}
