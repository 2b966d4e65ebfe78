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
//   - the client and the wire types link nothing of the daemon's.
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
	}{
		{module + "/cmd/parley-grant", []string{
			module + "/keyd", module + "/keyd/audit", module + "/keyd/keystore", module + "/keyd/signer/...",
			module + "/policies", "filippo.io/age/...",
		}},
		{module + "/cmd/parley-keyd", []string{
			"github.com/godbus/dbus/v5/...", module + "/notify/desktop",
		}},
		{module + "/keyd", []string{
			module + "/notify/...", "github.com/godbus/dbus/v5/...", "filippo.io/age/...", module + "/keyd/keystore",
		}},
		{module + "/keyd/client", []string{
			module + "/keyd", module + "/keyd/audit", module + "/keyd/keystore", module + "/policies", "filippo.io/age/...",
		}},
		{module + "/keyd/protocol", []string{
			module + "/keyd", module + "/keyd/audit", module + "/keyd/keystore", module + "/policies",
		}},
		{module + "/notify/phone", []string{module + "/keyd", "github.com/godbus/dbus/v5/..."}},
		{module + "/notify/desktop", []string{module + "/keyd", module + "/keyd/audit", module + "/keyd/keystore"}},
	}
	for _, tt := range tests {
		t.Run(strings.TrimPrefix(tt.pkg, module+"/"), func(t *testing.T) {
			for _, d := range deps(t, tt.pkg) {
				for _, f := range tt.forbidden {
					if d == f || (strings.HasSuffix(f, "/...") && (d == strings.TrimSuffix(f, "/...") || strings.HasPrefix(d, strings.TrimSuffix(f, "...")))) {
						t.Errorf("%s links %s, which it must not (rule %s)", tt.pkg, d, f)
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
	}{
		{module + "/grant", []string{module + "/grant/internal/...", "golang.org/x/crypto/..."}},
		{module + "/grant/lens", []string{module + "/grant", module + "/grant/internal/...", "golang.org/x/crypto/..."}},
		{module + "/policies", []string{module + "/grant", module + "/grant/internal/...", module + "/internal/duration", "golang.org/x/crypto/...", "github.com/pelletier/go-toml/v2/..."}},
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
					t.Errorf("%s links %s, outside what it may link: %s", tt.pkg, d, strings.Join(tt.allowed, ", "))
				}
			}
		})
	}
}
