package main

import (
	"bytes"
	"encoding"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/duration"
	"github.com/parley-keyd/parley-keyd/internal/testkit/clidocstest"
	"github.com/parley-keyd/parley-keyd/keyd"
)

// duration.Value reads itself from text, as every value type of the file
// must for TestFilePages to tell values from tables.
var _ encoding.TextUnmarshaler = (*duration.Value)(nil)

// TestGendocs checks the man pages and completions that make install
// installs: one page per visible command, and completions that offer every
// subcommand in bash, zsh and fish.
func TestGendocs(t *testing.T) {
	clidocstest.Check(t, newRootCmd(), filepath.Join(binaries(t), "parley-keyd"), "8")
}

// TestFilePages checks the section 5 pages that gendocs writes: groff reads
// them without a warning, the configuration page names every key
// keyd.Config reads, and the policy page every key docs/policy.md shows, so
// neither can fall behind the code or the full documentation.
func TestFilePages(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command(filepath.Join(binaries(t), "parley-keyd"), "gendocs", "--dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("gendocs: %v\n%s", err, out)
	}
	page := func(name string) string {
		t.Helper()
		path := filepath.Join(dir, "man", "man5", name+".5")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(".TH "+name+" 5 ")) {
			t.Errorf("%s: no title line:\n%.300s", name, b)
		}
		if groff, err := exec.LookPath("groff"); err == nil {
			out, err := exec.Command(groff, "-man", "-ww", "-z", path).CombinedOutput()
			if err != nil || len(out) > 0 {
				t.Errorf("groff on %s: %v\n%s", name, err, out)
			}
		}
		return string(b)
	}
	bold := func(key string) string { return `\fB` + strings.ReplaceAll(key, "-", `\-`) + `\fP` }

	config := page("parley-keyd-config.toml")
	var keys []string
	text := reflect.TypeFor[encoding.TextUnmarshaler]()
	var walk func(t reflect.Type, prefix string)
	walk = func(typ reflect.Type, prefix string) {
		for f := range typ.Fields() {
			tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if tag == "" || tag == "-" {
				continue
			}
			// A struct is a table, unless it reads itself from text (a
			// duration).
			if f.Type.Kind() == reflect.Struct && !reflect.PointerTo(f.Type).Implements(text) {
				if !strings.Contains(config, "["+prefix+tag+"]") {
					t.Errorf("the configuration page has no section [%s%s]", prefix, tag)
				}
				walk(f.Type, prefix+tag+".")
				continue
			}
			keys = append(keys, prefix+tag)
			if !strings.Contains(config, bold(tag)) {
				t.Errorf("the configuration page does not explain %s%s", prefix, tag)
			}
		}
	}
	walk(reflect.TypeFor[keyd.Config](), "")
	if len(keys) < 10 {
		t.Fatalf("found only the keys %v", keys)
	}

	policy := page("parley-keyd-policy.toml")
	md, err := os.ReadFile("../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	key := regexp.MustCompile(`(?m)^\s*([a-z_]+)\s*=`)
	n := 0
	for _, block := range regexp.MustCompile("(?s)```toml\n(.*?)```").FindAllStringSubmatch(string(md), -1) {
		for _, m := range key.FindAllStringSubmatch(block[1], -1) {
			n++
			if !strings.Contains(policy, bold(m[1])) {
				t.Errorf("the policy page does not explain %s, which docs/policy.md shows", m[1])
			}
		}
	}
	if n < 20 {
		t.Fatalf("found only %d keys in docs/policy.md", n)
	}
}
