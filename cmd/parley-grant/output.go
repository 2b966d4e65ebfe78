package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/grant/lens"
	"github.com/spf13/cobra"
)

// exitError is an error that ends the program with a given exit code and,
// optionally, a hint line telling the user what to do about it.
type exitError struct {
	code int
	err  error
	hint string
	// quiet means the command has already told the user everything (a
	// verdict with --json, say): run prints nothing more.
	quiet bool
	// wire is the daemon's wire code when the daemon refused, for --json.
	wire string
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// fail returns err as a failure (exit code 1) with a hint line; hint may be
// empty.
func fail(err error, hint string) error {
	return &exitError{code: exitFail, err: err, hint: hint}
}

// failCode returns err with the given exit code and hint.
func failCode(code int, err error, hint string) error {
	return &exitError{code: code, err: err, hint: hint}
}

// usage returns err as a usage error (exit code 2) with a hint line.
func usage(err error, hint string) error {
	return &exitError{code: exitUsage, err: err, hint: hint}
}

// usagef is usage with a formatted message.
func usagef(hint, format string, args ...any) error {
	return usage(fmt.Errorf(format, args...), hint)
}

// asExitError returns err as an *exitError: itself, or a failure (exit
// code 1), or a usage error (exit code 2) for cobra's complaints about the
// command line.
func asExitError(err error) *exitError {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee
	}
	ee = &exitError{code: exitFail, err: err}
	if isCobraUsage(err) {
		ee.code = exitUsage
		ee.hint = "run parley-grant --help for the commands and their flags"
	}
	return ee
}

// exitCodeOf returns the exit code for a grant error code (§7).
func exitCodeOf(c string) int {
	switch c {
	case "unauthorized":
		return exitUnauthorized
	case "forbidden":
		return exitForbidden
	case "consent_required":
		return exitConsentRequired
	case "invalid_params":
		return exitUsage
	}
	return exitFail
}

// isCobraUsage reports whether err is one of cobra's own complaints about
// the command line (it has no error types for them).
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "required flag", "flag needs", "invalid argument", "accepts ", "requires at least"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// oneLine makes s safe to print on one line of a terminal: messages can
// hold text from a token or a file, which must not move the cursor, forge
// lines or hide characters (see lens.SafeText).
func oneLine(s string) string { return lens.SafeText(s, 600) }

// warnf writes a warning to stderr as "parley-grant: warning: …".
func warnf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "parley-grant: warning: %s\n", oneLine(fmt.Sprintf(format, args...)))
}

// infof writes a message to stderr as "parley-grant: …".
func infof(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "parley-grant: %s\n", oneLine(fmt.Sprintf(format, args...)))
}

// wroteJSON is set once a command has printed its JSON result: a failure
// after it (a refusing verdict, say) adds no error object to stdout.
var wroteJSON bool

// printJSON writes v to stdout as indented JSON followed by a newline.
// Unlike json.Marshal's default it leaves <, > and & as they are.
func printJSON(v any) error {
	var b bytes.Buffer
	if err := encodeJSON(&b, v); err != nil {
		return fail(fmt.Errorf("encode json: %w", err), "")
	}
	wroteJSON = true
	_, err := os.Stdout.Write(b.Bytes())
	return err
}

func encodeJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(escapeJSONText(b.Bytes()))
	return err
}

// escapeJSONText is lens.EscapeJSONText: raw JSON from the socket (a
// proposal, an audit record) printed with every character that could steer
// a terminal as a \u escape, its values unchanged.
func escapeJSONText(b []byte) []byte { return lens.EscapeJSONText(b) }

// wantsJSON reports whether cmd was run with --json.
func wantsJSON(cmd *cobra.Command) bool {
	if cmd == nil {
		return false
	}
	f := cmd.Flags().Lookup("json")
	return f != nil && f.Value.String() == "true"
}

// jsonError is a failure as --json prints it.
type jsonError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Hint    string `json:"hint"`
	} `json:"error"`
}

