package policies

import (
	"strings"
	"testing"
)

func TestAgentFor(t *testing.T) {
	const key = "ed25519:gTl3Dqh9F19Wo1Rmw0x-zMuNipG07jeiXfYPW4_Js5Q"
	p := mustParse(t, `
[[agent]]
name = "two-matchers"
user = ["alice", "carol"]
exe = ["/usr/bin/agent"]

[[agent]]
name = "by-uid"
uid = [1001, 1002]

[[agent]]
name = "by-group"
group = ["agents"]

[[agent]]
name = "by-gid"
gid = [500]

[[agent]]
name = "by-unit"
uid = [7]
unit = ["agent@*"]

[[agent]]
name = "by-key"
key = ["`+key+`"]

[[agent]]
name = "exe-dir"
uid = [7]
exe = ["/opt/agents/*"]
`)
	tests := []struct {
		name   string
		caller Caller
		want   string // "" = no agent
	}{
		{"ok/user-and-exe", Caller{User: "alice", Exe: "/usr/bin/agent"}, "two-matchers"},
		{"ok/second-user", Caller{User: "carol", Exe: "/usr/bin/agent"}, "two-matchers"},
		{"fail/user-without-exe", Caller{User: "alice"}, ""},
		{"fail/exe-without-user", Caller{User: "bob", Exe: "/usr/bin/agent"}, ""},
		{"fail/empty-user-name", Caller{User: "", Exe: "/usr/bin/agent"}, ""},
		{"ok/uid", Caller{UID: 1002}, "by-uid"},
		{"fail/uid-zero-is-not-any", Caller{UID: 0}, ""},
		{"ok/group-name-supplementary", Caller{UID: 7, Groups: []string{"users", "agents"}}, "by-group"},
		{"fail/group-name-empty", Caller{UID: 7, Groups: []string{""}}, ""},
		{"ok/primary-gid", Caller{UID: 7, GID: 500}, "by-gid"},
		{"ok/supplementary-gid", Caller{UID: 7, GID: 1, GroupIDs: []uint32{3, 500}}, "by-gid"},
		{"ok/unit-pattern", Caller{UID: 7, Unit: "agent@3.service"}, "by-unit"},
		{"fail/unit-other", Caller{UID: 7, Unit: "web.service"}, ""},
		{"ok/holder-key", Caller{UID: 7, HolderKey: key}, "by-key"},
		{"fail/holder-key-other", Caller{UID: 7, HolderKey: "ed25519:7UkoxijRwsbq6QM4kFmVYSlZJzpcY_k2NsFGFKyHN9E"}, ""},
		{"ok/exe-under-dir", Caller{UID: 7, Exe: "/opt/agents/bin/x"}, "exe-dir"},
		{"fail/exe-dir-lookalike", Caller{UID: 7, Exe: "/opt/agents-evil/x"}, ""},
		{"ok/first-match-wins", Caller{UID: 1001, Groups: []string{"agents"}}, "by-uid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := p.AgentFor(tt.caller)
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("AgentFor = %q, %v, want %q", got, ok, tt.want)
			}
		})
	}
}

func mustParse(t testing.TB, src string) *Policy {
	t.Helper()
	p, err := Parse([]byte(src), "p.toml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return p
}

func TestMaxPendingAndRate(t *testing.T) {
	p := testPolicy(t)
	for _, tt := range []struct {
		agent         string
		pending, rate int
	}{{"boxed", 0, 2}, {"calendar", DefaultPending, DefaultRate}, {"nobody", 0, 0}} {
		if got := p.MaxPending(tt.agent); got != tt.pending {
			t.Errorf("MaxPending(%q) = %d, want %d", tt.agent, got, tt.pending)
		}
		if got := p.Rate(tt.agent); got != tt.rate {
			t.Errorf("Rate(%q) = %d, want %d", tt.agent, got, tt.rate)
		}
	}
}

func TestAllowed(t *testing.T) {
	p := testPolicy(t)
	got := p.Allowed(calCaller)
	var names []string
	for _, s := range got {
		names = append(names, s.Rule+":"+string(s.Action))
	}
	want := "no-bank:deny cal-delete-asks:ask cal-auto:auto fallback:ask"
	if strings.Join(names, " ") != want {
		t.Errorf("Allowed(calendar) rules = %q, want %q", strings.Join(names, " "), want)
	}
	auto := got[2]
	if auto.MaxExp != 3600 || auto.DefaultExp != 600 || !auto.Clamp || auto.Risk != "low" || auto.Per == nil || auto.Per.Max != 0 {
		t.Errorf("Allowed(calendar) auto rule = %+v", auto)
	}
	if got[1].Channels == nil || got[1].Strong || got[0].MaxExp != 0 {
		t.Errorf("Allowed(calendar) = %+v", got)
	}
	if !strings.HasPrefix(auto.Text, "Issues without asking") {
		t.Errorf("summary text = %q", auto.Text)
	}
	if s := p.Allowed(Caller{}); len(s) != 2 || s[0].Rule != "no-bank" || s[1].Rule != "fallback" {
		t.Errorf("Allowed(any local caller) = %+v, want no-bank and fallback", s)
	}
	empty := mustParse(t, "[[agent]]\nname = \"a\"\nuid = [1]\n")
	if s := empty.Allowed(Caller{UID: 2}); s != nil {
		t.Errorf("Allowed(unknown caller) = %+v, want nil", s)
	}
}
