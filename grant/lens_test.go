package grant

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestLensConformance runs every case of conformance/lens.json (§9): the
// Lens of each value and reply must match byte for byte.
func TestLensConformance(t *testing.T) {
	data, err := os.ReadFile("testdata/conformance/lens.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Name  string          `json:"name"`
		Type  string          `json:"type"`
		Input json.RawMessage `json:"input"`
		Lens  string          `json:"lens"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 27 {
		t.Fatalf("lens.json has %d cases, want at least 27", len(cases))
	}
	for _, c := range cases {
		t.Run(c.Type+"/"+c.Name, func(t *testing.T) {
			var got string
			var err error
			switch c.Type {
			case "value":
				got, err = LensValue(c.Input)
			case "reply":
				got, err = LensReply(c.Input)
			default:
				t.Fatalf("unknown case type %q", c.Type)
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != c.Lens {
				t.Errorf("lens mismatch (-want +got):\n%s", cmp.Diff(strings.Split(c.Lens, "\n"), strings.Split(got, "\n")))
			}
		})
	}
}
