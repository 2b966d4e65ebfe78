package keyd

import (
	"bytes"
	"crypto/ed25519"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// FuzzCaveatsJSON checks that a record's caveat list, joined by hand, is
// what json.Marshal writes for it.
func FuzzCaveatsJSON(f *testing.F) {
	f.Add("cal.example", "calendar.*", []byte(`{"amount":5,"currency":"USD"}`), 3)
	f.Add("a<b>&c", "\u2028", []byte(`[1, 2.5]`), 1)
	f.Add("", "", []byte(nil), 0)
	f.Fuzz(func(t *testing.T, svc, can string, val []byte, n int) {
		all := []grant.Caveat{grant.Svc(svc), grant.Can(can), {Name: can, Value: val}}
		cavs := all[:max(0, min(n, len(all)))]
		if n < 0 {
			cavs = nil
		}
		if got, want := caveatsJSON(cavs), caveatsMarshal(cavs); !bytes.Equal(got, want) {
			t.Fatalf("%q: joined %s, json.Marshal %s", cavs, got, want)
		}
	})
}

// BenchmarkGrantJSON measures the JSON work of one auto GRANT in the
// daemon, without its signatures and I/O: the frame read strictly, the
// grant object and its digest, the record's caveat lists, the reply.
func BenchmarkGrantJSON(b *testing.B) {
	key := ed25519.NewKeyFromSeed(make([]byte, 32))
	holder := grant.FormatPublicKey(key.Public().(ed25519.PublicKey))
	body := `{"caveats":[{"svc":["cal.example"]},{"can":["calendar.find"]},{"exp":1764547200}],"holder":"` + holder + `"}`
	line := []byte(`{"parley":1,"id":"17","verb":"GRANT","grant":` + body + `,"proof":{"key":"` + holder +
		`","ts":1764543600,"sig":"` + strings.Repeat("A", 86) + `"}}`)
	tok, err := grant.Issue(key, key.Public().(ed25519.PublicKey), []grant.Caveat{grant.Svc("cal.example"), grant.Exp(1764547200)}, 1764543600, "n")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		var f protocol.Frame
		if err := grant.DecodeStrict(line, &f); err != nil {
			b.Fatal(err)
		}
		body, _, _, err := parseGrantBody(f.Grant, 1764543600)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := protocol.GrantDigest(f.Grant); err != nil {
			b.Fatal(err)
		}
		rec := audit.Record{RequestID: "r_x", Decision: "auto", DecidedBy: &audit.Decider{Rule: "calendar-auto"}, GrantID: tok.ID()}
		rec.Requested, rec.Issued = caveatsJSON(body.Caveats), caveatsJSON(body.Caveats)
		reply, err := grantReply(tok, body.Caveats, 1764547200, rec, nil, 0)
		if err != nil {
			b.Fatal(err)
		}
		reply.Re, reply.ID = f.ID, "r"+f.ID
		if _, err := protocol.EncodeFrame(reply); err != nil {
			b.Fatal(err)
		}
	}
}
