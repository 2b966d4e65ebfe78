package keyd

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

var updateVerbs = flag.Bool("update-verbs", false, "rewrite testdata/manifest_verbs.json from the daemon's HELLO")

// protocolVerbs reads the verbs keyd/protocol defines from its source: every
// string constant named Verb…, so that a verb added there and nowhere else
// is seen here.
func protocolVerbs(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join("protocol", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, sp := range g.Specs {
				vs := sp.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !strings.HasPrefix(n.Name, "Verb") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s: %s is not a string literal", name, n.Name)
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out = append(out, v)
				}
			}
		}
	}
	if len(out) < 11 {
		t.Fatalf("found only %d verbs in keyd/protocol: %v", len(out), out)
	}
	return out
}

// The roles a verb asks of its caller, and what an approver verb does in the
// words of the refusal an agent gets, as the daemon answers today.
var (
	pinnedAgentVerbs    = []string{protocol.VerbGrant, protocol.VerbExplain, protocol.VerbConsent}
	pinnedApproverVerbs = map[string]string{
		protocol.VerbPending: "list pending requests",
		protocol.VerbApprove: "approve requests",
		protocol.VerbDeny:    "deny requests",
		protocol.VerbWatch:   "watch pending requests",
		protocol.VerbAudit:   "use AUDIT",
		protocol.VerbLock:    "lock the daemon",
		protocol.VerbUnlock:  "unlock the daemon",
	}
	pinnedAnyVerbs = []string{protocol.VerbHello}
)

