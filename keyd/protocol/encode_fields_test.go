package protocol

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// TestEncodersKnowEveryField fills every exported field of a Frame (but the
// request fields appendFrame leaves to encoding/json) and of a GrantResult
// through reflection: a field added to either and not to the hand-written
// encoders fails here rather than going missing from what is sent.
func TestEncodersKnowEveryField(t *testing.T) {
	var fr Frame
	fill(t, reflect.ValueOf(&fr).Elem(), map[string]bool{"Grant": true, "Consent": true, "Proposal": true, "Proof": true, "Data": true})
	got, err := EncodeFrame(&fr)
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal(&fr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSuffix(got, []byte("\n")), want) {
		t.Errorf("EncodeFrame wrote\n%s\nencoding/json writes\n%s", got, want)
	}

	var res GrantResult
	fill(t, reflect.ValueOf(&res).Elem(), map[string]bool{"Caveats": true})
	reply, err := GrantReplyFrame(&res)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := json.Marshal(&res); !bytes.Equal(reply.Data, want) {
		t.Errorf("GrantReplyFrame wrote\n%s\nencoding/json writes\n%s", reply.Data, want)
	}
}

func fill(t *testing.T, v reflect.Value, skip map[string]bool) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(t, v.Index(0), nil)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), nil)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if f := v.Type().Field(i); f.IsExported() && !skip[f.Name] {
				fill(t, v.Field(i), nil)
			}
		}
	default:
		t.Fatalf("no filler for %s", v.Type())
	}
}
