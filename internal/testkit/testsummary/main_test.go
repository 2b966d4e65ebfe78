package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestSummary runs the real go test on the module in testdata/sample: a
// package that passes with skips, one with failures, one that does not
// build, one without tests.
func TestSummary(t *testing.T) {
	t.Run("fail/every-kind", func(t *testing.T) {
		var out, errOut bytes.Buffer
		if code := run("testdata/sample", []string{"-count=1", "./..."}, &out, &errOut); code != 1 {
			t.Errorf("exit %d, want go test's 1\n%s", code, out.String())
		}
		got := out.String()
		for _, want := range []string{
			// Failures in full: the log before the failure too.
			"=== FAIL example.com/sample/bad TestBroken\n    bad_test.go:6: context before the failure\n    bad_test.go:7: the value was 41, want 42\n--- FAIL: TestBroken",
			"=== FAIL example.com/sample/bad TestParent/wrong\n    bad_test.go:12: the subtest broke\n",
			"=== FAIL example.com/sample/broken (build)\n",
			"declared and not used: x",
			// One line per skipped test, with its reason.
			"skipped 2:\n  example.com/sample/good TestNeedsUnicorn: needs a unicorn (the peer it lacked)\n  example.com/sample/good TestShells/fish: needs fish\n",
			"FAIL: 10 tests in 3 packages, 3 failed, 2 skipped; 2 packages failed (",
		} {
			if !strings.Contains(got, want) {
				t.Errorf("output lacks %q:\n%s", want, got)
			}
		}
		// Nothing about what passed, and no second report of a parent
		// that failed only through its subtest.
		for _, not := range []string{"TestPass", "chatter", "TestQuiet", "=== RUN", "FAIL example.com/sample/bad TestParent\n", "notests"} {
			if strings.Contains(got, not) {
				t.Errorf("output holds %q:\n%s", not, got)
			}
		}
	})

	t.Run("ok/quiet-but-skips", func(t *testing.T) {
		var out, errOut bytes.Buffer
		if code := run("testdata/sample", []string{"-count=1", "./good/", "./notests/"}, &out, &errOut); code != 0 {
			t.Errorf("exit %d, want 0\n%s%s", code, out.String(), errOut.String())
		}
		lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if len(lines) != 4 || lines[0] != "skipped 2:" || !strings.HasPrefix(lines[3], "ok: 5 tests in 1 package, 0 failed, 2 skipped (") {
			t.Errorf("output:\n%s\nwant the two skips and the count, and nothing else", out.String())
		}
	})

	t.Run("fail/go-test-usage", func(t *testing.T) {
		var out, errOut bytes.Buffer
		if code := run("testdata/sample", []string{"-count=x", "./..."}, &out, &errOut); code != 2 {
			t.Errorf("exit %d, want go test's 2\n%s%s", code, out.String(), errOut.String())
		}
		if !strings.Contains(errOut.String(), "invalid value \"x\" for flag -count") {
			t.Errorf("go test's complaint did not reach stderr: %q", errOut.String())
		}
	})
}
