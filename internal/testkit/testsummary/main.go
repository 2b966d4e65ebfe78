// Command testsummary runs go test -json with the arguments it is given and
// prints what a long run owes the developer, and nothing else:
//
//   - each failing test's output in full, as soon as it fails;
//   - the output of a package that failed outside any test (a build error,
//     a panic in TestMain, a timeout);
//   - at the end, one line per skipped test with its reason, which for this
//     project names the peer it lacked (a root shell, a D-Bus, a browser),
//     and one line that counts.
//
// It exits with go test's own exit status. make test runs it:
//
//	go run ./internal/testkit/testsummary -race -count=1 ./...
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

func main() { os.Exit(run("", os.Args[1:], os.Stdout, os.Stderr)) }

// run runs go test -json args in dir (or the current folder), summarizes
// its events on out, and returns go test's exit status.
func run(dir string, args []string, out, errOut io.Writer) int {
	cmd := exec.Command("go", append([]string{"test", "-json"}, args...)...)
	cmd.Dir = dir
	cmd.Stderr = errOut // what go test says outside the events: a bad flag, say
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(errOut, "testsummary: %v\n", err)
		return 1
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(errOut, "testsummary: %v\n", err)
		return 1
	}
	s := newSummary(out)
	s.read(stdout)
	err = cmd.Wait()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
		if code < 0 { // killed by a signal
			code = 1
		}
	case err != nil:
		fmt.Fprintf(errOut, "testsummary: %v\n", err)
		code = 1
	}
	s.finish(code, time.Since(start))
	return code
}

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output, build-fail
	Test       string
	Output     string
}

type testKey struct{ pkg, test string }

// summary gathers the events of one run.
type summary struct {
	out      io.Writer
	output   map[testKey][]string // output so far, by test ("" for the package)
	reported map[string]bool      // packages with a failure printed
	badChild map[testKey]bool     // tests with a failed subtest
	skipped  []skip
	packages map[string]bool
	tests    int
	fails    int
	pkgFails int
}

type skip struct{ pkg, test, why string }

func newSummary(out io.Writer) *summary {
	return &summary{out: out, output: map[testKey][]string{}, reported: map[string]bool{}, badChild: map[testKey]bool{}, packages: map[string]bool{}}
}

func (s *summary) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var e event
		if json.Unmarshal(sc.Bytes(), &e) != nil {
			// Not an event (go test writes only events on stdout,
			// but a test binary may print to stdout directly).
			fmt.Fprintln(s.out, sc.Text())
			continue
		}
		s.event(e)
	}
}

func (s *summary) event(e event) {
	if e.Package == "" {
		e.Package = e.ImportPath
	}
	k := testKey{e.Package, e.Test}
	switch e.Action {
	case "output", "build-output":
		s.output[k] = append(s.output[k], e.Output)
	case "pass":
		if e.Test != "" {
			s.tests++
		} else {
			s.packages[e.Package] = true
		}
		delete(s.output, k)
	case "skip":
		if e.Test == "" { // a package without tests
			delete(s.output, k)
			return
		}
		s.tests++
		s.skipped = append(s.skipped, skip{e.Package, e.Test, skipReason(s.output[k])})
		delete(s.output, k)
	case "fail":
		if e.Test != "" {
			s.tests++
			s.fails++
			for p := e.Test; strings.Contains(p, "/"); {
				p = p[:strings.LastIndexByte(p, '/')]
				s.badChild[testKey{e.Package, p}] = true
			}
			// A parent that only failed because a subtest did says
			// nothing the subtest's output has not said.
			if lines := s.output[k]; !s.badChild[k] || len(ownLines(lines)) > 0 {
				s.print(e.Package, e.Test, lines)
			}
			delete(s.output, k)
			return
		}
		s.packages[e.Package] = true
		s.pkgFails++
		// A package that failed outside its tests: a build error, a
		// panic, a timeout, TestMain. Its own output says why.
		switch lines := packageLines(s.output[k]); {
		case len(lines) > 0:
			s.print(e.Package, "", lines)
		case !s.reported[e.Package]:
			s.print(e.Package, "", []string{"(the package failed, and said nothing more)\n"})
		}
		delete(s.output, k)
	case "build-fail":
		// The package being built, "pkg [pkg.test]" for a test binary.
		pkg, _, _ := strings.Cut(e.Package, " [")
		s.print(pkg, "(build)", s.output[k])
		delete(s.output, k)
	}
}

