package main

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/spf13/cobra"
)

func newAttenuateCmd() *cobra.Command {
	var cf caveatFlags
	var keyPath, to, nowFlag string
	cmd := &cobra.Command{
		Use:   "attenuate TOKEN|- --to KEY [caveat flags]",
		Short: "Narrow a grant you hold and hand it to another key",
		Long: `attenuate appends a block to a grant you hold (§6.2): signed with your agent
key, held by --to, restricted by the caveat flags. Caveats accumulate, so the
new grant can do at most what the old one could. The longer token goes to
stdout. A token of - is read from stdin.

It refuses when your key does not hold the grant, and when the grant's
signature chain does not hold. It warns when a caveat narrows nothing, such
as an --exp later than the grant's own expiry.

Example: give a sub-agent read-only use of the calendar for ten minutes:
  parley-grant attenuate "$GRANT" --to ed25519:… --verbs ASK --can 'calendar.*' --exp 10m`,
		Args: exactArgs(1, "one token (or - for stdin)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == "" {
				return usagef("give the sub-agent's public key (it prints it with: parley-grant pubkey)", "--to is required")
			}
			toKey, err := grant.ParsePublicKey(to)
			if err != nil {
				return usage(fmt.Errorf("--to %q: %w", to, err), "")
			}
			now, err := resolveNow(nowFlag)
			if err != nil {
				return err
			}
			cavs, err := cf.caveats(now)
			if err != nil {
				return err
			}
			tok, err := readToken(args[0])
			if err != nil {
				return err
			}
			t, err := decodeToken(tok)
			if err != nil {
				return err
			}
			if err := t.CheckChain(); err != nil {
				return failCode(exitUnauthorized, fmt.Errorf("the grant's signature chain does not hold: %s", chainMessage(err)),
					"a broken grant authorizes nothing; get a new one")
			}
			for i, b := range t.Blocks {
				for _, c := range b.Payload.Caveats {
					if err := c.Check(); err != nil {
						return failCode(exitForbidden, fmt.Errorf("the grant authorizes nothing: block %d: %v", i, err),
							"a verifier refuses a caveat it does not know or cannot read (§6.3)")
					}
				}
			}
			key, err := loadAgentKey(keyPath)
			if err != nil {
				return err
			}
			mine := grant.FormatPublicKey(key.Public().(ed25519.PublicKey))
			if mine != t.Holder() {
				return fail(fmt.Errorf("your key %s does not hold this grant; its holder is %s", mine, t.Holder()),
					"only the holder can attenuate a grant: use --key with the holder's key file")
			}
			if exp, ok := t.Expiry(); ok && now.Unix() >= exp {
				warnf("the grant expired at %s; the new one is expired too", timeWords(exp))
			}
			if len(cavs) == 0 {
				warnf("no caveat flags: the new grant can do all the old one can, only the holder changes")
			}
			for _, w := range narrowWarnings(t, cavs, now.Unix(), flagStyle) {
				warnf("%s", w)
			}
			out, err := t.Delegate(key, toKey, cavs, now.Unix())
			if err != nil {
				return fail(err, "")
			}
			fmt.Println(out.Encode())
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&to, "to", "", "the public key of the new holder, ed25519:… (required)")
	fs.StringVar(&keyPath, "key", "", "your agent key file, the grant's holder (default $PARLEY_AGENT_KEY, else ~/.config/parley/agent.key)")
	fs.StringVar(&nowFlag, "now", "", nowUsage)
	cf.register(cmd, true)
	return cmd
}

// chainMessage returns the message of a CheckChain error without its code.
func chainMessage(err error) string {
	var ge *grant.Error
	if errors.As(err, &ge) {
		return ge.Message
	}
	return err.Error()
}

// parentLimits gathers what the caveats of a grant already allow.
type parentLimits struct {
	svc, verbs [][]string // each svc (verbs) caveat's list
	can        [][]string
	exp        *int64 // earliest exp
	nbf        *int64 // latest nbf
	per, spend []grant.Money
	risk       *int // lowest risk rank
	only       []string
}

func limitsOf(t *grant.Token) parentLimits {
	var l parentLimits
	for _, b := range t.Blocks {
		for _, c := range b.Payload.Caveats {
			switch c.Name {
			case grant.CaveatSvc, grant.CaveatVerbs, grant.CaveatCan:
				ss, err := c.Strings()
				if err != nil {
					continue
				}
				switch c.Name {
				case grant.CaveatSvc:
					l.svc = append(l.svc, ss)
				case grant.CaveatVerbs:
					l.verbs = append(l.verbs, ss)
				default:
					l.can = append(l.can, ss)
				}
			case grant.CaveatExp:
				if n, err := c.Int(); err == nil && (l.exp == nil || n < *l.exp) {
					l.exp = &n
				}
			case grant.CaveatNbf:
				if n, err := c.Int(); err == nil && (l.nbf == nil || n > *l.nbf) {
					l.nbf = &n
				}
			case grant.CaveatPer, grant.CaveatSpend:
				if m, err := c.Money(); err == nil {
					if c.Name == grant.CaveatPer {
						l.per = append(l.per, m)
					} else {
						l.spend = append(l.spend, m)
					}
				}
			case grant.CaveatRisk:
				if s, err := c.Text(); err == nil {
					if r, ok := grant.RiskRank(s); ok && (l.risk == nil || r < *l.risk) {
						l.risk = &r
					}
				}
			case grant.CaveatOnly:
				if s, err := c.Text(); err == nil {
					l.only = append(l.only, s)
				}
			}
		}
	}
	return l
}