// TestVerbsAgreeEverywhere: every verb keyd/protocol defines is answered,
// each is refused to a caller of the wrong role with the same code, message
// and fix as before, its refusal is recorded as before, and HELLO lists it
// to exactly the callers who may send it. A verb added in one place and not
// another (the unknown-verb check, the dispatch, the manifest, the role
// check, the words of the refusal) fails here.
func TestVerbsAgreeEverywhere(t *testing.T) {
	h := newHarness(t)
	id := selfIdentity(t)
	callers := map[string]Caller{
		"agent":    {Identity: id, Roles: Roles{Agent: true}},
		"approver": {Identity: id, Roles: Roles{Approver: true}},
		"both":     {Identity: id, Roles: Roles{Agent: true, Approver: true, Weak: true}},
		"none":     {Identity: id},
		"phone":    phoneCaller("pixel"),
	}
	verbs := protocolVerbs(t)
	// Who may call each verb: as pinned above for the verbs the daemon had
	// when the table was made, as the table says for a verb added since.
	agentVerbs, anyVerbs := slices.Clone(pinnedAgentVerbs), slices.Clone(pinnedAnyVerbs)
	approverVerbs := maps.Clone(pinnedApproverVerbs)
	isAgent := func(v string) bool { return slices.Contains(agentVerbs, v) }
	does := func(v string) string { return approverVerbs[v] }
	isAny := func(v string) bool { return slices.Contains(anyVerbs, v) }
	for _, v := range verbs {
		e, ok := lookupVerb(v)
		if !ok {
			t.Fatalf("keyd/protocol defines verb %s and the verb table does not hold it", v)
		}
		if isAgent(v) || does(v) != "" || isAny(v) {
			continue
		}
		switch e.role {
		case roleAgent:
			agentVerbs = append(agentVerbs, v)
		case roleApprover:
			approverVerbs[v] = cmp.Or(e.does, "use "+v)
		default:
			anyVerbs = append(anyVerbs, v)
		}
	}
	for i := range verbTable {
		if !slices.Contains(verbs, verbTable[i].name) {
			t.Errorf("the table holds verb %s, which keyd/protocol does not define", verbTable[i].name)
		}
	}
	type refusal struct{ verb, message string }
	var refused []refusal
	names := []string{"agent", "approver", "both", "none", "phone"}
	for _, v := range verbs {
		for _, who := range names {
			c := callers[who]
			var want *protocol.Error
			switch {
			case isAgent(v) && !c.Roles.Agent:
				want = &protocol.Error{Code: protocol.CodeForbidden,
					Message: fmt.Sprintf("%s may approve but not ask for grants (%s)", c.phrase(), v)}
			case does(v) != "" && !c.Roles.Approver:
				want = &protocol.Error{Code: protocol.CodeForbidden,
					Message: fmt.Sprintf("%s is an agent and may not %s", c.phrase(), approverVerbs[v]),
					Fix:     "a human approves with parley-grant approve, as a user listed in access.approver_users"}
			}
			ctx, cancel := context.WithCancel(context.Background())
			if v == protocol.VerbWatch || v == protocol.VerbLock || v == protocol.VerbUnlock {
				// Allowed, WATCH would stream until the caller leaves,
				// and LOCK would stop the daemon: the caller has left.
				cancel()
			}
			_, err := h.srv.Handle(ctx, c, &protocol.Frame{ID: "x", Verb: v}, nil)
			cancel()
			var e *protocol.Error
			isRole := errors.As(err, &e) && e.Code == protocol.CodeForbidden &&
				(strings.Contains(e.Message, "may approve but not") || strings.Contains(e.Message, "is an agent and may not"))
			if want == nil {
				if isRole {
					t.Errorf("%s from %s: refused for its role: %v", v, who, err)
				}
				continue
			}
			if e == nil || *e != *want {
				t.Errorf("%s from %s:\n got %#v\nwant %#v", v, who, e, want)
				continue
			}
			refused = append(refused, refusal{v, want.Message})
		}
	}
	// Unknown verbs, in any case, are refused as before.
	for _, v := range []string{"STEAL", "hello", "Grant", ""} {
		_, err := h.srv.Handle(context.Background(), callers["both"], &protocol.Frame{ID: "x", Verb: v}, nil)
		want := protocol.Error{Code: protocol.CodeBadFrame, Message: fmt.Sprintf("unknown verb %q", v), Fix: "send HELLO to list the verbs"}
		var e *protocol.Error
		if !errors.As(err, &e) || *e != want {
			t.Errorf("verb %q: got %v, want %v", v, err, want)
		}
	}

	// HELLO lists to each caller exactly the verbs it may send, in the
	// manifest's order, with the same words as before.
	for _, who := range names {
		c := callers[who]
		reply, err := h.srv.Handle(context.Background(), c, &protocol.Frame{ID: "h", Verb: protocol.VerbHello}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Verbs json.RawMessage `json:"verbs"`
		}
		if err := json.Unmarshal(reply.Data, &m); err != nil {
			t.Fatal(err)
		}
		var listed []protocol.ManifestVerb
		if err := json.Unmarshal(m.Verbs, &listed); err != nil {
			t.Fatal(err)
		}
		var got, want []string
		for _, l := range listed {
			got = append(got, l.Name)
		}
		for _, v := range verbs {
			if isAny(v) || c.Roles.Agent && isAgent(v) || c.Roles.Approver && does(v) != "" {
				want = append(want, v)
			}
		}
		slices.Sort(want)
		sorted := slices.Sorted(slices.Values(got))
		if !slices.Equal(sorted, want) {
			t.Errorf("HELLO to %s lists %v, want %v", who, got, want)
		}
		if who != "both" {
			continue
		}
		golden := filepath.Join("testdata", "manifest_verbs.json")
		if *updateVerbs {
			if err := os.WriteFile(golden, append(m.Verbs, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		old, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(append(m.Verbs, '\n'), old) {
			t.Errorf("HELLO's verbs changed (for a new verb, rewrite %s with: go test ./keyd -run TestVerbsAgreeEverywhere -update-verbs):\n got %s\nwant %s", golden, m.Verbs, old)
		}
	}

	// Each role refusal left its record, of the kind it had before.
	_, recs := requestRecords(t, h)
	for _, r := range refused {
		kind := audit.KindRequest
		switch r.verb {
		case protocol.VerbGrant, protocol.VerbConsent:
			kind = audit.KindDeny
		case protocol.VerbApprove, protocol.VerbDeny:
			kind = audit.KindDecide
		case protocol.VerbHello, protocol.VerbExplain, protocol.VerbPending, protocol.VerbWatch, protocol.VerbAudit,
			protocol.VerbLock, protocol.VerbUnlock:
		default:
			kind = cmp.Or(verbByName[r.verb].refused, audit.KindRequest)
		}
		found := false
		for _, rec := range recs {
			if rec.Verb == r.verb && rec.Message == r.message {
				found = true
				if rec.Kind != kind || rec.Decision != string(protocol.CodeForbidden) {
					t.Errorf("%s refused for its role: record %s %s, want %s forbidden", r.verb, rec.Kind, rec.Decision, kind)
				}
			}
		}
		if !found {
			t.Errorf("no record of %s refused: %s", r.verb, r.message)
		}
	}
}

// TestVerbsRunInline: the connection's reader runs a lone request of every
// verb itself, but WATCH (which streams until the client leaves) and AUDIT
// (which may wait for records).
func TestVerbsRunInline(t *testing.T) {
	h := newHarness(t)
	verbs := protocolVerbs(t)
	pinned := []string{protocol.VerbHello, protocol.VerbGrant, protocol.VerbExplain, protocol.VerbConsent,
		protocol.VerbPending, protocol.VerbApprove, protocol.VerbDeny, protocol.VerbWatch, protocol.VerbAudit,
		protocol.VerbLock, protocol.VerbUnlock}
	// LOCK stops the daemon for the verbs after it: it goes last.
	verbs = slices.DeleteFunc(verbs, func(v string) bool { return v == protocol.VerbLock || v == protocol.VerbUnlock })
	for _, v := range append(verbs, protocol.VerbUnlock, protocol.VerbLock) {
		r := h.raw()
		runs := h.srv.inlineRuns.Load()
		r.send(`{"parley":1,"id":"x","verb":"` + v + `"}` + "\n")
		if v == protocol.VerbWatch {
			// WATCH has no reply of its own; a HELLO behind it has one,
			// and is not inline either, as WATCH is still in flight.
			r.send(`{"parley":1,"id":"y","verb":"HELLO"}` + "\n")
			for f := r.read(); f.Re != "y"; f = r.read() {
			}
		} else {
			r.read()
		}
		inline := h.srv.inlineRuns.Load() != runs
		want := v != protocol.VerbWatch && v != protocol.VerbAudit
		if !slices.Contains(pinned, v) {
			want = verbByName[v].inline // a verb added since the table
		}
		if inline != want {
			t.Errorf("%s ran inline: %v, want %v", v, inline, want)
		}
		r.nc.Close()
	}
}
