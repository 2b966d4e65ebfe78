package policies

import (
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/grant"
)

func TestWarnings(t *testing.T) {
	const two = base + "[[agent]]\nname = \"b\"\nuid = [2]\n"
	tests := []struct {
		name string
		src  string
		want []string // substrings, one per warning, in order
	}{
		{"ok/no-warnings", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nmax_exp = \"1h\"\n[[consent]]\nagents = [\"*\"]", nil},
		{"warn/no-consent", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"", []string{"no [[consent]] rules"}},
		{"warn/agent-without-rules", two + "[[rule]]\nagents = [\"a\"]\naction = \"ask\"\n[[consent]]\nagents = [\"*\"]", []string{`agent "b" (line 4) has no rules`}},
		{"warn/agent-shadowed-by-any", "[[agent]]\nname = \"all\"\nany = true\n[[agent]]\nname = \"b\"\nuid = [2]\n[[rule]]\nagents = [\"*\"]\naction = \"ask\"\n[[consent]]\nagents = [\"*\"]",
			[]string{`agent "b" (line 4) can never match: agent "all" (line 1)`}},
		{"warn/agent-shadowed-by-broader-exe", "[[agent]]\nname = \"a\"\nexe = [\"/opt/*\"]\nuid = [3]\n[[agent]]\nname = \"b\"\nexe = [\"/opt/x\"]\nuid = [3]\n[[rule]]\nagents = [\"*\"]\naction = \"ask\"\n[[consent]]\nagents = [\"*\"]",
			[]string{`agent "b" (line 5) can never match`}},
		{"ok/agent-narrower-first-not-shadowing", "[[agent]]\nname = \"a\"\nexe = [\"/opt/x\"]\nuid = [3]\n[[agent]]\nname = \"b\"\nexe = [\"/opt/*\"]\nuid = [3]\n[[rule]]\nagents = [\"*\"]\naction = \"ask\"\n[[consent]]\nagents = [\"*\"]", nil},
		{"warn/rule-shadowed-by-deny", base + "[[rule]]\nname = \"d\"\nagents = [\"*\"]\naction = \"deny\"\ncan = [\"bank.*\"]\n[[rule]]\nname = \"r\"\nagents = [\"a\"]\naction = \"ask\"\ncan = [\"bank.read\"]\n[[consent]]\nagents = [\"*\"]",
			[]string{`rule "r" (line 9) can never decide: rule "d" (line 4)`}},
		{"warn/rule-shadowed-by-broader-ask", base + "[[rule]]\nname = \"wide\"\nagents = [\"*\"]\naction = \"ask\"\nmax_exp = \"2h\"\n[[rule]]\nname = \"narrow\"\nagents = [\"a\"]\naction = \"auto\"\ncan = [\"x\"]\nmax_exp = \"1h\"\nper = \"0USD\"\n[[consent]]\nagents = [\"*\"]",
			[]string{`rule "narrow" (line 9) can never decide: rule "wide"`}},
		{"ok/rule-not-shadowed-when-later-allows-longer", base + "[[rule]]\nname = \"short\"\nagents = [\"*\"]\naction = \"ask\"\nmax_exp = \"1h\"\n[[rule]]\nname = \"long\"\nagents = [\"*\"]\naction = \"ask\"\nmax_exp = \"8h\"\n[[consent]]\nagents = [\"*\"]", nil},
		{"ok/rule-not-shadowed-when-later-allows-more-money", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nsvc = \"s\"\nper = \"1USD\"\n[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nsvc = \"s\"\nper = \"5USD\"\n[[consent]]\nagents = [\"*\"]", nil},
		{"warn/rule-shadowed-by-clamp", base + "[[rule]]\nname = \"c\"\nagents = [\"*\"]\naction = \"ask\"\ncan = \"x.*\"\nmax_exp = \"1h\"\non_exceed = \"clamp\"\n[[rule]]\nname = \"l\"\nagents = [\"*\"]\naction = \"ask\"\ncan = \"x.y\"\nmax_exp = \"1h\"\n[[consent]]\nagents = [\"*\"]",
			[]string{`rule "l" (line 11) can never decide`}},
		{"ok/clamp-later-not-shadowed-by-next", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\ncan = \"x.*\"\nmax_exp = \"1h\"\n[[rule]]\nagents = [\"*\"]\naction = \"ask\"\ncan = \"x.y\"\nmax_exp = \"1h\"\non_exceed = \"clamp\"\n[[consent]]\nagents = [\"*\"]", nil},
		{"ok/rule-for-other-agent-not-shadowed", two + "[[rule]]\nagents = [\"a\"]\naction = \"ask\"\n[[rule]]\nagents = [\"b\"]\naction = \"ask\"\n[[consent]]\nagents = [\"*\"]", nil},
		{"warn/auto-risky-shapes", base + "[[rule]]\nname = \"open\"\nagents = [\"*\"]\naction = \"auto\"\n[[consent]]\nagents = [\"*\"]",
			[]string{"has no max_exp", "every capability (*) without asking", "no per limit"}},
		{"ok/auto-without-commit-needs-no-per", base + "[[rule]]\nagents = [\"*\"]\naction = \"auto\"\ncan = \"x\"\nverbs = [\"ASK\"]\nmax_exp = \"1h\"\n[[consent]]\nagents = [\"*\"]", nil},
		{"warn/money-without-svc", base + "[[rule]]\nname = \"m\"\nagents = [\"*\"]\naction = \"ask\"\nspend = \"10USD\"\n[[consent]]\nagents = [\"*\"]", []string{`rule "m" (line 4) allows money but names no svc`}},
		{"ok/zero-money-without-svc", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nper = \"0USD\"\n[[consent]]\nagents = [\"*\"]", nil},
		{"warn/no-common-channel", base + "[[rule]]\nname = \"p\"\nagents = [\"*\"]\naction = \"ask\"\ncan = \"shop.*\"\nchannels = \"phone\"\n[[rule]]\nname = \"t\"\nagents = [\"*\"]\naction = \"ask\"\nchannels = \"terminal\"\n[[consent]]\nagents = [\"*\"]",
			[]string{`rules "p" (line 4) and "t" (line 10) share no approval channel`}},
		{"warn/told-apart-only-by-exe", "[[agent]]\nname = \"cal\"\nuser = \"bot\"\nexe = \"/usr/bin/cal\"\n[[agent]]\nname = \"rest\"\nuser = \"bot\"\n[[rule]]\nagents = [\"cal\"]\naction = \"ask\"\n[[rule]]\nagents = [\"rest\"]\naction = \"deny\"\n[[consent]]\nagents = [\"*\"]",
			[]string{`agents "cal" (line 1) and "rest" (line 5) may match the same OS user and are told apart only by exe or unit`}},
		{"warn/told-apart-only-by-unit-in-a-group", "[[agent]]\nname = \"a\"\ngroup = \"agents\"\nunit = \"a.service\"\n[[agent]]\nname = \"b\"\ngroup = \"agents\"\nunit = \"b.service\"\n[[rule]]\nagents = [\"a\"]\naction = \"ask\"\n[[rule]]\nagents = [\"b\"]\naction = \"ask\"\n[[consent]]\nagents = [\"*\"]",
			[]string{`agents "a" (line 1) and "b" (line 5) may match the same OS user`}},
		{"ok/told-apart-by-exe-same-rules", "[[agent]]\nname = \"a\"\nuid = 3\nexe = \"/usr/bin/a\"\n[[agent]]\nname = \"b\"\nuid = 3\nexe = \"/usr/bin/b\"\n[[rule]]\nagents = [\"*\"]\naction = \"ask\"\n[[consent]]\nagents = [\"*\"]", nil},
		{"ok/told-apart-by-user", "[[agent]]\nname = \"a\"\nuser = \"alice\"\nexe = \"/usr/bin/a\"\n[[agent]]\nname = \"b\"\nuser = \"bob\"\nexe = \"/usr/bin/b\"\n[[rule]]\nagents = [\"a\"]\naction = \"ask\"\n[[rule]]\nagents = [\"b\"]\naction = \"ask\"\n[[consent]]\nagents = [\"*\"]", nil},
		{"ok/told-apart-by-key", "[[agent]]\nname = \"a\"\nuid = 3\nexe = \"/usr/bin/a\"\nkey = \"" + testKeyA + "\"\n[[agent]]\nname = \"b\"\nuid = 3\nkey = \"" + testKeyB + "\"\n[[rule]]\nagents = [\"a\"]\naction = \"ask\"\n[[rule]]\nagents = [\"b\"]\naction = \"ask\"\n[[consent]]\nagents = [\"*\"]", nil},
		{"warn/consent-shadowed", base + "[[consent]]\nname = \"all\"\nagents = [\"*\"]\n[[consent]]\nname = \"shop\"\nagents = [\"a\"]\ncan = \"shop.*\"\n[[rule]]\nagents = [\"*\"]\naction = \"ask\"",
			[]string{`consent rule "shop" (line 7) can never decide`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := mustParse(t, tt.src).Warnings()
			if len(w) != len(tt.want) {
				t.Fatalf("warnings = %q, want %d like %q", w, len(tt.want), tt.want)
			}
			for i := range w {
				if !strings.Contains(w[i], tt.want[i]) {
					t.Errorf("warning %d = %q, want it to contain %q", i, w[i], tt.want[i])
				}
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	got := testPolicy(t).Describe()
	for _, want := range []string{
		"Policy test.toml: 6 agents, 7 rules, 3 consent rules.",
		`1. "calendar" (line 4): callers with user "calbot"; at most 30 requests a minute and 3 approvals waiting.`,
		`5. "boxed" (line 20): callers with uid 5 and executable "/opt/agents/*" and systemd unit "agent-*"; at most 2 requests a minute and 0 approvals waiting.`,
		`6. "local" (line 28): every caller the daemon accepts`,
		`1. "no-guest" (line 32), for agent "guest": Refuses every request.`,
		`2. "no-bank" (line 37), for every agent: Refuses every request that reaches into capabilities "bank.*" at every service with every verb.`,
		`Issues without asking grants for capabilities "calendar.*" at services "cal.example" with verbs "ASK", "INTENT" and "COMMIT", lasting at most 1h (10m when the request names no expiry), for commits that cost nothing, risk at most low; larger requests are cut down to these limits.`,
		`Asks a human on phone (a strong channel is required) before issuing grants`,
		`at most 20.00 USD per commit, at most 100.00 USD spent in all; larger requests go on to the next rule.`,
		`1. "guest-never" (line 92), for agent "guest": Refuses every consent.`,
		`refuses costs above 500.00 USD or in another currency; refuses risk above medium; requires a strong channel for costs above 20.00 USD (or in another currency); a consent lives at most 10m.`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Describe lacks %q; it says:\n%s", want, got)
		}
	}
	if d := mustParse(t, "").Describe(); !strings.Contains(d, "none: every caller is refused") || !strings.Contains(d, "none: every consent is refused") {
		t.Errorf("Describe(empty) = %s", d)
	}
}

func TestSummaryJSON(t *testing.T) {
	s := testPolicy(t).Allowed(shopCaller)
	b, err := json.Marshal(s[1])
	if err != nil {
		t.Fatal(err)
	}
	want := `{"rule":"shop-phone","action":"ask","svc":["shop.example"],"can":["shop.*"],"max_exp":3600,"default_exp":900,"per":{"max":2000,"currency":"USD"},"spend":{"max":10000,"currency":"USD"},"channels":["phone"],"strong":true,"text":`
	if !strings.HasPrefix(string(b), want) {
		t.Errorf("summary JSON = %s\nwant prefix %s", b, want)
	}
}

func TestFmtDur(t *testing.T) {
	for secs, want := range map[int64]string{0: "0s", 59: "59s", 60: "1m", 3600: "1h", 5400: "1h30m", 86400: "1d", 90061: "1d1h1m1s"} {
		if got := fmtDur(secs); got != want {
			t.Errorf("fmtDur(%d) = %q, want %q", secs, got, want)
		}
		if secs > 0 {
			if back, err := parseLifetime(want); err != nil || back != secs {
				t.Errorf("parseLifetime(%q) = %d, %v; want %d", want, back, err, secs)
			}
		}
	}
}

// Two valid holder keys for policies that name keys.
var testKeyA, testKeyB = seededKey(1), seededKey(2)

func seededKey(b byte) string {
	seed := make([]byte, ed25519.SeedSize)
	seed[0] = b
	return grant.FormatPublicKey(ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey))
}

func TestLongestGrant(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      int64
	}{
		{"ok/nothing", "version = 1\n", 0},
		{"ok/rule-cap", "version = 1\n[[agent]]\nname = \"a\"\nany = true\n[[rule]]\nname = \"r\"\nagents = [\"a\"]\naction = \"auto\"\nmax_exp = \"2h\"\n[[rule]]\nname = \"d\"\nagents = [\"a\"]\naction = \"deny\"\n", 7200},
		{"ok/no-cap-is-ceiling", "version = 1\n[[agent]]\nname = \"a\"\nany = true\n[[rule]]\nname = \"r\"\nagents = [\"a\"]\naction = \"ask\"\n", Ceiling},
		{"ok/consent-longer", "version = 1\n[[agent]]\nname = \"a\"\nany = true\n[[rule]]\nname = \"r\"\nagents = [\"a\"]\naction = \"auto\"\nmax_exp = \"1h\"\n[[consent]]\nname = \"c\"\nagents = [\"*\"]\nmax_exp = \"3h\"\n", 10800},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.src), "p.toml")
			if err != nil {
				t.Fatal(err)
			}
			if got := p.LongestGrant(); got != tc.want {
				t.Errorf("LongestGrant = %d, want %d", got, tc.want)
			}
		})
	}
}