// narrowWarnings returns a sentence for each new caveat that cannot narrow
// what t already allows, and for each list entry that t does not allow
// anyway, naming arguments in style. The new caveats are still added: they
// are harmless.
func narrowWarnings(t *grant.Token, cavs []grant.Caveat, now int64, style argStyle) []string {
	var out []string
	for _, n := range narrowNotes(t, cavs, now) {
		out = append(out, n.render(style))
	}
	return out
}

func narrowNotes(t *grant.Token, cavs []grant.Caveat, now int64) []argText {
	l := limitsOf(t)
	var notes []argText
	for _, c := range cavs {
		switch c.Name {
		case grant.CaveatSvc, grant.CaveatVerbs:
			news, _ := c.Strings()
			parent := l.svc
			what := "service"
			if c.Name == grant.CaveatVerbs {
				parent, what = l.verbs, "verb"
			}
			if len(parent) == 0 {
				continue
			}
			allowed := intersect(parent)
			var extra []string
			for _, s := range news {
				if !slices.Contains(allowed, s) {
					extra = append(extra, s)
				}
			}
			if len(extra) > 0 {
				notes = append(notes, argf("%s %s: the grant does not allow %s anyway", argName(c.Name),
					strings.Join(extra, ","), plural(len(extra), "this "+what, "these "+what+"s")))
			}
			if subset(allowed, news) {
				notes = append(notes, argf("%s narrows nothing: the grant already allows only %s", argName(c.Name), wordsOrNone(allowed)))
			}
		case grant.CaveatCan:
			news, _ := c.Strings()
			for _, p := range l.can {
				if coversAll(news, p) {
					notes = append(notes, argf("%s narrows nothing: the grant already allows only %s", argName("can"), strings.Join(p, ", ")))
					break
				}
			}
		case grant.CaveatExp:
			n, _ := c.Int()
			if l.exp != nil && n >= *l.exp {
				notes = append(notes, argf("%s %s narrows nothing: the grant already expires at %s", argName("exp"), timeWords(n), timeWords(*l.exp)))
			}
		case grant.CaveatNbf:
			n, _ := c.Int()
			switch {
			case l.nbf != nil && n <= *l.nbf:
				notes = append(notes, argf("%s %s narrows nothing: the grant is already not valid before %s", argName("nbf"), timeWords(n), timeWords(*l.nbf)))
			case n <= now:
				notes = append(notes, argf("%s %s narrows nothing: that time has passed", argName("nbf"), timeWords(n)))
			}
		case grant.CaveatPer, grant.CaveatSpend:
			m, _ := c.Money()
			parent := l.per
			if c.Name == grant.CaveatSpend {
				parent = l.spend
			}
			for _, p := range parent {
				if p.Currency == m.Currency && p.Amount <= m.Amount {
					notes = append(notes, argf("%s %s narrows nothing: the grant already has %s %s", argName(c.Name),
						m.String(), c.Name, p.String()))
					break
				}
			}
		case grant.CaveatRisk:
			s, _ := c.Text()
			r, _ := grant.RiskRank(s)
			if l.risk != nil && *l.risk <= r {
				notes = append(notes, argf("%s %s narrows nothing: the grant already allows at most risk %s", argName("risk"), s, riskName(*l.risk)))
			}
		case grant.CaveatOnly:
			s, _ := c.Text()
			switch {
			case slices.Contains(l.only, s):
				notes = append(notes, argf("%s narrows nothing: the grant already commits only that proposal", argName("only")))
			case len(l.only) > 0:
				notes = append(notes, argf("%s %s: the grant commits only the proposal %s, so no COMMIT can pass both", argName("only"), s, l.only[0]))
			}
		}
	}
	return notes
}

// intersect returns the entries common to all lists, in the order of the
// first.
func intersect(lists [][]string) []string {
	var out []string
	for _, s := range lists[0] {
		in := true
		for _, l := range lists[1:] {
			if !slices.Contains(l, s) {
				in = false
				break
			}
		}
		if in && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// subset reports whether every entry of a is in b.
func subset(a, b []string) bool {
	for _, s := range a {
		if !slices.Contains(b, s) {
			return false
		}
	}
	return true
}

// coversAll reports whether every capability that some pattern of old
// matches is matched by a pattern of news (§6.3, errata 1).
func coversAll(news, old []string) bool {
	for _, q := range old {
		covered := false
		for _, p := range news {
			if prefix, ok := strings.CutSuffix(p, "*"); ok {
				covered = strings.HasPrefix(q, prefix)
			} else {
				covered = p == q
			}
			if covered {
				break
			}
		}
		if !covered {
			return false
		}
	}
	return true
}

func wordsOrNone(ss []string) string {
	if len(ss) == 0 {
		return "none"
	}
	return strings.Join(ss, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func riskName(r int) string {
	return [...]string{grant.RiskLow, grant.RiskMedium, grant.RiskHigh}[r]
}
