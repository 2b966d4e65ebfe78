package notify

import (
	"errors"
	"net/url"

	"rsc.io/qr"
)

// maxQRLink caps the link put into a QR code. A phone page link is a base
// address and a request id; anything much longer is not one.
const maxQRLink = 512

// QRPNG returns a PNG image of a QR code that holds link exactly, with the
// quiet zone a phone camera needs around it. It refuses anything but an
// absolute http or https link, so a QR image can only ever send the phone to
// a web page.
func QRPNG(link string) ([]byte, error) {
	if len(link) > maxQRLink {
		return nil, errors.New("the phone link is too long for a QR image")
	}
	u, err := url.Parse(link)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, errors.New("the phone link is not an http(s) address")
	}
	c, err := qr.Encode(link, qr.M)
	if err != nil {
		return nil, err
	}
	c.Scale = 4
	return c.PNG(), nil
}
