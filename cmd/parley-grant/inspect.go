package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/grant/lens"
	"github.com/spf13/cobra"
)

// inspectBlock is one block of a grant in inspect --json.
type inspectBlock struct {
	Index   int            `json:"index"`
	ID      string         `json:"id"`
	Signer  string         `json:"signer"`
	Holder  string         `json:"holder"`
	Iat     int64          `json:"iat"`
	Caveats []grant.Caveat `json:"caveats"`
	Words   []string       `json:"words"`
	Expires *int64         `json:"expires"`
	Expired bool           `json:"expired"`
}

// inspectReport is the output of inspect --json.
type inspectReport struct {
	GrantID    string         `json:"grant_id"`
	Issuer     string         `json:"issuer"`
	Holder     string         `json:"holder"`
	Expires    *int64         `json:"expires"`
	Expired    bool           `json:"expired"`
	ChainOK    bool           `json:"chain_ok"`
	ChainError string         `json:"chain_error,omitempty"`
	Problems   []string       `json:"problems"`
	Blocks     []inspectBlock `json:"blocks"`
}

func newInspectCmd() *cobra.Command {
	var nowFlag string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect TOKEN|-",
		Short: "Show every block of a grant and check its signature chain",
		Long: `inspect shows each block of a grant: its id, who signed it, who holds it,
its caveats in words and its expiry, in absolute and relative time. It
checks the signature chain (each signature and prev link, §6.4) and says
whether it holds. It does not check whom the issuer is trusted by, nor any
request: use verify for that. A token of - is read from stdin.

Exit codes: 0 the chain holds; 3 it does not; 4 a caveat is unknown or
malformed, so the grant authorizes nothing (§6.3); 1 not a grant token.`,
		Args: exactArgs(1, "one token (or - for stdin)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			now, err := resolveNow(nowFlag)
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
			rep := buildReport(t, now.Unix())
			if asJSON {
				if err := printJSON(rep); err != nil {
					return err
				}
			} else {
				printReport(rep, now.Unix())
			}
			switch {
			case !rep.ChainOK:
				return failCode(exitUnauthorized, fmt.Errorf("the signature chain does not hold: %s", rep.ChainError),
					"do not use this grant: it was not signed as it reads")
			case len(rep.Problems) > 0:
				return failCode(exitForbidden, errors.New(rep.Problems[0]),
					"a verifier refuses a caveat it does not know or cannot read (§6.3), so this grant authorizes nothing")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&nowFlag, "now", "", nowUsage)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// buildReport describes t at time now.
func buildReport(t *grant.Token, now int64) *inspectReport {
	rep := &inspectReport{
		GrantID:  t.ID(),
		Issuer:   t.Issuer(),
		Holder:   t.Holder(),
		ChainOK:  true,
		Problems: []string{},
	}
	if exp, ok := t.Expiry(); ok {
		rep.Expires = &exp
		rep.Expired = now >= exp
	}
	if err := t.CheckChain(); err != nil {
		rep.ChainOK = false
		var ge *grant.Error
		if errors.As(err, &ge) {
			rep.ChainError = ge.Message
		} else {
			rep.ChainError = err.Error()
		}
	}
	for _, info := range lens.Describe(t, now) {
		b := inspectBlock{
			Index:   info.Index,
			ID:      info.ID,
			Signer:  info.Signer,
			Holder:  info.Holder,
			Iat:     info.Iat,
			Caveats: info.Caveats,
			Words:   info.Words,
			Expired: info.Expired,
		}
		if b.Caveats == nil {
			b.Caveats = []grant.Caveat{}
		}
		if b.Words == nil {
			b.Words = []string{}
		}
		if info.HasExpiry {
			exp := info.Expires
			b.Expires = &exp
		}
		for _, c := range info.Caveats {
			if err := c.Check(); err != nil {
				rep.Problems = append(rep.Problems, fmt.Sprintf("block %d: %v", info.Index, err))
			}
		}
		rep.Blocks = append(rep.Blocks, b)
	}
	return rep
}

// printReport writes rep for a human. Every piece of text that came from
// the token passes through lens.SafeText: a token is attacker input, and
// its caveat values must not be able to drive the terminal.
func printReport(rep *inspectReport, now int64) {
	var b strings.Builder
	line := func(indent, label, value string) {
		fmt.Fprintf(&b, "%s%-9s%s\n", indent, label, value)
	}
	line("", "grant", rep.GrantID)
	line("", "issuer", rep.Issuer)
	line("", "holder", rep.Holder)
	line("", "expires", expiryWords(rep.Expires, now))
	if rep.ChainOK {
		line("", "chain", fmt.Sprintf("holds (%s, every signature and link checked)", blocksWords(len(rep.Blocks))))
	} else {
		line("", "chain", "DOES NOT HOLD: "+safe(rep.ChainError))
	}
	for _, blk := range rep.Blocks {
		fmt.Fprintf(&b, "\nblock %d  %s\n", blk.Index, blk.ID)
		signer := blk.Signer
		if blk.Index == 0 {
			signer += " (the issuer)"
		} else {
			signer += fmt.Sprintf(" (the holder of block %d)", blk.Index-1)
		}
		line("  ", "signer", signer)
		line("  ", "holder", blk.Holder)
		line("  ", "issued", fmt.Sprintf("%s (%s)", timeWords(blk.Iat), relWords(blk.Iat, now)))
		if blk.Expires != nil {
			line("  ", "expires", expiryWords(blk.Expires, now))
		}
		if len(blk.Words) == 0 {
			line("  ", "caveats", "none")
		}
		for i, w := range blk.Words {
			label := ""
			if i == 0 {
				label = "caveats"
			}
			line("  ", label, safe(w))
		}
	}
	os.Stdout.WriteString(b.String())
}

func expiryWords(exp *int64, now int64) string {
	switch {
	case exp == nil:
		return "never (no exp caveat)"
	case now >= *exp:
		return fmt.Sprintf("%s (expired %s)", timeWords(*exp), relWords(*exp, now))
	}
	return fmt.Sprintf("%s (%s)", timeWords(*exp), relWords(*exp, now))
}

func blocksWords(n int) string {
	if n == 1 {
		return "1 block"
	}
	return fmt.Sprintf("%d blocks", n)
}

// safe neutralizes text from a token or a file for one line of a terminal,
// cutting it visibly after 200 characters.
func safe(s string) string { return lens.SafeText(s, 200) }
