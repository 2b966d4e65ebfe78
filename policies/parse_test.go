package policies

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testkeys"
)

// base is a valid prefix for parse error cases: lines 1-3.
const base = "[[agent]]\nname = \"a\"\nuid = [1]\n"

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		line int
		msg  string
	}{
		{"fail/toml-syntax", "x = [1,", 1, "array"},
		{"fail/duplicate-key", "version = 1\nversion = 1", 2, "already defined"},
		{"fail/unknown-top-level-key", "\n\nverison = 1", 3, `unknown key "verison" in the top level`},
		{"fail/version-2", "version = 2", 1, "version must be 1"},
		{"fail/version-string", "version = \"1\"", 1, "version must be 1"},
		{"fail/agent-as-table", "[agent]\nname = \"a\"", 1, "[[agent]] tables"},
		{"fail/agent-unknown-key", base + "usr = [\"x\"]", 4, `unknown key "usr" in [[agent]]`},
		{"fail/agent-no-name", "[[agent]]\nuid = [1]", 1, "has no name"},
		{"fail/agent-bad-name", "[[agent]]\nname = \"a b\"\nuid = [1]", 2, "may hold only"},
		{"fail/agent-star-name", "[[agent]]\nname = \"*\"\nuid = [1]", 2, "may hold only"},
		{"fail/agent-duplicate", base + "[[agent]]\nname = \"a\"\nuid = [2]", 5, "already defined at line 1"},
		{"fail/agent-no-matcher", "[[agent]]\nname = \"a\"", 1, "write any = true"},
		{"fail/agent-any-and-matcher", "[[agent]]\nname = \"a\"\nuid = [1]\nany = true", 4, "any = true matches every caller"},
		{"fail/agent-any-not-bool", "[[agent]]\nname = \"a\"\nany = \"yes\"", 3, "must be true or false"},
		{"fail/agent-uid-string", "[[agent]]\nname = \"a\"\nuid = [\"1000\"]", 3, "list of integers"},
		{"fail/agent-uid-negative", "[[agent]]\nname = \"a\"\nuid = [-1]", 3, "not a valid id"},
		{"fail/agent-uid-too-big", "[[agent]]\nname = \"a\"\nuid = [4294967296]", 3, "not a valid id"},
		{"fail/agent-user-empty-list", "[[agent]]\nname = \"a\"\nuser = []", 3, "empty list"},
		{"fail/agent-user-number", "[[agent]]\nname = \"a\"\nuser = [1]", 3, "list of strings"},
		{"fail/agent-user-twice", "[[agent]]\nname = \"a\"\nuser = [\"x\",\n\"x\"]", 4, "twice"},
		{"fail/agent-exe-relative", "[[agent]]\nname = \"a\"\nexe = [\"bin/x\"]", 3, "absolute path"},
		{"fail/agent-exe-star-inside", "[[agent]]\nname = \"a\"\nexe = [\"/bin/*/x\"]", 3, "not a pattern"},
		{"fail/agent-key-bad", "[[agent]]\nname = \"a\"\nkey = [\"ssh-ed25519 AAAA\"]", 3, `must start with "ed25519:"`},
		{"fail/agent-key-short", "[[agent]]\nname = \"a\"\nkey = [\"ed25519:AAAA\"]", 3, "43 base64url"},
		{"fail/agent-key-small-order", "[[agent]]\nname = \"a\"\nkey = [\"ed25519:AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"]", 3, "small-order"},
		{"fail/agent-key-non-canonical", "[[agent]]\nname = \"a\"\nkey = [\"ed25519:7v________________________________________8\"]", 3, "canonical"},
		{"fail/agent-rate-zero", base + "rate = 0", 4, "rate must be between 1"},
		{"fail/agent-pending-negative", base + "pending = -1", 4, "pending must be between 0"},
		{"fail/agent-rate-float", base + "rate = 1.5", 4, "must be an integer"},
		{"fail/rule-unknown-key", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nmax_expiry = \"1h\"", 7, `unknown key "max_expiry" in [[rule]]`},
		{"fail/rule-no-action", base + "[[rule]]\nagents = [\"*\"]", 4, "has no action"},
		{"fail/rule-bad-action", base + "[[rule]]\nagents = [\"*\"]\naction = \"allow\"", 6, `not "allow"`},
		{"fail/rule-no-agents", base + "[[rule]]\naction = \"ask\"", 4, "names no agents"},
		{"fail/rule-unknown-agent", base + "[[rule]]\nagents = [\"b\"]\naction = \"ask\"", 5, `no [[agent]] is named "b"`},
		{"fail/rule-star-and-agent", base + "[[rule]]\nagents = [\"*\", \"a\"]\naction = \"ask\"", 5, "list it alone"},
		{"fail/rule-duplicate-name", base + "[[rule]]\nname = \"r\"\nagents = [\"*\"]\naction = \"ask\"\n[[rule]]\nname = \"r\"\nagents = [\"*\"]\naction = \"ask\"", 9, "already defined at line 4"},
		{"fail/rule-name-clashes-default", base + "[[rule]]\nname = \"rule-2\"\nagents = [\"*\"]\naction = \"ask\"\n[[rule]]\nagents = [\"*\"]\naction = \"ask\"", 8, `rule "rule-2" is already defined`},
		{"fail/rule-verb-lower", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nverbs = [\"commit\"]", 7, `write "COMMIT"`},
		{"fail/rule-verb-unknown", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nverbs = [\"PAY\"]", 7, "unknown verb"},
		{"fail/rule-can-star-inside", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\ncan = [\"a*.b\"]", 7, "not a pattern"},
		{"fail/rule-can-empty", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\ncan = []", 7, "empty list"},
		{"fail/rule-svc-space", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nsvc = [\"a b\"]", 7, "space or control"},
		{"fail/rule-svc-zero-width", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nsvc = [\"a\u200bb\"]", 7, "space or control"},
		{"fail/rule-max-exp-bad", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nmax_exp = \"an hour\"", 7, "want a number then a unit"},
		{"fail/rule-max-exp-number", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nmax_exp = 3600", 7, "must be a string"},
		{"fail/rule-max-exp-negative", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nmax_exp = \"-1h\"", 7, "must be positive"},
		{"fail/rule-max-exp-fraction", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nmax_exp = \"1.5s\"", 7, "whole numbers only"},
		{"fail/rule-max-exp-above-ceiling", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nmax_exp = \"31d\"", 7, "ceiling"},
		{"fail/rule-max-exp-huge-days", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nmax_exp = \"99999999999999999999d\"", 7, "too long"},
		{"fail/rule-default-above-max", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nmax_exp = \"1h\"\ndefault_exp = \"2h\"", 8, "longer than max_exp"},
		{"fail/rule-per-bad", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nper = \"20 dollars\"", 7, "per: money"},
		{"fail/rule-spend-three-decimals", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nspend = \"1.005USD\"", 7, "at most two decimals"},
		{"fail/rule-risk-bad", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nrisk = \"extreme\"", 7, "low, medium or high"},
		{"fail/rule-channel-bad", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nchannels = [\"email\"]", 7, "unknown channel"},
		{"fail/rule-on-exceed-bad", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\non_exceed = \"cut\"", 7, `"next" or "clamp"`},
		{"fail/auto-with-channels", base + "[[rule]]\nagents = [\"*\"]\naction = \"auto\"\nchannels = [\"phone\"]", 7, "only for action"},
		{"fail/auto-with-strong", base + "[[rule]]\nagents = [\"*\"]\naction = \"auto\"\nstrong = true", 7, "only for action"},
		{"fail/deny-with-limit", base + "[[rule]]\nagents = [\"*\"]\naction = \"deny\"\nper = \"1.00USD\"", 7, "a deny rule takes no per"},
		{"fail/deny-with-clamp", base + "[[rule]]\nagents = [\"*\"]\naction = \"deny\"\non_exceed = \"clamp\"", 7, "a deny rule takes no on_exceed"},
		{"fail/consent-auto", base + "[[consent]]\nagents = [\"*\"]\naction = \"auto\"", 6, "never issued without a human"},
		{"fail/consent-unknown-key", base + "[[consent]]\nagents = [\"*\"]\nmax_cost = \"1USD\"", 6, `unknown key "max_cost" in [[consent]]`},
		{"fail/consent-no-agents", base + "[[consent]]\nname = \"c\"", 4, "names no agents"},
		{"fail/consent-deny-with-limit", base + "[[consent]]\nagents = [\"*\"]\naction = \"deny\"\nmax_exp = \"1h\"", 7, "a deny rule takes no max_exp"},
		{"fail/consent-bad-cost", base + "[[consent]]\nagents = [\"*\"]\ndeny_above_cost = \"USD\"", 6, "deny_above_cost"},
		{"fail/consent-bad-risk", base + "[[consent]]\nagents = [\"*\"]\nstrong_above_risk = \"none\"", 6, "low, medium or high"},
		{"fail/consent-duplicate", base + "[[consent]]\nname = \"c\"\nagents = [\"*\"]\n[[consent]]\nname = \"c\"\nagents = [\"*\"]", 8, "already defined"},
		{"fail/dotted-key-inside-rule", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nlimits.per = \"1USD\"", 7, `unknown key "limits"`},
		{"fail/inline-table-value", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nper = {max = 1}", 7, "must be a string"},
		{"fail/rule-name-too-long", base + "[[rule]]\nname = \"" + strings.Repeat("r", 65) + "\"\nagents = [\"*\"]\naction = \"ask\"", 5, "1 to 64"},
		{"fail/long-string", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nsvc = [\"" + strings.Repeat("s", 1025) + "\"]", 7, "longer than 1024"},
		{"fail/rules-as-inline-array-of-strings", "rule = [\"x\"]", 1, "must be a table"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.src), "p.toml")
			if err == nil {
				t.Fatal("Parse succeeded, want an error")
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is a %T, want *ParseError", err, err)
			}
			if pe.Line != tt.line || pe.File != "p.toml" {
				t.Errorf("error %q at %s line %d, want line %d", err, pe.File, pe.Line, tt.line)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not contain %q", err, tt.msg)
			}
			if !strings.HasPrefix(err.Error(), "p.toml: line ") {
				t.Errorf("error %q does not start with the file and line", err)
			}
		})
	}
}

func TestParseOK(t *testing.T) {
	tests := []struct {
		name  string
		src   string
		check func(*testing.T, *Policy)
	}{
		{"ok/empty-file-refuses-everything", "", func(t *testing.T, p *Policy) {
			if d := p.Decide(Caller{}, grant.Request{}, now); d.Action != Deny {
				t.Errorf("empty policy decided %q", d.Action)
			}
		}},
		{"ok/single-strings-are-lists", base + "[[rule]]\nagents = \"*\"\naction = \"auto\"\nsvc = \"s\"\ncan = \"c.*\"\nverbs = \"ASK\"", func(t *testing.T, p *Policy) {
			r := p.rules[0]
			if len(r.agents) != 1 || r.scope.svc[0] != "s" || r.scope.can[0] != "c.*" || r.scope.verbs[0] != "ASK" {
				t.Errorf("rule = %+v", r)
			}
		}},
		{"ok/channels-fixed-order", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nchannels = [\"phone\", \"terminal\"]", func(t *testing.T, p *Policy) {
			if c := p.rules[0].channels; len(c) != 2 || c[0] != Terminal || c[1] != Phone {
				t.Errorf("channels = %v", c)
			}
		}},
		{"ok/durations", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nmax_exp = \"7d\"\ndefault_exp = \"2h30m\"", func(t *testing.T, p *Policy) {
			if r := p.rules[0]; r.maxExp != 7*86400 || r.defaultExp != 9000 {
				t.Errorf("maxExp, defaultExp = %d, %d", r.maxExp, r.defaultExp)
			}
		}},
		{"ok/money", base + "[[rule]]\nagents = [\"*\"]\naction = \"ask\"\nper = \"20.00USD\"\nspend = \"500JPY\"", func(t *testing.T, p *Policy) {
			if r := p.rules[0]; *r.per != *usd(2000) || r.spend.Amount != 500 || r.spend.Currency != "JPY" {
				t.Errorf("per, spend = %v, %v", r.per, r.spend)
			}
		}},
		{"ok/default-rule-names", base + "[[rule]]\nagents = [\"*\"]\naction = \"deny\"\ncan = \"x\"\n[[rule]]\nagents = [\"*\"]\naction = \"ask\"\n[[consent]]\nagents = [\"*\"]", func(t *testing.T, p *Policy) {
			if p.rules[0].name != "rule-1" || p.rules[1].name != "rule-2" || p.consents[0].name != "consent-1" {
				t.Errorf("names = %q %q %q", p.rules[0].name, p.rules[1].name, p.consents[0].name)
			}
		}},
		{"ok/hex-and-underscore-ids", "[[agent]]\nname = \"a\"\nuid = [0x3e8, 1_001]", func(t *testing.T, p *Policy) {
			if u := p.agents[0].uids; len(u) != 2 || u[0] != 1000 || u[1] != 1001 {
				t.Errorf("uids = %v", u)
			}
		}},
		{"ok/agents-as-inline-tables", "agent = [{name = \"a\", uid = [1]}]", func(t *testing.T, p *Policy) {
			if len(p.agents) != 1 || p.agents[0].uids[0] != 1 {
				t.Errorf("agents = %+v", p.agents)
			}
		}},
		{"ok/quoted-keys", "[[agent]]\n\"name\" = \"a\"\n'uid' = [1]", func(t *testing.T, p *Policy) {
			if p.agents[0].name != "a" {
				t.Errorf("agents = %+v", p.agents)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse([]byte(tt.src), "p.toml")
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, p)
		})
	}
}

func TestParseTooLarge(t *testing.T) {
	data := []byte(strings.Repeat("# comment line\n", maxFileSize/15+2))
	_, err := Parse(data, "big.toml")
	var pe *ParseError
	if !errors.As(err, &pe) || pe.Line < 1 || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Parse(too large) = %v, want a ParseError about size", err)
	}
}

// exampleLine matches a commented-out line of TOML in the default policy.
var exampleLine = regexp.MustCompile(`^# (\[\[[a-z]+\]\]|[a-z_]+ = .*)$`)

func TestDefault(t *testing.T) {
	p := Default()
	if DefaultText() != string(DefaultFile) {
		t.Fatal("DefaultText differs from DefaultFile")
	}
	if w := p.Warnings(); len(w) != 0 {
		t.Errorf("the default policy has warnings: %q", w)
	}
	// Every request asks in the terminal.
	for _, r := range []grant.Request{
		{},
		{Can: []string{"calendar.*"}, Svc: []string{"cal.example"}, Exp: now + 3600},
		{Verbs: []string{"COMMIT"}, Risk: "high"},
	} {
		d := p.Decide(Caller{UID: 1234}, r, now)
		if d.Action != Ask || len(d.Channels) != 1 || d.Channels[0] != Terminal {
			t.Errorf("default decides %+v for %+v, want ask in the terminal", d, r)
		}
		if d.Grant.Exp <= now || d.Grant.Exp > now+3600 {
			t.Errorf("default grant expiry %d is not within an hour", d.Grant.Exp-now)
		}
		if d.Grant.Per == nil || d.Grant.Per.Amount != 0 {
			t.Errorf("default grant per = %v, want a zero limit", d.Grant.Per)
		}
	}
	if d := p.Decide(Caller{}, grant.Request{}, now); d.Grant.Exp != now+15*60 {
		t.Errorf("default lifetime = %d, want 15m", d.Grant.Exp-now)
	}
	// More than an hour, or any money, is refused.
	for _, r := range []grant.Request{
		{Exp: now + 3601},
		{Per: usd(1)},
		{Spend: usd(1)},
		{Spend: eur(0)},
	} {
		if d := p.Decide(Caller{}, r, now); d.Action != Deny {
			t.Errorf("default decides %q for %+v, want deny", d.Action, r)
		}
	}
	// Consent asks, strong above 20.00 USD or for high risk, lives 15 minutes at most.
	c := p.DecideConsent(Caller{}, ConsentFacts{Service: "s", Capability: "c", Cost: usd(2000), Risk: "medium", Expires: now + 3600, Now: now})
	if c.Action != Ask || c.Strong || c.Expires != now+900 || len(c.Channels) != 3 {
		t.Errorf("default consent = %+v", c)
	}
	c = p.DecideConsent(Caller{}, ConsentFacts{Service: "s", Capability: "c", Cost: usd(2001), Risk: "low", Expires: now + 60, Now: now})
	if c.Action != Ask || !c.Strong || c.Expires != now+60 {
		t.Errorf("default consent above 20.00 USD = %+v", c)
	}
	// The commented examples parse when uncommented.
	var b strings.Builder
	for _, line := range strings.Split(DefaultText(), "\n") {
		if exampleLine.MatchString(line) {
			line = line[2:]
		}
		b.WriteString(line + "\n")
	}
	q, err := Parse([]byte(b.String()), "uncommented")
	if err != nil {
		t.Fatalf("the default policy's examples do not parse: %v", err)
	}
	if len(q.agents) != 3 || len(q.rules) != 4 || len(q.consents) != 2 {
		t.Errorf("uncommented default has %d agents, %d rules, %d consents", len(q.agents), len(q.rules), len(q.consents))
	}
	cal := Caller{UID: 77, User: "calbot", Exe: "/usr/local/bin/calendar-agent"}
	if d := q.Decide(cal, grant.Request{Svc: []string{"calendar.example"}, Can: []string{"calendar.reschedule"}, Exp: now + 7200}, now); d.Action != Auto || d.Grant.Exp != now+3600 {
		t.Errorf("calendar example decides %+v", d)
	}
	if d := q.Decide(Caller{User: "guest"}, grant.Request{}, now); d.Action != Deny || d.Rule != "no-guest" {
		t.Errorf("guest example decides %+v", d)
	}
	if d := q.Decide(Caller{UID: 5}, grant.Request{Svc: []string{"shop.example"}, Can: []string{"shop.buy"}, Per: usd(2000)}, now); d.Action != Ask || !d.Strong || len(d.Channels) != 1 || d.Channels[0] != Phone {
		t.Errorf("shop example decides %+v", d)
	}
}

// TestAgentKeyRefusesKeylessKeys: a policy's key = matcher accepts no key
// for which anyone can forge a signature (issue 10 item 1), in any
// encoding, nor any non-canonical spelling of a key.
func TestAgentKeyRefusesKeylessKeys(t *testing.T) {
	for _, k := range append(testkeys.SmallOrder(), testkeys.NonCanonical()...) {
		t.Run("fail/"+k.Name, func(t *testing.T) {
			src := "[[agent]]\nname = \"a\"\nkey = [\"" + grant.FormatPublicKey(k.Key) + "\"]"
			_, err := Parse([]byte(src), "p.toml")
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Line != 3 {
				t.Errorf("Parse = %v, want a refusal at line 3", err)
			}
		})
	}
}

// Default returns the parsed DefaultFile.
func Default() *Policy {
	p, err := Parse(DefaultFile, "default policy")
	if err != nil {
		panic("policies: the built-in default policy does not parse: " + err.Error())
	}
	return p
}
