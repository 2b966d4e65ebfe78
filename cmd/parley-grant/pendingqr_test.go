package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"

	"github.com/parley-keyd/parley-keyd/notify"
)

func TestPendingQR(t *testing.T) {
	link := "https://192.168.1.20:7450/r/r_abcdefgh"
	list := []protocol.PendingView{
		{ID: "r_desk", Channels: []string{"desktop"}},
		{ID: "r_abcdefgh", Channels: []string{"phone"}, Link: link},
	}
	var want bytes.Buffer
	if err := notify.WriteTerminalQR(&want, link); err != nil {
		t.Fatal(err)
	}
	want.WriteString(link + "\n")
	tests := []struct {
		name, id, want, err string
	}{
		{"ok/phone-link", "r_abcdefgh", want.String(), ""},
		{"fail/no-phone-link", "r_desk", "", "request r_desk has no phone link"},
		{"fail/unknown", "r_gone", "", `no pending request "r_gone"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := writePendingQR(&out, list, tc.id)
			if out.String() != tc.want {
				t.Errorf("printed:\n%s\nwant:\n%s", out.String(), tc.want)
			}
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != exitFail || !strings.Contains(err.Error(), tc.err) || ee.hint == "" {
				t.Errorf("err = %v, want exit %d with a hint, saying %q", err, exitFail, tc.err)
			}
		})
	}
}
