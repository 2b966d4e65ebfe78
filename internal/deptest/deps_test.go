// Package deptest fails the build when a binary or library links a package it
// must not. The rules are the architecture's boundaries, written down where a
// change that crosses one is caught:
//
//   - the agent's binary (parley-grant) links no key store, no audit writer,
//     no daemon and no age: an agent's process has no business holding the
//     code that opens the principal key;
//   - the daemon (parley-keyd) links no D-Bus: a session bus is the human's,
//     and the daemon cannot reach it anyway (it refuses clients of another
//     uid);
//   - grant, which every Parley service imports to verify grants, links
//     nothing outside the standard library, golang.org/x/crypto and its own
//     internal packages; grant/lens, the Lens text a human is shown, links
//     grant and no more;
//   - policies is pure: grant, the standard library, its TOML parser and
//     the one duration parser (internal/duration, itself standard library only);
//   - the client and the wire types link nothing of the daemon's;
//   - production packages link no test kit package and not testing, the
//     binaries' builds do not link testing, and the internal helpers link
//     nothing of keyd, grant, policies, notify or cmd (layers_test.go).
//
// Every rule says why when it breaks.
package deptest

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/parley-keyd/parley-keyd"

// deps returns every package pkg links, standard library included, for the
// production build (no test files).
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr)
	}
	var list []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" && l != pkg {
			list = append(list, l)
		}
	}
	return list
}

func TestForbiddenImports(t *testing.T) {
	tests := []struct {
		pkg       string
		forbidden []string // exact paths or "prefix/..."
		reason    string   // printed when the rule breaks
	}{
		{module + "/cmd/parley-grant", []string{
			module + "/keyd", module + "/keyd/audit", module + "/keyd/keystore", module + "/keyd/signer/...",
			module + "/policies", "filippo.io/age/...",
		}, "an agent's process has no business holding the code that opens the principal key or writes the audit log"},
		{module + "/cmd/parley-keyd", []string{
			"github.com/godbus/dbus/v5/...", module + "/notify/desktop",
		}, "a session bus is the human's, and the daemon refuses clients of another uid anyway"},
		{module + "/keyd", []string{
			module + "/notify/...", "github.com/godbus/dbus/v5/...", "filippo.io/age/...", module + "/keyd/keystore",
		}, "the daemon's package takes its signer and notifiers from its caller; the key file and the human's desktop stay outside it"},
		{module + "/keyd/client", []string{
			module + "/keyd", module + "/keyd/audit", module + "/keyd/keystore", module + "/policies", "filippo.io/age/...",
		}, "the client is linked by agents and approvers, who must not carry the daemon's code"},
		{module + "/keyd/protocol", []string{
			module + "/keyd", module + "/keyd/audit", module + "/keyd/keystore", module + "/policies",
		}, "the wire types are shared by both ends and must not pull one end into the other"},
		{module + "/notify/phone", []string{module + "/keyd", "github.com/godbus/dbus/v5/..."},
			"a notifier talks to the daemon through its interface, not its code, and the phone page has no bus"},
		{module + "/notify/desktop", []string{module + "/keyd", module + "/keyd/audit", module + "/keyd/keystore"},
			"the desktop notifier runs as the human, as an approver client: it must not carry the daemon's code"},
	}
	for _, tt := range tests {
		t.Run(strings.TrimPrefix(tt.pkg, module+"/"), func(t *testing.T) {
			for _, d := range deps(t, tt.pkg) {
				for _, f := range tt.forbidden {
					if d == f || (strings.HasSuffix(f, "/...") && (d == strings.TrimSuffix(f, "/...") || strings.HasPrefix(d, strings.TrimSuffix(f, "...")))) {
						t.Errorf("%s links %s, which it must not (rule %s): %s", tt.pkg, d, f, tt.reason)
					}
				}
			}
		})
	}
}

// TestOnlyAllowedImports checks the pure libraries against the short list of
// what they may link at all.
func TestOnlyAllowedImports(t *testing.T) {
	tests := []struct {
		pkg     string
		allowed []string // exact paths or "prefix/..."
		reason  string   // printed when the rule breaks
	}{
		{module + "/grant", []string{module + "/grant/internal/...", "golang.org/x/crypto/..."},
			"every Parley service imports grant to verify grants: it must bring nothing else along"},
		{module + "/grant/lens", []string{module + "/grant", module + "/grant/internal/...", "golang.org/x/crypto/..."},
			"the Lens text a human is shown is rendered from the grant alone, by code any service can link"},
		{module + "/policies", []string{module + "/grant", module + "/grant/internal/...", module + "/internal/duration", "golang.org/x/crypto/...", "github.com/pelletier/go-toml/v2/..."},
			"a policy is decided by pure code that tools and services can run without the daemon"},
	}
	for _, tt := range tests {
		t.Run(strings.TrimPrefix(tt.pkg, module+"/"), func(t *testing.T) {
			for _, d := range deps(t, tt.pkg) {
				ok := slices.ContainsFunc(tt.allowed, func(a string) bool {
					if strings.HasSuffix(a, "/...") {
						p := strings.TrimSuffix(a, "/...")
						return d == p || strings.HasPrefix(d, p+"/")
					}
					return d == a
				})
				if !ok {
					t.Errorf("%s links %s, outside what it may link (%s): %s", tt.pkg, d, strings.Join(tt.allowed, ", "), tt.reason)
				}
			}
		})
	}
}
