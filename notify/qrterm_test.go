package notify_test

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"rsc.io/qr"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
	"github.com/parley-keyd/parley-keyd/notify"
)

// qrParseHalfBlocks reads a half-block rendering back into modules, true
// for dark. Each character is two modules, one above the other: "█" light
// over light, " " dark over dark, "▀" light over dark, "▄" dark over light
// (on a dark terminal, the block is the light foreground).
func qrParseHalfBlocks(t *testing.T, text string) [][]bool {
	t.Helper()
	var rows [][]bool
	width := -1
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		top, bottom := []bool{}, []bool{}
		for _, r := range line {
			var up, down bool // dark?
			switch r {
			case '█':
			case ' ':
				up, down = true, true
			case '▀':
				down = true
			case '▄':
				up = true
			default:
				t.Fatalf("unexpected character %q in the QR rendering", r)
			}
			top, bottom = append(top, up), append(bottom, down)
		}
		if width >= 0 && len(top) != width {
			t.Fatalf("ragged QR rendering: a line of %d characters after lines of %d", len(top), width)
		}
		width = len(top)
		rows = append(rows, top, bottom)
	}
	return rows
}

// qrPNG draws modules at scale pixels each inside a margin of margin
// modules of the terminal's dark background, as a camera would see it.
func qrPNG(t *testing.T, mods [][]bool, scale, margin int) string {
	t.Helper()
	h, w := len(mods), len(mods[0])
	img := image.NewGray(image.Rect(0, 0, (w+2*margin)*scale, (h+2*margin)*scale))
	for i := range img.Pix {
		img.Pix[i] = 0
	}
	for y, row := range mods {
		for x, dark := range row {
			if dark {
				continue
			}
			for dy := range scale {
				for dx := range scale {
					img.SetGray((x+margin)*scale+dx, (y+margin)*scale+dy, color.Gray{Y: 255})
				}
			}
		}
	}
	path := filepath.Join(t.TempDir(), "qr.png")
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func qrZbar(t *testing.T, path string) string {
	t.Helper()
	if _, err := exec.LookPath("zbarimg"); err != nil {
		testpeer.Unavailable(t, "needs zbarimg (Debian package zbar-tools) to decode QR codes")
	}
	out, err := exec.Command("zbarimg", "--raw", "-q", path).Output()
	if err != nil {
		t.Fatalf("zbarimg found no QR code in %s: %v", path, err)
	}
	return strings.TrimSuffix(string(out), "\n")
}

// TestTerminalQR renders links as the terminal sees them, reads the half
// blocks back, and has zbar decode a picture of them: it must give the exact
// link. The modules must also be rsc.io/qr's own encoding, inside a light
// quiet zone of QRQuietZone modules.
func TestTerminalQR(t *testing.T) {
	links := []struct{ name, link string }{
		{"ok/pairing-link", "https://192.168.100.200:7450/pair?t=" + strings.Repeat("Ab9_-", 8) + "xyz"},
		{"ok/request-link", "https://10.0.0.5:7450/r/r_abcdefgh"},
		{"ok/named-host", "https://phone.home.arpa:7450/r/r_k2m3n4p5"},
	}
	for _, tc := range links {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := notify.WriteTerminalQR(&out, tc.link); err != nil {
				t.Fatal(err)
			}
			mods := qrParseHalfBlocks(t, out.String())

			code, err := qr.Encode(tc.link, qr.M)
			if err != nil {
				t.Fatal(err)
			}
			q := notify.QRQuietZone
			if len(mods[0]) != code.Size+2*q {
				t.Fatalf("rendering is %d modules wide, want %d", len(mods[0]), code.Size+2*q)
			}
			if len(mods) < code.Size+2*q {
				t.Fatalf("rendering is %d modules high, want at least %d", len(mods), code.Size+2*q)
			}
			for y := -q; y < code.Size+q; y++ {
				for x := -q; x < code.Size+q; x++ {
					want := code.Black(x, y) // false outside the code: the quiet zone
					if got := mods[y+q][x+q]; got != want {
						t.Fatalf("module (%d,%d) dark=%v, rsc.io/qr says %v", x, y, got, want)
					}
				}
			}

			if got := qrZbar(t, qrPNG(t, mods, 6, 4)); got != tc.link {
				t.Errorf("zbar decoded %q, want %q", got, tc.link)
			}
		})
	}
}

func TestTerminalQRTooLong(t *testing.T) {
	var out bytes.Buffer
	err := notify.WriteTerminalQR(&out, "https://x/"+strings.Repeat("a", 4000))
	if err == nil || out.Len() != 0 {
		t.Errorf("a link too long for a QR code: err %v, %d bytes written", err, out.Len())
	}
}
