package notify

import (
	"fmt"
	"io"

	"github.com/mdp/qrterminal/v3"
	"rsc.io/qr"
)

// QRQuietZone is the width, in modules, of the light border around a
// terminal QR code. Four is what the QR standard asks for.
const QRQuietZone = 4

// WriteTerminalQR writes text as a QR code (error correction level M) drawn
// with Unicode half blocks, two modules per character row, for a terminal
// with a dark background: a light module is a filled block, a dark one is
// blank. It never queries the terminal, so it is safe on any writer.
func WriteTerminalQR(w io.Writer, text string) error {
	// qrterminal drops the encoder's error and would draw nothing; check
	// first, so that a link too long for a QR code is an error.
	if _, err := qr.Encode(text, qr.M); err != nil {
		return fmt.Errorf("qr code: %w", err)
	}
	cw := &errWriter{w: w}
	qrterminal.GenerateWithConfig(text, qrterminal.Config{
		Level:          qr.M,
		Writer:         cw,
		HalfBlocks:     true,
		BlackChar:      qrterminal.BLACK_BLACK,
		BlackWhiteChar: qrterminal.BLACK_WHITE,
		WhiteChar:      qrterminal.WHITE_WHITE,
		WhiteBlackChar: qrterminal.WHITE_BLACK,
		QuietZone:      QRQuietZone,
	})
	return cw.err
}

// errWriter keeps the first write error, which qrterminal ignores.
type errWriter struct {
	w   io.Writer
	err error
}

func (c *errWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.err = err
	return n, err
}
