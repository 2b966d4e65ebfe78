package main

import (
	"crypto/ed25519"
	"errors"
	"fmt"
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
				for _, c := range b.Caveats {
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

// narrowNotes words, for the command line and the MCP binding, what grant
// says about each new caveat (Token.Narrowing): what a caveat means is
// grant's to say.
func narrowNotes(t *grant.Token, cavs []grant.Caveat, now int64) []argText {
	var notes []argText
	for _, c := range cavs {
		n := t.Narrowing(c, now)
		switch c.Name {
		case "svc", "verbs":
			what := "service"
			if c.Name == "verbs" {
				what = "verb"
			}
			if len(n.Outside) > 0 {
				notes = append(notes, argf("%s %s: the grant does not allow %s anyway", argName(c.Name),
					strings.Join(n.Outside, ","), plural(len(n.Outside), "this "+what, "these "+what+"s")))
			}
			if !n.Narrows {
				allowed, _ := grant.CaveatValue[[]string](n.By)
				notes = append(notes, argf("%s narrows nothing: the grant already allows only %s", argName(c.Name), wordsOrNone(allowed)))
			}
		case "can":
			if !n.Narrows {
				p, _ := grant.CaveatValue[[]string](n.By)
				notes = append(notes, argf("%s narrows nothing: the grant already allows only %s", argName("can"), strings.Join(p, ", ")))
			}
		case "exp":
			if !n.Narrows {
				v, _ := grant.CaveatValue[int64](c)
				exp, _ := grant.CaveatValue[int64](n.By)
				notes = append(notes, argf("%s %s narrows nothing: the grant already expires at %s", argName("exp"), timeWords(v), timeWords(exp)))
			}
		case "nbf":
			v, _ := grant.CaveatValue[int64](c)
			switch {
			case n.Narrows:
			case n.By.Name == "nbf":
				nbf, _ := grant.CaveatValue[int64](n.By)
				notes = append(notes, argf("%s %s narrows nothing: the grant is already not valid before %s", argName("nbf"), timeWords(v), timeWords(nbf)))
			default:
				notes = append(notes, argf("%s %s narrows nothing: that time has passed", argName("nbf"), timeWords(v)))
			}
		case "per", "spend":
			if !n.Narrows {
				m, _ := grant.CaveatValue[grant.Money](c)
				p, _ := grant.CaveatValue[grant.Money](n.By)
				notes = append(notes, argf("%s %s narrows nothing: the grant already has %s %s", argName(c.Name),
					m.String(), c.Name, p.String()))
			}
		case "risk":
			if !n.Narrows {
				s, _ := grant.CaveatValue[string](c)
				ceiling, _ := grant.CaveatValue[string](n.By)
				notes = append(notes, argf("%s %s narrows nothing: the grant already allows at most risk %s", argName("risk"), s, ceiling))
			}
		case "only":
			s, _ := grant.CaveatValue[string](c)
			switch {
			case !n.Narrows:
				notes = append(notes, argf("%s narrows nothing: the grant already commits only that proposal", argName("only")))
			case n.Excludes:
				other, _ := grant.CaveatValue[string](n.By)
				notes = append(notes, argf("%s %s: the grant commits only the proposal %s, so no COMMIT can pass both", argName("only"), s, other))
			}
		}
	}
	return notes
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
