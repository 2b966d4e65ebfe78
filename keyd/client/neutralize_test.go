package client

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/parley-keyd/parley-keyd/grant/lens"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

const evil = "\x1b]52;c;eA==\x07\x1b[2J\u009b\u202eabc\u2028\x00\nx"

// TestDecodeDataNeutralizes: every string of a reply's data comes out as
// SafeText makes it, line breaks kept only where display:"lines" says,
// exact fields byte for byte; an honest reply is left as it is.
func TestDecodeDataNeutralizes(t *testing.T) {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	raw := `{"id":` + q(evil) + `,"title":` + q(evil) + `,"text":` + q(evil) + `,"channels":[` + q(evil) + `],` +
		`"caller":{"user":` + q(evil) + `},"scope":{"caveats":[{"svc":[` + q(evil) + `]}],"proposal":{"summary":` + q(evil) + `}}}`
	var v protocol.PendingView
	if err := decodeData([]byte(raw), &v); err != nil {
		t.Fatal(err)
	}
	one, lines := lens.SafeText(evil, 0), lens.SafeLines(evil, 0)
	for name, got := range map[string]string{"id": v.ID, "title": v.Title, "channel": v.Channels[0], "user": v.Caller.User} {
		if got != one {
			t.Errorf("%s = %q, want %q", name, got, one)
		}
	}
	if v.Text != lines || !strings.Contains(v.Text, "\n") {
		t.Errorf("text = %q, want %q", v.Text, lines)
	}
	var svc []string
	if err := json.Unmarshal(v.Scope.Caveats[0].Value, &svc); err != nil || len(svc) != 1 || svc[0] != one {
		t.Errorf("caveat value %s (%v), want [%q]", v.Scope.Caveats[0].Value, err, one)
	}
	if want := `{"summary":` + q(evil) + `}`; string(v.Scope.Proposal) != want {
		t.Errorf("exact proposal = %s, want %s", v.Scope.Proposal, want)
	}

	t.Run("ok/honest-reply-unchanged", func(t *testing.T) {
		raw := `{"id":"r_1","title":"bot asks for a grant · 2 services","text":"Request r_1\n  - mail.read\n",` +
			`"scope":{"caveats":[{"svc":["shop.example"]},{"per":{"amount":2000,"currency":"USD"}},{"can":["caf\u00e9.*"]}]}}`
		var got, want protocol.PendingView
		json.Unmarshal([]byte(raw), &want)
		if err := decodeData([]byte(raw), &got); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("honest reply changed (-want +got):\n%s", diff)
		}
	})
	t.Run("ok/maps-and-interfaces", func(t *testing.T) {
		raw := `{"may":{` + q(evil) + `:[` + q(evil) + `,{"k":` + q(evil) + `}]},"verbs":[{"params":{` + q(evil) + `:` + q(evil) + `}}]}`
		var m protocol.Manifest
		if err := decodeData([]byte(raw), &m); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(m)
		if strings.Contains(string(b), `\u001b`) || strings.Contains(string(b), "\u202e") {
			t.Errorf("manifest keeps hostile text: %s", b)
		}
	})
}

// FuzzNeutralize: whatever JSON a server sends, neutralize neither panics
// nor leaves a string SafeText would change.
func FuzzNeutralize(f *testing.F) {
	f.Add([]byte(`{"id":"\u001b[2J","scope":{"caveats":[{"svc":["\u202e"]}]},"text":"a\nb"}`))
	f.Add([]byte(`{"may":{"\u0000":[1,"\u0085",{"x":null}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var v protocol.PendingView
		if decodeData(data, &v) != nil {
			return
		}
		var m protocol.Manifest
		decodeData(data, &m)
		check := func(s string, lines bool) {
			if safeString(s, lines) != s {
				t.Errorf("left %q", s)
			}
		}
		var walk func(x reflect.Value, tag string)
		walk = func(x reflect.Value, tag string) {
			switch x.Kind() {
			case reflect.String:
				check(x.String(), tag == "lines")
			case reflect.Struct:
				for i := range x.NumField() {
					if f := x.Type().Field(i); f.IsExported() && f.Tag.Get("display") != "exact" {
						walk(x.Field(i), f.Tag.Get("display"))
					}
				}
			case reflect.Slice, reflect.Array:
				if x.Type() == rawMessageType {
					var y any
					if json.Unmarshal(x.Bytes(), &y) == nil {
						walk(reflect.ValueOf(&y).Elem(), "")
					}
					return
				}
				if x.Kind() == reflect.Slice && x.Type().Elem().Kind() == reflect.Uint8 {
					return
				}
				for i := range x.Len() {
					walk(x.Index(i), tag)
				}
			case reflect.Map:
				for _, k := range x.MapKeys() {
					walk(k, "")
					walk(x.MapIndex(k), tag)
				}
			case reflect.Pointer, reflect.Interface:
				if !x.IsNil() {
					walk(x.Elem(), tag)
				}
			}
		}
		walk(reflect.ValueOf(v), "")
		walk(reflect.ValueOf(m), "")
	})
}