// print writes the output of a failure in full, under a line naming the
// package and the test.
func (s *summary) print(pkg, test string, lines []string) {
	s.reported[pkg] = true
	fmt.Fprintf(s.out, "=== FAIL %s %s\n", short(pkg), test)
	for _, l := range lines {
		if isFrame(l) {
			continue
		}
		fmt.Fprint(s.out, l)
		if !strings.HasSuffix(l, "\n") {
			fmt.Fprintln(s.out)
		}
	}
}

// isFrame reports whether l is one of the lines go test writes around a
// test's own output.
func isFrame(l string) bool {
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}

// ownLines returns a test's output without the frame and its verdict line.
func ownLines(lines []string) []string {
	var out []string
	for _, l := range lines {
		if t := strings.TrimSpace(l); t != "" && !isFrame(l) && !strings.HasPrefix(t, "--- FAIL") {
			out = append(out, l)
		}
	}
	return out
}

// packageLines drops the lines go test writes for every package ("PASS",
// "FAIL", "ok …", "FAIL\tpkg\t1.2s") from a package's own output.
func packageLines(lines []string) []string {
	var out []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "PASS" || t == "FAIL" || strings.HasPrefix(t, "ok ") || strings.HasPrefix(t, "ok\t") ||
			strings.HasPrefix(t, "FAIL\t") || strings.HasPrefix(t, "coverage:") || t == "" {
			continue
		}
		out = append(out, l)
	}
	return out
}

// skipReason returns what a skipped test said: its log lines without the
// file:line prefix, or "no reason given".
func skipReason(lines []string) string {
	var why []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		if file, msg, ok := strings.Cut(t, ": "); ok && strings.Contains(file, ".go:") {
			t = msg
		}
		why = append(why, t)
	}
	if len(why) == 0 {
		return "no reason given"
	}
	return strings.Join(why, "; ")
}

// short strips the module path from a package path.
func short(pkg string) string {
	if _, rest, ok := strings.Cut(pkg, "parley-keyd/parley-keyd/"); ok {
		return rest
	}
	return pkg
}

// finish writes the skipped tests and the count.
func (s *summary) finish(code int, took time.Duration) {
	// Output of tests that never ended: the run was cut short.
	keys := make([]testKey, 0, len(s.output))
	for k := range s.output {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b testKey) int { return strings.Compare(a.pkg+" "+a.test, b.pkg+" "+b.test) })
	for _, k := range keys {
		if lines := packageLines(s.output[k]); len(lines) > 0 && code != 0 {
			s.print(k.pkg, k.test, lines)
		}
	}
	if len(s.skipped) > 0 {
		fmt.Fprintf(s.out, "skipped %d:\n", len(s.skipped))
		for _, sk := range s.skipped {
			fmt.Fprintf(s.out, "  %s %s: %s\n", short(sk.pkg), sk.test, sk.why)
		}
	}
	verdict := "ok"
	if code != 0 {
		verdict = "FAIL"
	}
	fmt.Fprintf(s.out, "%s: %s in %s, %d failed, %d skipped", verdict, plural(s.tests, "test"), plural(len(s.packages), "package"), s.fails, len(s.skipped))
	if s.pkgFails > 0 {
		fmt.Fprintf(s.out, "; %s failed", plural(s.pkgFails, "package"))
	}
	fmt.Fprintf(s.out, " (%s)\n", took.Round(time.Second))
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
