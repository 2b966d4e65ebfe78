package transit

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode"

	"github.com/openbao/openbao/api/v2"
)

// Reply bounds. Whatever answers at a key service's address may be hostile:
// the OpenBao client reads a whole reply (an error body too) into memory
// before looking at it, so an endless body took the daemon to gigabytes
// within one deadline (issue 20). Every reply the daemon reads passes
// through boundedTransport, which cuts it at these sizes.
const (
	// maxReply bounds a reply: a signature, a token lookup or login, the
	// wrapping key (an RSA-4096 PEM) all fit in well under 4 KiB.
	maxReply = 8 << 10
	// maxKeyReply bounds the description of a key, which lists the public
	// key of every version: some 150 bytes each, so a few hundred
	// rotations.
	maxKeyReply = 64 << 10
	// maxErrorReply bounds what is read of an error body; the rest is
	// dropped and the error keeps its status.
	maxErrorReply = 4 << 10
	// maxHeaders bounds a reply's header block.
	maxHeaders = 16 << 10
)

// boundedTransport is the key service client's transport: it never follows
// a redirect (the daemon's token would go with it to wherever the reply
// points) and cuts every reply body at its bound.
type boundedTransport struct{ base http.RoundTripper }

// RedirectError is a key service answering with a redirect, which the
// daemon never follows: the request carried its token.
type RedirectError struct {
	Status   int
	Location string
}

func (e *RedirectError) Error() string {
	return fmt.Sprintf("the key service answered with a redirect (%d) to %q, which is not followed: list every node in key.transit.addresses", e.Status, untrusted(e.Location, 120))
}

// errReplyTooLarge is a reply body longer than its bound.
var errReplyTooLarge = errors.New("the key service's reply is too large")

func (t boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 && resp.StatusCode != http.StatusNotModified {
		resp.Body.Close()
		return nil, &RedirectError{Status: resp.StatusCode, Location: resp.Header.Get("Location")}
	}
	limit, cut := int64(maxReply), false
	switch {
	case resp.StatusCode >= 400:
		// The status is the answer; what the body says is detail.
		limit, cut = maxErrorReply, true
	case req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/keys/"):
		limit = maxKeyReply
	}
	if !cut && resp.ContentLength > limit {
		resp.Body.Close()
		return nil, fmt.Errorf("the key service's reply is %d bytes, longer than the %d a reply may have", resp.ContentLength, limit)
	}
	resp.Body = &boundedBody{rc: resp.Body, left: limit, limit: limit, cut: cut}
	return resp, nil
}

// boundedBody reads at most limit bytes of rc. Past them it reports
// io.EOF when cut is set (an error body: its status stands), else an
// error.
type boundedBody struct {
	rc    io.ReadCloser
	left  int64
	limit int64
	cut   bool
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		if b.cut {
			return 0, io.EOF
		}
		// One byte more tells a reply of exactly limit bytes from a
		// longer one.
		var one [1]byte
		if n, err := io.ReadFull(b.rc, one[:]); n == 0 {
			if err == io.ErrUnexpectedEOF {
				err = io.EOF
			}
			return 0, err
		}
		return 0, fmt.Errorf("%w: longer than the %d bytes a reply may have", errReplyTooLarge, b.limit)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }

// serviceError is a key service's error status, said in one line: the
// OpenBao client's own message runs over several lines, with the status
// after the URL, and status and the journal cut it before the status.
type serviceError struct{ re *api.ResponseError }

func (e *serviceError) Error() string {
	msg := fmt.Sprintf("HTTP %d (%s)", e.re.StatusCode, http.StatusText(e.re.StatusCode))
	if len(e.re.Errors) > 0 {
		msg += ": " + untrusted(strings.Join(e.re.Errors, "; "), 200)
	}
	return msg
}

func (e *serviceError) Unwrap() error { return e.re }

// brief makes one attempt's error short: the address is named already, so
// the method and URL net/http puts in front go, and an error status is
// said in one line. What it wraps stays reachable with errors.As.
func brief(err error) error {
	var re *api.ResponseError
	if errors.As(err, &re) {
		return &serviceError{re: re}
	}
	var rd *RedirectError
	if errors.As(err, &rd) {
		return rd
	}
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err
	}
	return err
}

// untrusted is text a key service sent, made fit for a log line: control
// and format characters (escape sequences, bidirectional overrides)
// become "?", and it is cut at max bytes.
func untrusted(s string, max int) string {
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return '?'
		}
		return r
	}, s)
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
