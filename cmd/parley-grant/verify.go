package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/grant/lens"
	"github.com/spf13/cobra"
)

// verdict is the output of verify --json.
type verdict struct {
	OK      bool           `json:"ok"`
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Need    []grant.Caveat `json:"need"`
	// Grant is the index of the authorizing grant among the tokens, or -1.
	Grant       int      `json:"grant"`
	GrantID     string   `json:"grant_id"`
	Holder      string   `json:"holder"`
	Issuer      string   `json:"issuer"`
	SpendBlocks []string `json:"spend_blocks"`
	// Principal is, for consent_required, the principal to ask (§6.6).
	Principal string `json:"principal,omitempty"`
}

type verifyFlags struct {
	service, verb, capability string
	trust                     []string
	proofKey                  string
	now                       string
	proposal                  string
	spent                     []string
	asJSON                    bool
}

func newVerifyCmd() *cobra.Command {
	var f verifyFlags
	cmd := &cobra.Command{
		Use:   "verify TOKEN... --service S --verb V --capability C --trust KEY",
		Short: "Decide whether grants authorize a request, as a service would",
		Long: `verify runs the full check of §6.4 on one or more grant tokens: each token
decodes, its issuer is one of the --trust keys, its holder is the proof key,
every signature and prev link holds, and every caveat of every block is
satisfied by the request. Several tokens authorize when any one of them does
on its own (§6.6). A token of - reads tokens from stdin, one per line.

The proof of possession itself is not checked: verify assumes the presenter
holds --proof-key, which defaults to the holder of the tokens. A COMMIT needs
--proposal, the proposal's JSON; its hash is computed from its content.

Exit codes: 0 authorized; 3 unauthorized; 4 forbidden (the caveats that
block it are listed); 5 consent_required (a COMMIT over a per, spend or risk
limit); 2 a usage error; 1 an input that cannot be read.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("usage: "+cmd.UseLine(), "verify wants at least one token (or - for stdin)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runVerify(&f, args) },
	}
	fs := cmd.Flags()
	fs.StringVar(&f.service, "service", "", "the id of the service that verifies (required)")
	fs.StringVar(&f.verb, "verb", "", "the request verb: ASK, INTENT, COMMIT, UNDO or EXPAND (required)")
	cmd.RegisterFlagCompletionFunc("verb", completeVerb)
	fs.StringVar(&f.capability, "capability", "", "the capability requested; for UNDO, the receipt's (required)")
	fs.StringArrayVar(&f.trust, "trust", nil, "a principal key the service trusts, ed25519:… (repeatable; at least one)")
	fs.StringVar(&f.proofKey, "proof-key", "", "the key of the request's proof (default: the tokens' holder, i.e. assume the presenter holds it)")
	fs.StringVar(&f.now, "now", "", nowUsage)
	fs.StringVar(&f.proposal, "proposal", "", "for COMMIT: a file with the proposal's JSON (- for stdin)")
	fs.StringArrayVar(&f.spent, "spent", nil, "spend already attributed to a block: BLOCKID=AMOUNT, AMOUNT in minor units or as 20.00USD (repeatable)")
	fs.BoolVar(&f.asJSON, "json", false, "print the verdict as JSON")
	return cmd
}

func runVerify(f *verifyFlags, args []string) error {
	const hint = "run parley-grant verify --help for the flags"
	for _, req := range []struct{ name, val string }{
		{"service", f.service}, {"verb", f.verb}, {"capability", f.capability},
	} {
		if strings.TrimSpace(req.val) == "" {
			return usagef(hint, "--%s is required", req.name)
		}
	}
	verb, err := parseVerb(f.verb)
	if err != nil {
		return usage(fmt.Errorf("--verb: %w", err), "")
	}
	if len(f.trust) == 0 {
		return usagef("name the principal the service trusts: --trust ed25519:… (see inspect for a grant's issuer)",
			"--trust is required: a grant is only as good as the principal who issued it")
	}
	for _, k := range f.trust {
		if _, err := grant.ParsePublicKey(k); err != nil {
			return usage(fmt.Errorf("--trust %q: %w", k, err), "")
		}
	}
	now, err := resolveNow(f.now)
	if err != nil {
		return err
	}
	tokens, err := verifyTokens(args)
	if err != nil {
		return err
	}
	ctx := grant.Context{
		Service:    f.service,
		Verb:       verb,
		Capability: f.capability,
		Now:        now.Unix(),
	}
	if ctx.ProofKey, err = proofKeyFor(f.proofKey, tokens); err != nil {
		return err
	}
	switch {
	case f.proposal != "" && verb != "COMMIT":
		return usagef("", "--proposal is for COMMIT only, and the verb is %s", verb)
	case f.proposal == "" && verb == "COMMIT":
		return usagef("give the proposal the COMMIT is for: --proposal FILE", "a COMMIT is verified against its proposal")
	case f.proposal != "":
		if f.proposal == "-" && containsDash(args) {
			return usagef("", "stdin cannot hold both the tokens and the proposal")
		}
		if ctx.Proposal, err = readProposal(f.proposal); err != nil {
			return err
		}
	}
	if ctx.Spent, err = parseSpent(f.spent); err != nil {
		return err
	}

	v := verdict{Grant: -1, Need: []grant.Caveat{}, SpendBlocks: []string{}}
	res, verr := grant.Verify(tokens, f.trust, ctx)
	if verr == nil {
		v.OK = true
		v.Grant, v.GrantID, v.Holder, v.Issuer = res.Grant, res.GrantID, res.Holder, res.Issuer
		if res.SpendBlocks != nil {
			v.SpendBlocks = res.SpendBlocks
		}
	} else {
		var ge *grant.Error
		if !errors.As(verr, &ge) {
			return fail(verr, "")
		}
		v.Code, v.Message, v.Principal = ge.Code, ge.Message, ge.Principal
		if ge.Need != nil {
			v.Need = ge.Need
		}
		// Name the grant when there is only one, so a script can tell
		// which one failed.
		if len(tokens) == 1 {
			if t, err := grant.Decode(tokens[0]); err == nil {
				v.GrantID, v.Holder, v.Issuer = t.ID(), t.Holder(), t.Issuer()
			} else if _, better := explainDecode(tokens[0], err); better != err {
				v.Message = better.Error()
			}
		}
	}
	if f.asJSON {
		if err := printJSON(v); err != nil {
			return err
		}
	} else if v.OK {
		fmt.Printf("authorized by grant %s\n", v.GrantID)
		fmt.Printf("issuer   %s\nholder   %s\n", v.Issuer, v.Holder)
		if len(v.SpendBlocks) > 0 && verb == "COMMIT" {
			fmt.Printf("reserve  the cost against blocks %s\n", strings.Join(v.SpendBlocks, ", "))
		}
	}
	if v.OK {
		return nil
	}
	return verdictError(&v)
}

// verdictError turns a refusal into the error run reports: the code and
// message, the blocking caveats, and what to do.
func verdictError(v *verdict) error {
	msg := v.Code + ": " + v.Message
	for _, c := range v.Need {
		msg += "; blocked by: " + lens.DescribeCaveat(c)
	}
	var hint string
	switch v.Code {
	case "unauthorized":
		hint = "check the token, the --trust key and --proof-key; inspect shows a grant's issuer and holder"
	case "forbidden":
		hint = "this grant does not cover the request; ask for one that does (parley-grant issue)"
	case "consent_required":
		hint = "the principal must consent to this proposal: parley-grant consent"
	}
	return failCode(exitCodeOf(v.Code), errors.New(msg), hint)
}

// verifyTokens returns the tokens of the arguments, reading them from
// stdin, one per line, for an argument "-".
func verifyTokens(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		if a != "-" {
			out = append(out, a)
			continue
		}
		data, err := readLimited(os.Stdin, grant.MaxGrants*maxTokenInput, "stdin",
			fmt.Sprintf("a request carries at most %d grants, each at most %s", grant.MaxGrants, sizeWords(grant.MaxTokenLen)))
		if err != nil {
			return nil, err
		}
		out = append(out, strings.Fields(string(data))...)
	}
	if len(out) == 0 {
		return nil, fail(errors.New("no token given"), "")
	}
	if len(out) > grant.MaxGrants {
		return nil, usagef("", "%d tokens given; a request carries at most %d", len(out), grant.MaxGrants)
	}
	return out, nil
}

func containsDash(args []string) bool {
	for _, a := range args {
		if a == "-" {
			return true
		}
	}
	return false
}

// proofKeyFor returns the proof key: the flag's, or else the holder that
// all decodable tokens share. With no decodable token it returns "", and
// Verify then says what is wrong with the tokens.
func proofKeyFor(flag string, tokens []string) (string, error) {
	if flag != "" {
		if _, err := grant.ParsePublicKey(flag); err != nil {
			return "", usage(fmt.Errorf("--proof-key %q: %w", flag, err), "")
		}
		return flag, nil
	}
	holder := ""
	for _, s := range tokens {
		t, err := grant.Decode(s)
		if err != nil {
			continue
		}
		if holder != "" && t.Holder() != holder {
			return "", usagef("name the key that signs the request's proof: --proof-key ed25519:…",
				"the tokens have different holders, so the proof key is not clear")
		}
		holder = t.Holder()
	}
	return holder, nil
}

// readProposal reads the proposal a COMMIT is verified against. Its caveats
// see the hash computed from the content; a hash field that disagrees is
// refused, since a service would refuse it too (§4.4).
func readProposal(name string) (*grant.Proposal, error) {
	raw, err := readInput(name, maxJSONInput)
	if err != nil {
		return nil, err
	}
	p, err := grant.ParseProposal(raw)
	if err != nil {
		return nil, fail(fmt.Errorf("--proposal %s: %w", name, err), "")
	}
	if _, h := p.Hashed(); p.Hash != "" && p.Hash != h {
		return nil, fail(fmt.Errorf("--proposal %s: its hash field does not match its content (the content hashes to %s)", name, h),
			"the proposal was changed after it was hashed; get it again from the service")
	}
	return p, nil
}

// parseSpent parses --spent BLOCKID=AMOUNT flags. A bare integer is minor
// units; a money form such as 20.00USD is converted to minor units.
func parseSpent(vals []string) (map[string]int64, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	out := make(map[string]int64, len(vals))
	for _, v := range vals {
		id, amount, ok := strings.Cut(v, "=")
		if !ok || id == "" || amount == "" {
			return nil, usagef("write BLOCKID=AMOUNT, such as --spent Xy…=2000 or --spent Xy…=20.00USD", "--spent %q: want BLOCKID=AMOUNT", v)
		}
		if !isHash(id) {
			return nil, usagef("inspect shows the id of each block", "--spent %q: %q is not a block id", v, id)
		}
		var n int64
		if isDigits(amount) {
			var err error
			if n, err = strconv.ParseInt(amount, 10, 64); err != nil || n > 1<<53-1 { // §10: an integer every JSON reader keeps exact
				return nil, usagef("", "--spent %q: amount out of range", v)
			}
		} else {
			m, err := grant.ParseMoney(amount)
			if err != nil {
				return nil, usage(fmt.Errorf("--spent: %w", err), moneyHint)
			}
			n = m.Amount
		}
		out[id] += n
	}
	return out, nil
}
