package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/parley-keyd/parley-keyd/grant/lens"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

func newLensCmd() *cobra.Command {
	var asValue, safeFlag bool
	cmd := &cobra.Command{
		Use:   "lens FILE|-",
		Short: "Print the Lens text of a reply frame or a JSON value",
		Long: `lens prints the Lens rendering (§9) of the JSON in FILE, or stdin for -. A
JSON object with a "kind" is a reply frame and renders as §9.2 says (BRIEF,
PROPOSALS, CLARIFY, RECEIPT, ANSWER, ERROR, EVENT); anything else renders
in lean notation (§9.1). --value renders a frame in lean notation too.

The output is the exact Lens text, byte for byte, unless stdout is a
terminal or --safe is given: then control characters, terminal escapes,
bidi overrides and invisible characters in the text are shown as visible
escapes, so that the service's text cannot drive the terminal.`,
		Args: exactArgs(1, "one file (or - for stdin)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := readInput(args[0], maxJSONInput)
			if err != nil {
				return err
			}
			var out string
			if !asValue && isFrame(raw) {
				out, err = lens.Reply(raw)
				if err != nil {
					return fail(err, "a JSON object with \"kind\" is a reply frame; use --value to render it as a plain value")
				}
			} else if out, err = lens.Value(raw); err != nil {
				return fail(err, "")
			}
			if safeFlag || term.IsTerminal(int(os.Stdout.Fd())) {
				// Every line break of a Lens rendering is its own:
				// strings with line breaks are quoted (§9.1).
				out = lens.SafeLines(out, 0)
			}
			if !strings.HasSuffix(out, "\n") {
				out += "\n"
			}
			fmt.Print(out)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asValue, "value", false, "render the JSON as a value even when it has a \"kind\"")
	cmd.Flags().BoolVar(&safeFlag, "safe", false, "neutralize control and invisible characters even when stdout is not a terminal")
	return cmd
}

// isFrame reports whether raw is a JSON object with a "kind" member.
func isFrame(raw []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return false
	}
	_, ok := m["kind"]
	return ok
}
