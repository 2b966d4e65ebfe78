package audit

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// The log writes each record as encoding/json does with HTML escaping off
// (Log.encode). A grant's record went through reflection for that on every
// request; appendRecord writes the same bytes by hand for the records the
// daemon writes all the time, and declines the rest, which encoding/json
// then writes. FuzzAppendRecord holds the two to the same bytes.

// appendRecord appends rec's line, without its newline, as encoding/json
// would write it, and reports whether it could: it declines a record with
// Cut, Folded or Checkpoint, or a string that encoding/json would escape,
// or raw JSON it would reject.
func appendRecord(dst []byte, rec *Record) ([]byte, bool) {
	if len(rec.Cut) > 0 || rec.Folded != nil || rec.Checkpoint != nil || rec.Damage != nil || rec.Remembered != nil {
		return dst, false
	}
	start := len(dst)
	fail := func() ([]byte, bool) { return dst[:start], false }
	b := append(dst, `{"seq":`...)
	b = strconv.AppendUint(b, rec.Seq, 10)
	var ok bool
	if b, ok = appendField(b, `,"prev":`, rec.Prev, false); !ok {
		return fail()
	}
	if b, ok = appendField(b, `,"time":`, rec.Time, false); !ok {
		return fail()
	}
	if b, ok = appendField(b, `,"kind":`, rec.Kind, false); !ok {
		return fail()
	}
	for _, f := range []struct {
		key, v string
	}{{`,"request_id":`, rec.RequestID}, {`,"verb":`, rec.Verb}, {`,"target":`, rec.Target}} {
		if b, ok = appendField(b, f.key, f.v, true); !ok {
			return fail()
		}
	}
	if c := rec.Caller; c != nil {
		b = append(b, `,"caller":{"uid":`...)
		b = strconv.AppendUint(b, uint64(c.UID), 10)
		b = append(b, `,"gid":`...)
		b = strconv.AppendUint(b, uint64(c.GID), 10)
		b = append(b, `,"pid":`...)
		b = strconv.AppendInt(b, int64(c.PID), 10)
		for _, f := range []struct {
			key, v string
		}{{`,"user":`, c.User}, {`,"exe_observed":`, c.Exe}, {`,"unit_observed":`, c.Unit}, {`,"device":`, c.Device}} {
			if b, ok = appendField(b, f.key, f.v, true); !ok {
				return fail()
			}
		}
		b = append(b, '}')
	}
	if b, ok = appendField(b, `,"holder":`, rec.Holder, true); !ok {
		return fail()
	}
	if b, ok = appendRaw(b, `,"requested":`, rec.Requested); !ok {
		return fail()
	}
	if b, ok = appendRaw(b, `,"issued":`, rec.Issued); !ok {
		return fail()
	}
	if b, ok = appendField(b, `,"decision":`, rec.Decision, true); !ok {
		return fail()
	}
	if d := rec.DecidedBy; d != nil {
		b = append(b, `,"decided_by":{`...)
		open := len(b)
		for _, f := range []struct {
			key, v string
		}{{`"rule":`, d.Rule}, {`"approver":`, d.Approver}, {`"channel":`, d.Channel}, {`"strength":`, d.Strength}, {`"remembered":`, d.Remembered}} {
			if f.v == "" {
				continue
			}
			if len(b) > open {
				b = append(b, ',')
			}
			if b, ok = appendField(b, f.key, f.v, false); !ok {
				return fail()
			}
		}
		b = append(b, '}')
	}
	if b, ok = appendField(b, `,"grant_id":`, rec.GrantID, true); !ok {
		return fail()
	}
	if rec.Expiry != 0 {
		b = append(b, `,"expiry":`...)
		b = strconv.AppendInt(b, rec.Expiry, 10)
	}
	if b, ok = appendField(b, `,"message":`, rec.Message, true); !ok {
		return fail()
	}
	return append(b, '}'), true
}

// appendField appends key and s as a JSON string, or nothing when s is
// empty and omitEmpty. It declines a string that needs an escape.
func appendField(b []byte, key, s string, omitEmpty bool) ([]byte, bool) {
	if s == "" && omitEmpty {
		return b, true
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return b, false
		}
	}
	b = append(b, key...)
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), true
}

// appendRaw appends key and raw compacted, as encoding/json writes a
// json.RawMessage without HTML escaping, or nothing when raw is empty. It
// declines raw that is not valid JSON.
func appendRaw(b []byte, key string, raw json.RawMessage) ([]byte, bool) {
	if len(raw) == 0 {
		return b, true
	}
	buf := bytes.NewBuffer(append(b, key...))
	if json.Compact(buf, raw) != nil {
		return b, false
	}
	return buf.Bytes(), true
}
