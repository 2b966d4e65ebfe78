package protocol

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testfill"
)

// TestEncodersKnowEveryField fills every exported field of a Frame (but the
// request fields appendFrame leaves to encoding/json) and of a GrantResult
// through reflection: a field added to either and not to the hand-written
// encoders fails here rather than going missing from what is sent. Each
// hand-written path must take the filled value, or the test would compare
// encoding/json with itself.
func TestEncodersKnowEveryField(t *testing.T) {
	var fr Frame
	testfill.Fill(t, &fr, "Grant", "Consent", "Proposal", "Proof", "Audit", "Data")
	if _, ok := appendFrame(nil, &fr); !ok {
		t.Fatal("appendFrame declines the filled frame: leave out what it declines, or teach it the new field")
	}
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
	testfill.Fill(t, &res, "Caveats")
	reply, err := GrantReplyFrame(&res)
	if err != nil {
		t.Fatal(err)
	}
	if reply.compact == nil {
		t.Fatal("GrantReplyFrame declines the filled result: teach it the new field")
	}
	if want, _ := json.Marshal(&res); !bytes.Equal(reply.Data, want) {
		t.Errorf("GrantReplyFrame wrote\n%s\nencoding/json writes\n%s", reply.Data, want)
	}
}
