package keyd

import (
	"os"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/grant"
)

// TestExeObservedNotProven: the program and unit of the caller, read from
// /proc, are shown to the human and written to the audit log as observed,
// never as proof of which program asks (review item 6: another program of
// the same user can take over the connection or exec the trusted binary).
func TestExeObservedNotProven(t *testing.T) {
	h := newHarness(t)
	a := askGrant(t, h.client(), newAgentKey(t), grant.Can("mail.read"))
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	v := h.srv.Pending()[0]
	want := "\nObserved program " + self
	if !strings.Contains(v.Text, want) || !strings.Contains(v.Text, "(not proof: any program of user "+me(t)+" can appear so)") {
		t.Errorf("the human is shown %q; want a line saying %q, not proof", v.Text, want)
	}
	if err := h.client().Deny(ctxT(t), a.ev.Request, "terminal"); err != nil {
		t.Fatal(err)
	}
	a.wait(t)
	raw, err := os.ReadFile(h.dir + "/audit.log")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	last := lines[len(lines)-1]
	if !strings.Contains(last, `"exe_observed":`) || strings.Contains(last, `"exe":`) {
		t.Errorf("the audit record names the program as %s; want it under exe_observed", last)
	}
	if recs := auditRecords(t, h); recs[len(recs)-1].Caller.Exe != self {
		t.Errorf("the audit record reads back with exe %q, want %q", recs[len(recs)-1].Caller.Exe, self)
	}
}
