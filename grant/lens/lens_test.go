package lens

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

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
				got, err = Value(c.Input)
			case "reply":
				got, err = Reply(c.Input)
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

// TestLensReply covers the reply renderings (§9.2) in cases the conformance
// vectors leave out, including the choices this package makes where the
// spec is silent (lens.go lists them).
func TestLensReply(t *testing.T) {
	const f = `"parley":1,"id":"s1","re":"c1",`
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"ok/answer-no-data", `{` + f + `"kind":"ANSWER"}`, `-`},
		{"ok/answer-scalar", `{` + f + `"kind":"ANSWER","data":"hi"}`, `hi`},
		{"ok/answer-empty-object", `{` + f + `"kind":"ANSWER","data":{}}`, `{}`},
		{"ok/answer-array", `{` + f + `"kind":"ANSWER","data":[1,2]}`, `items: [1, 2]`},
		{"ok/service-lens-ignored", `{` + f + `"kind":"ANSWER","data":1,"lens":"trust me"}`, `1`},
		{"ok/more-several", `{` + f + `"kind":"ANSWER","data":{"a":"x"},"more":[{"handle":"h1","path":"data.a","remaining":5,"est":3},{"handle":"h2","path":"data.b","remaining":1,"est":1}]}`,
			"a: x\n… 5 more at data.a — EXPAND h1 (~3 tokens)\n… 1 more at data.b — EXPAND h2 (~1 tokens)"},
		{"ok/more-not-a-list", `{` + f + `"kind":"ANSWER","data":1,"more":{"handle":"h"}}`, `1`},
		{"ok/event-full", `{` + f + `"kind":"EVENT","message":"done","progress":1}`, `… done (100%)`},
		{"ok/event-rounds-half-up", `{` + f + `"kind":"EVENT","message":"m","progress":0.005}`, `… m (1%)`},
		{"ok/event-rounds-down", `{` + f + `"kind":"EVENT","message":"m","progress":0.004}`, `… m (0%)`},
		{"ok/event-progress-not-number", `{` + f + `"kind":"EVENT","message":"m","progress":"half"}`, `… m`},
		{"ok/event-progress-null", `{` + f + `"kind":"EVENT","message":"m","progress":null}`, `… m`},
		{"ok/error-minimal", `{` + f + `"kind":"ERROR","code":"not_found","message":"no such handle"}`, `✗ not_found: no such handle`},
		{"ok/error-retry-null", `{` + f + `"kind":"ERROR","code":"limit","message":"slow down","retry":null}`, `✗ limit: slow down`},
		{"ok/error-retry-seconds", `{` + f + `"kind":"ERROR","code":"limit","message":"slow down","retry":90}`, "✗ limit: slow down\n  retry in: 90s"},
		{"ok/error-retry-fraction", `{` + f + `"kind":"ERROR","code":"limit","message":"m","retry":1.5}`, "✗ limit: m\n  retry in: 1.5s"},
		{"ok/error-need-keeps-order", `{` + f + `"kind":"ERROR","code":"forbidden","message":"m","need":[{"svc":["b.example","a.example"]}]}`, "✗ forbidden: m\n  need: [{\"svc\":[\"b.example\",\"a.example\"]}]"},
		{"ok/clarify-no-options", `{` + f + `"kind":"CLARIFY","question":"Which?"}`, `? Which?`},
		{"ok/receipt-auto-irreversible", `{` + f + `"kind":"RECEIPT","auto":true,"receipt":{"id":"r_5","summary":"Sent","undo":null,"effects":[{"op":"send","target":"a@b.example"}]}}`,
			"✓ Sent (receipt r_5) · irreversible\n  > send a@b.example"},
		{"ok/receipt-auto-false-hides-effects", `{` + f + `"kind":"RECEIPT","auto":false,"receipt":{"id":"r_5","summary":"Sent","undo":null,"effects":[{"op":"send","target":"x"}]}}`,
			"✓ Sent (receipt r_5) · irreversible"},
		{"ok/receipt-result-scalar", `{` + f + `"kind":"RECEIPT","receipt":{"id":"r","summary":"S","undo":{"until":1790003700},"result":7}}`,
			"✓ S (receipt r) · undo until 2026-09-21T15:15Z\n  result: 7"},
		{"ok/receipt-result-list", `{` + f + `"kind":"RECEIPT","receipt":{"id":"r","summary":"S","undo":null,"result":[{"a":1}]}}`,
			"✓ S (receipt r) · irreversible\n  result[1]{a}:\n    1"},
		{"ok/undo-receipt-replay-result", `{` + f + `"kind":"RECEIPT","replay":true,"receipt":{"id":"r_3","summary":"Moved","undo":null,"undoes":"r_1","result":{"ok":true}}}`,
			"↶ undid r_1: Moved (receipt r_3) (replay)\n  result:\n    ok: true"},
		{"ok/brief-param-forms", `{` + f + `"kind":"BRIEF","service":{"id":"s","name":"S"},"capabilities":[{"name":"a","kind":"ask","params":{"tags?":["string"],"n":"int[]","o":{},"e":"low|medium|high"}},{"name":"b","kind":"intent","params":"raw"}]}`,
			"# S (s)\nask a(tags?: [string], n: int[], o: {}, e: low|medium|high)\nintent b(raw)"},
		{"ok/brief-risk-without-summary", `{` + f + `"kind":"BRIEF","service":{"id":"s","name":"S"},"capabilities":[{"name":"a","kind":"intent","risk":"high"}]}`,
			"# S (s)\nintent a() [risk:high]"},
		{"ok/proposals-none", `{` + f + `"kind":"PROPOSALS","proposals":[]}`, `0 proposals:`},
		{"ok/proposal-defaults", `{` + f + `"kind":"PROPOSALS","proposals":[{"id":"p","summary":"S","effects":[]}]}`,
			"1 proposal:\n[p] S\n  cost: free · undo: never"},
		{"ok/proposal-zero-and-big-money", `{` + f + `"kind":"PROPOSALS","proposals":[{"id":"p","cost":{"amount":0,"currency":"USD"},"risk":"low","undo":{"window":0},"expires":0},{"id":"q","cost":{"amount":123456789,"currency":"KRW"},"risk":"low","undo":{"window":0},"expires":0}]}`,
			"2 proposals — risk: low · undo: 0d · expires: 1970-01-01T00:00Z:\n[p]\n  cost: 0.00 USD\n[q]\n  cost: 123456789 KRW"},
		{"ok/proposal-odd-cost", `{` + f + `"kind":"PROPOSALS","proposals":[{"id":"p","cost":{"amount":1.5,"currency":"USD"}}]}`,
			"1 proposal:\n[p]\n  cost: {\"amount\":1.5,\"currency\":\"USD\"} · undo: never"},
		{"ok/proposal-shared-needs-all", `{` + f + `"kind":"PROPOSALS","proposals":[{"id":"a","risk":"low"},{"id":"b"}]}`,
			"2 proposals — cost: free · undo: never:\n[a]\n  risk: low\n[b]"},
		{"ok/proposal-data-null-omitted", `{` + f + `"kind":"PROPOSALS","proposals":[{"id":"p","data":null}]}`,
			"1 proposal:\n[p]\n  cost: free · undo: never"},
		{"ok/proposal-data-scalar", `{` + f + `"kind":"PROPOSALS","proposals":[{"id":"p","data":"x"}]}`,
			"1 proposal:\n[p]\n  cost: free · undo: never\n  data: x"},
		{"ok/proposal-not-object", `{` + f + `"kind":"PROPOSALS","proposals":[5]}`, "1 proposal:\n5"},
		{"ok/text-field-number", `{` + f + `"kind":"CLARIFY","question":42,"options":[{"label":true},{"label":{"x":1}},{}]}`,
			"? 42\n  1. true\n  2. {\"x\":1}\n  3. "},
		{"ok/time-not-integer", `{` + f + `"kind":"RECEIPT","receipt":{"id":"r","summary":"S","undo":{"until":1.5}}}`,
			"✓ S (receipt r) · undo until 1.5"},
		{"ok/lone-surrogate-in-text", `{` + f + `"kind":"EVENT","message":"a\ud800b"}`, "… a\uFFFDb"},
		{"ok/multi-line-text-inserted-as-is", `{` + f + `"kind":"EVENT","message":"a\nb"}`, "… a\nb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Reply([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("Reply(%s)\n got %q\nwant %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestLensReplyRefuses(t *testing.T) {
	tests := []struct{ name, in string }{
		{"fail/not-json", `{`},
		{"fail/not-object", `[1]`},
		{"fail/no-kind", `{"parley":1}`},
		{"fail/kind-not-string", `{"kind":1}`},
		{"fail/unknown-kind", `{"kind":"WHATEVER"}`},
		{"fail/lower-case-kind", `{"kind":"answer","data":1}`},
		{"fail/duplicate-kind", `{"kind":"ANSWER","kind":"ERROR"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := Reply([]byte(tt.in)); err == nil {
				t.Errorf("Reply(%s) = %q, want an error", tt.in, got)
			}
		})
	}
}

// TestLensProposalIsPROPOSALSForOne checks, for every proposal in the
// conformance vectors, that LensProposal is the PROPOSALS rendering for N = 1
// without its header (§9.2).
func TestLensProposalIsPROPOSALSForOne(t *testing.T) {
	data, err := os.ReadFile("testdata/conformance/lens.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Type  string          `json:"type"`
		Input json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range cases {
		if c.Type != "reply" {
			continue
		}
		var frame struct {
			Proposals []json.RawMessage `json:"proposals"`
		}
		if err := json.Unmarshal(c.Input, &frame); err != nil {
			t.Fatal(err)
		}
		for _, p := range frame.Proposals {
			n++
			got, err := Proposal(p)
			if err != nil {
				t.Fatal(err)
			}
			frame := `{"parley":1,"id":"s","re":"c","kind":"PROPOSALS","proposals":[` + string(p) + `]}`
			want, err := Reply([]byte(frame))
			if err != nil {
				t.Fatal(err)
			}
			if "1 proposal:\n"+got != want {
				t.Errorf("Proposal(%s)\n got %q\nwant %q", p, got, strings.TrimPrefix(want, "1 proposal:\n"))
			}
		}
	}
	if n < 8 {
		t.Fatalf("found %d proposals in lens.json, want at least 8", n)
	}
	if _, err := Proposal(json.RawMessage(`[]`)); err == nil {
		t.Error("LensProposal accepted an array")
	}
}

func TestEffectLine(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"ok/create", `{"op":"create","target":"order"}`, `+ create order`},
		{"ok/update-field", `{"op":"update","target":"event/e42","field":"start","from":"a","to":"b"}`, `~ update event/e42.start: a → b`},
		{"ok/delete", `{"op":"delete","target":"cart/1"}`, `- delete cart/1`},
		{"ok/send-detail", `{"op":"send","target":"ana@example.com","detail":"note"}`, `> send ana@example.com — note`},
		{"ok/charge", `{"op":"charge","target":"card ••42","detail":"12.50 USD"}`, `$ charge card ••42 — 12.50 USD`},
		{"ok/other-to-only", `{"op":"other","target":"x","to":5}`, `* other x: - → 5`},
		{"ok/from-only", `{"op":"update","target":"x","from":true}`, `~ update x: true → -`},
		{"ok/null-sides-omitted", `{"op":"update","target":"x","from":null,"to":null}`, `~ update x`},
		{"ok/sides-are-lean-scalars", `{"op":"update","target":"x","from":"a, b","to":"123"}`, `~ update x: "a, b" → "123"`},
		{"ok/side-not-scalar", `{"op":"update","target":"x","to":{"a":[1]}}`, `~ update x: - → {"a":[1]}`},
		{"ok/unknown-op", `{"op":"destroy","target":"x"}`, `? destroy x`},
		{"ok/missing-op", `{"target":"x"}`, `?  x`},
		{"ok/op-wrong-case", `{"op":"Create","target":"x"}`, `? Create x`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := EffectLine(json.RawMessage(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("EffectLine(%s) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
	for _, in := range []string{`"create"`, `[]`, `null`, `{`} {
		if got, err := EffectLine(json.RawMessage(in)); err == nil {
			t.Errorf("EffectLine(%s) = %q, want an error", in, got)
		}
	}
}

// FuzzLensReply checks that LensReply never panics, refuses invalid JSON and
// produces valid UTF-8.
func FuzzLensReply(f *testing.F) {
	data, err := os.ReadFile("testdata/conformance/lens.json")
	if err != nil {
		f.Fatal(err)
	}
	var cases []struct {
		Input json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		f.Fatal(err)
	}
	for _, c := range cases {
		f.Add([]byte(c.Input))
	}
	for _, v := range []string{`null`, `1.5`, "\"x\u202e\"", `"\u202e"`, `[{"a":1}]`, `{"window":60,"until":0}`, `{"amount":-5,"currency":"JPY"}`, `"update"`} {
		f.Add([]byte(v))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(frame []byte) {
			out, err := Reply(frame)
			if err != nil {
				return
			}
			if !json.Valid(frame) {
				t.Fatalf("LensReply accepted invalid JSON %q", frame)
			}
			if !utf8.ValidString(out) {
				t.Fatalf("Reply(%q) = %q: not valid UTF-8", frame, out)
			}
			if d, err := DisplayReply(frame, 40); err != nil || !lensTestSafe(d, true) {
				t.Fatalf("DisplayReply(%q) = %q, %v: not safe", frame, d, err)
			}
		}
		check(data)
		if !json.Valid(data) {
			return
		}
		// Place the fuzzed value in every slot of every reply kind, so the
		// renderers meet values of every type where they expect others.
		x := string(data)
		for _, frame := range []string{
			`{"kind":"BRIEF","service":` + x + `,"capabilities":[` + x + `,{"name":` + x + `,"params":` + x + `,"risk":` + x + `}]}`,
			`{"kind":"PROPOSALS","proposals":[` + x + `,{"id":` + x + `,"effects":` + x + `,"cost":` + x + `,"undo":` + x + `,"expires":` + x + `,"data":` + x + `}]}`,
			`{"kind":"PROPOSALS","proposals":[{"effects":[` + x + `,{"op":` + x + `,"from":` + x + `,"to":` + x + `}],"cost":{"amount":` + x + `,"currency":` + x + `},"undo":{"window":` + x + `}}]}`,
			`{"kind":"CLARIFY","question":` + x + `,"options":[` + x + `,{"label":` + x + `}]}`,
			`{"kind":"RECEIPT","auto":true,"receipt":` + x + `}`,
			`{"kind":"RECEIPT","replay":true,"receipt":{"undoes":` + x + `,"result":` + x + `}}`,
			`{"kind":"RECEIPT","auto":true,"receipt":{"undo":{"until":` + x + `},"effects":` + x + `}}`,
			`{"kind":"ANSWER","data":` + x + `,"more":[` + x + `,{"remaining":` + x + `}]}`,
			`{"kind":"ERROR","code":` + x + `,"fix":[` + x + `,{"params":` + x + `}],"need":` + x + `,"consent":` + x + `,"retry":` + x + `}`,
			`{"kind":"EVENT","message":` + x + `,"progress":` + x + `}`,
		} {
			check([]byte(frame))
		}
	})
}

func BenchmarkLensReply(b *testing.B) {
	data, err := os.ReadFile("testdata/conformance/lens.json")
	if err != nil {
		b.Fatal(err)
	}
	var cases []struct {
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		b.Fatal(err)
	}
	var in []byte
	for _, c := range cases {
		if c.Name == "proposals" {
			in = c.Input
		}
	}
	if in == nil {
		b.Fatal("no proposals case in lens.json")
	}
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, err := Reply(in); err != nil {
			b.Fatal(err)
		}
	}
}