// exitNames name the exit codes in a JSON error that carries no wire code.
var exitNames = map[int]string{
	exitFail: "failure", exitUsage: "usage", exitUnauthorized: "unauthorized", exitForbidden: "forbidden",
	exitConsentRequired: "consent_required", exitDenied: "denied", exitTimeout: "timeout",
	exitNoDaemon: "no_daemon", exitRateLimited: "limit", exitLocked: "locked",
}

// printJSONError writes err to w as {"error": {"code", "message", "hint"}}.
// The message and the hint are the sentences the text form prints.
func printJSONError(w io.Writer, err error) {
	ee := asExitError(err)
	var je jsonError
	je.Error.Code = ee.wire
	if je.Error.Code == "" {
		je.Error.Code = exitNames[ee.code]
	}
	je.Error.Message, je.Error.Hint = ee.Error(), ee.hint
	encodeJSON(w, je)
}

// Limits on what commands read. Every input may come from an agent, so
// each is capped before it is read whole.
const (
	// maxJSONInput bounds a JSON file or stdin: a Parley frame is at most
	// 1 MiB (§2.1).
	maxJSONInput = 1 << 20
	// maxTokenInput bounds a token read from a file or stdin: the longest
	// token Decode accepts plus room for surrounding white space.
	maxTokenInput = grant.MaxTokenLen + 4096
)

// tokenPrefix starts every grant token (§6.2).
const tokenPrefix = "pg1."

// tokenMax says how long a token may be, for messages.
var tokenMax = "a grant token is at most " + sizeWords(grant.MaxTokenLen)

// readLimited reads at most limit bytes of r; more is an error that says
// "too large". what names the input in messages ("stdin", a file name),
// and max says what the limit is ("a token is at most 64 KiB").
func readLimited(r io.Reader, limit int64, what, max string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fail(fmt.Errorf("read %s: %w", what, err), "")
	}
	if int64(len(data)) > limit {
		return nil, fail(fmt.Errorf("%s is too large: %s", what, max), "")
	}
	return data, nil
}

// readInput reads the file name, or stdin when name is "-", capped at
// limit bytes.
func readInput(name string, limit int64) ([]byte, error) {
	if name == "-" {
		return readLimited(os.Stdin, limit, "stdin", "the limit is "+sizeWords(limit))
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, fail(err, "")
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		return nil, fail(fmt.Errorf("%s is a directory", name), "")
	}
	return readLimited(f, limit, name, "the limit is "+sizeWords(limit))
}

// readToken returns a token given as an argument, or read from stdin when
// arg is "-". White space around a token from stdin is dropped.
func readToken(arg string) (string, error) {
	if arg != "-" {
		return arg, nil
	}
	data, err := readLimited(os.Stdin, maxTokenInput, "the token on stdin", tokenMax)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		return "", fail(errors.New("no token on stdin"), "")
	}
	return tok, nil
}

// decodeToken decodes a token and turns a decoding error into a one-line
// message that names what is wrong.
func decodeToken(tok string) (*grant.Token, error) {
	t, err := grant.Decode(tok)
	if err != nil {
		hint, better := explainDecode(tok, err)
		return nil, fail(better, hint)
	}
	return t, nil
}

// explainDecode returns a hint and an error for tok that is clearer than
// err, the error grant.Decode returned for it, where one can be given.
func explainDecode(tok string, err error) (hint string, better error) {
	body, hasPrefix := strings.CutPrefix(tok, tokenPrefix)
	switch {
	case tok == "":
		return "", errors.New("empty grant token")
	case !hasPrefix:
		return "a grant token starts with " + tokenPrefix, err
	case len(tok) <= grant.MaxTokenLen:
		// Decode names the first thing it cannot read; for a token cut
		// short by a copy and paste, say so instead.
		if raw, b64err := base64.RawURLEncoding.DecodeString(body); b64err == nil && len(raw) > 0 && !json.Valid(raw) {
			return "copy the whole token: it is one line starting with " + tokenPrefix,
				errors.New("malformed grant token: its JSON ends early or is broken (was the token cut short?)")
		}
	}
	return "", err
}

func sizeWords(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// exactArgs is cobra.ExactArgs with a usage error that names the arguments.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("usage: "+cmd.UseLine(), "%s wants %s, got %d arguments", cmd.Name(), names, len(args))
		}
		return nil
	}
}
