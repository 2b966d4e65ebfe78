package deptest

import (
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The layers of the module. The test kit (harnesses, fake services, the
// benchmark) lives under internal/testkit; the rules also know its
// packages by their last path element, so that they hold wherever the
// kit's packages sit.
const testkitDir = module + "/internal/testkit/"

var testkitNames = []string{
	"bench", "clidocstest", "clitest", "journaltest", "testdaemon", "testdesktop", "testfill", "testhsm",
	"testkeys", "testnet", "testpeer", "testservice", "testsigner", "testsummary", "testtransit",
}

// isTestkit reports whether pkg is a package of the test kit.
func isTestkit(pkg string) bool {
	return strings.HasPrefix(pkg, testkitDir) ||
		(strings.HasPrefix(pkg, module+"/internal/") && slices.Contains(testkitNames, path.Base(pkg)))
}

// isHelper reports whether pkg is a production helper: internal/, outside
// the test kit.
func isHelper(pkg string) bool {
	return strings.HasPrefix(pkg, module+"/internal/") && !isTestkit(pkg)
}

// modulePackage is one package of the module as go list sees it.
type modulePackage struct {
	path    string
	goFiles int      // non-test files: 0 for a package of tests only
	imports []string // of its non-test files
	deps    []string // every package its production build links, standard library included
}

// packages lists every package of the module.
func packages(t *testing.T) []modulePackage {
	t.Helper()
	out, err := exec.Command("go", "list", "-f",
		"{{.ImportPath}}\t{{len .GoFiles}}\t{{join .Imports \" \"}}\t{{join .Deps \" \"}}", module+"/...").Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list %s/...: %v\n%s", module, err, stderr)
	}
	var list []modulePackage
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(l, "\t")
		if len(f) != 4 {
			t.Fatalf("go list printed %q", l)
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			t.Fatalf("go list printed %q", l)
		}
		list = append(list, modulePackage{path: f[0], goFiles: n, imports: strings.Fields(f[2]), deps: strings.Fields(f[3])})
	}
	return list
}

// rule is one forbidden arrow of the package graph and why it is forbidden.
type rule struct {
	name   string
	from   func(pkg string) bool // the packages the rule holds for
	to     func(dep string) bool // what they must not link
	reason string
}

var layerRules = []rule{
	{
		name:   "production links no test kit",
		from:   func(p string) bool { return !isTestkit(p) },
		to:     isTestkit,
		reason: "a test harness (fixed keys, fake key services, users it creates) would ship in the daemon or the agent's binary and run with its rights",
	},
	{
		name:   "production links no testing",
		from:   func(p string) bool { return !isTestkit(p) },
		to:     func(d string) bool { return d == "testing" },
		reason: "package testing registers its -test.* flags in whatever links it and belongs in _test.go files or the test kit",
	},
	{
		name: "internal helpers link nothing above them",
		from: isHelper,
		to: func(d string) bool {
			for _, top := range []string{"cmd", "keyd", "grant", "policies", "notify"} {
				if d == module+"/"+top || strings.HasPrefix(d, module+"/"+top+"/") {
					return true
				}
			}
			return false
		},
		reason: "internal/ holds the helpers the daemon, the agent's binary and the libraries build on; an arrow back up to them makes the graph a cycle in waiting and gives a helper the daemon's state",
	},
}

// TestLayers checks every package of the module against the layer rules:
// production packages (all but the test kit) link no test kit package and
// not testing, and the internal helpers link nothing of keyd, grant,
// policies, notify or cmd.
func TestLayers(t *testing.T) {
	pkgs := packages(t)
	if len(pkgs) < 10 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	for _, r := range layerRules {
		t.Run(strings.ReplaceAll(r.name, " ", "-"), func(t *testing.T) {
			for _, p := range pkgs {
				if p.goFiles == 0 || !r.from(p.path) {
					continue
				}
				for _, d := range p.deps {
					if r.to(d) {
						t.Errorf("%s links %s%s: %s", strings.TrimPrefix(p.path, module+"/"), strings.TrimPrefix(d, module+"/"), via(pkgs, p, d), r.reason)
					}
				}
			}
		})
	}
}

// TestTestkitIsKnown keeps the list of the kit's packages whole: an internal
// package that imports testing outside its tests is a test helper, and a
// test helper the rules do not know would pass for production.
func TestTestkitIsKnown(t *testing.T) {
	for _, p := range packages(t) {
		if isHelper(p.path) && slices.Contains(p.imports, "testing") {
			t.Errorf("%s imports testing outside its tests: move it under internal/testkit (and name it in testkitNames), or move its test code into _test.go files", strings.TrimPrefix(p.path, module+"/"))
		}
	}
}

// TestBinariesLinkNoTesting checks the two binaries' production builds:
// neither links package testing.
func TestBinariesLinkNoTesting(t *testing.T) {
	for _, bin := range []string{module + "/cmd/parley-keyd", module + "/cmd/parley-grant"} {
		t.Run(path.Base(bin), func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", bin).Output()
			if err != nil {
				t.Fatalf("go list -deps %s: %v", bin, err)
			}
			deps := strings.Fields(string(out))
			if !slices.Contains(deps, "fmt") {
				t.Fatalf("go list -deps %s printed no standard library: %q", bin, deps)
			}
			if slices.Contains(deps, "testing") {
				t.Errorf("%s links testing: package testing registers its -test.* flags in the binary and brings a test framework into a program that holds or asks for the principal key", path.Base(bin))
			}
			for _, d := range deps {
				if isTestkit(d) {
					t.Errorf("%s links the test kit's %s: a test harness would ship in the binary", path.Base(bin), strings.TrimPrefix(d, module+"/"))
				}
			}
		})
	}
}

// via names the import of p that brings in d, when p does not import d
// itself: the first step of the path to fix.
func via(pkgs []modulePackage, p modulePackage, d string) string {
	if slices.Contains(p.imports, d) {
		return ""
	}
	for _, imp := range p.imports {
		for _, q := range pkgs {
			if q.path == imp && slices.Contains(q.deps, d) {
				return " (through " + strings.TrimPrefix(imp, module+"/") + ")"
			}
		}
	}
	return ""
}
