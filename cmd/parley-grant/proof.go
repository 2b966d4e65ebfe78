package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/spf13/cobra"
)

func newProofCmd() *cobra.Command {
	var aud, verb, target, keyPath, ts string
	cmd := &cobra.Command{
		Use:   "proof --aud SERVICE --verb V --target T [--key FILE] [--ts UNIX]",
		Short: "Sign a proof of possession for a request",
		Long: `proof signs the proof of possession that goes with grants in a request
(§6.5), with your agent key, and prints it as JSON: {"key", "ts", "sig"}.

The target depends on the verb: the proposal hash for COMMIT, the receipt id
for UNDO, the capability for ASK and INTENT, auto:{capability}:{frame id}
for an INTENT with auto, the handle for EXPAND. A service accepts the proof
for 300 seconds either side of --ts, which defaults to now.`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, args []string) error {
			const hint = "run parley-grant proof --help for the flags"
			for _, req := range []struct{ name, val string }{{"aud", aud}, {"verb", verb}, {"target", target}} {
				if req.val == "" {
					return usagef(hint, "--%s is required", req.name)
				}
			}
			v, err := parseVerb(verb)
			if err != nil {
				return usage(fmt.Errorf("--verb: %w", err), "")
			}
			when := time.Now().Unix()
			if ts != "" {
				if when, err = parseUnix("ts", ts); err != nil {
					return err
				}
			}
			if v == "COMMIT" && !isHash(target) {
				warnf("for COMMIT the target is the proposal hash, and %q is not one", target)
			}
			if (v == "ASK" || v == "INTENT") && strings.ContainsAny(target, " \t") {
				warnf("for %s the target is the capability name, and %q is not one", v, target)
			}
			key, err := loadAgentKey(keyPath)
			if err != nil {
				return err
			}
			p, err := grant.MakeProof(key, aud, v, target, when)
			if err != nil {
				return fail(err, "")
			}
			return printJSON(p)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&aud, "aud", "", "the id of the service the request goes to (required)")
	fs.StringVar(&verb, "verb", "", "the request verb: ASK, INTENT, COMMIT, UNDO or EXPAND (required)")
	cmd.RegisterFlagCompletionFunc("verb", completeVerb)
	fs.StringVar(&target, "target", "", "what the request is about; see above (required)")
	fs.StringVar(&keyPath, "key", "", "your agent key file (default $PARLEY_AGENT_KEY, else ~/.config/parley/agent.key)")
	fs.StringVar(&ts, "ts", "", "the proof's time, unix seconds or RFC 3339 (default now)")
	return cmd
}
