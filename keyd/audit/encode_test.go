package audit

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testfill"
)

// FuzzAppendRecord checks that appendRecord writes exactly the bytes that
// encoding/json writes for the same record, whenever it does not decline,
// and that it declines only records it must.
func FuzzAppendRecord(f *testing.F) {
	f.Add(uint64(7), "prevhash", "2026-11-30T22:00:00.123456789Z", KindIssue, "r_abc", "GRANT", "",
		uint32(1000), uint32(1000), int32(4242), "alice", "/usr/bin/agent", "", "", true,
		"ed25519:AAAA", []byte(`[{"svc":["cal.example"]}]`), []byte(`[{"exp":1}]`), "auto", "calendar-auto", "", "", "",
		"g_xyz", int64(1700000000), "narrowed: exp", false)
	f.Add(uint64(1), "", "t", KindRequest, "", "HELLO", "x", uint32(0), uint32(0), int32(0), "", "", "", "", false,
		"", []byte(` [ 1 , 2 ] `), []byte(`nope`), "ok", "", "", "", "", "", int64(0), `say "hi" <&>`, true)
	f.Add(uint64(2), "p", "t", KindDeny, "r", "GRANT", "", uint32(5), uint32(5), int32(1), "b\u00e9b", "", "", "", true,
		"", []byte(nil), []byte(`"\u2028"`), "denied", "", "", "", "", "", int64(-3), "a\nb", true)
	f.Fuzz(func(t *testing.T, seq uint64, prev, tm, kind, rid, verb, target string,
		uid, gid uint32, pid int32, user, exe, unit, device string, withCaller bool,
		holder string, requested, issued []byte, decision, rule, approver, channel, strength string,
		grantID string, expiry int64, message string, withDecider bool) {
		rec := Record{Seq: seq, Prev: prev, Time: tm, Kind: kind, RequestID: rid, Verb: verb, Target: target,
			Holder: holder, Requested: requested, Issued: issued, Decision: decision, GrantID: grantID, Expiry: expiry, Message: message}
		if withCaller {
			rec.Caller = &Caller{UID: uid, GID: gid, PID: pid, User: user, Exe: exe, Unit: unit, Device: device}
		}
		if withDecider {
			rec.DecidedBy = &Decider{Rule: rule, Approver: approver, Channel: channel, Strength: strength}
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		werr := enc.Encode(&rec)
		got, ok := appendRecord([]byte("x"), &rec)
		if !ok {
			if string(got) != "x" {
				t.Fatalf("declined, but left %q", got)
			}
			if werr == nil && plainRecord(&rec) {
				t.Fatalf("declined a plain record that encoding/json writes as %s", want.Bytes())
			}
			return
		}
		if werr != nil {
			t.Fatalf("wrote %s where encoding/json fails: %v", got, werr)
		}
		if w := bytes.TrimSuffix(want.Bytes(), []byte("\n")); !bytes.Equal(got[1:], w) {
			t.Fatalf("wrote\n%s\nencoding/json writes\n%s", got[1:], w)
		}
	})
}

// plainRecord reports whether every string of rec is printable ASCII
// without a quote or backslash, and its raw JSON compact.
func plainRecord(rec *Record) bool {
	strs := []string{rec.Prev, rec.Time, rec.Kind, rec.RequestID, rec.Verb, rec.Target, rec.Holder, rec.Decision, rec.GrantID, rec.Message}
	if c := rec.Caller; c != nil {
		strs = append(strs, c.User, c.Exe, c.Unit, c.Device)
	}
	if d := rec.DecidedBy; d != nil {
		strs = append(strs, d.Rule, d.Approver, d.Channel, d.Strength)
	}
	for _, s := range strs {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
				return false
			}
		}
	}
	for _, raw := range [][]byte{rec.Requested, rec.Issued} {
		if len(raw) > 0 && !json.Valid(raw) {
			return false
		}
	}
	return true
}

// TestAppendRecordKnowsEveryField fills every field of a Record, its Caller
// and its Decider (but the four appendRecord declines) through reflection,
// so a field added to the record and not to appendRecord fails here rather
// than vanishing from the log.
func TestAppendRecordKnowsEveryField(t *testing.T) {
	var rec Record
	testfill.Fill(t, &rec, "Cut", "Folded", "Checkpoint", "Damage", "Remembered")
	want, err := json.Marshal(&rec)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := appendRecord(nil, &rec)
	if !ok || !bytes.Equal(got, want) {
		t.Fatalf("appendRecord (ok %v) wrote\n%s\nencoding/json writes\n%s", ok, got, want)
	}
}
