package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// verifyRow is grant verification of a chain of Blocks blocks next to the
// bare Ed25519 checks of the same chain, in CPU nanoseconds per chain.
type verifyRow struct {
	Blocks      int
	GrantNs     float64
	Ed25519Ns   float64
	OverheadPct float64
}

// measureVerify runs grant's own benchmarks, which build the chains from
// grant's test keys: BenchmarkVerifyOverhead (thread CPU time, alternating
// Verify and the bare checks, so that a busy machine does not skew the
// ratio), or BenchmarkVerify (wall time) where the former does not exist.
func measureVerify(benchtime string) ([]verifyRow, string, error) {
	rows, err := runGrantBench("^BenchmarkVerifyOverhead$", benchtime)
	if err != nil {
		return nil, "", err
	}
	if len(rows) > 0 {
		return rows, "BenchmarkVerifyOverhead (thread CPU time)", nil
	}
	rows, err = runGrantBench("^BenchmarkVerify$", benchtime)
	return rows, "BenchmarkVerify (wall time)", err
}

var benchLine = regexp.MustCompile(`^BenchmarkVerify(Overhead)?/(grant/|ed25519/)?blocks=(\d+)(-\d+)?\s+\d+\s+(.*)$`)

func runGrantBench(pattern, benchtime string) ([]verifyRow, error) {
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", pattern, "-benchtime", benchtime, "-count", "1",
		"github.com/parley-keyd/parley-keyd/grant")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("go test -bench %s ./grant: %v\n%s", pattern, err, out)
	}
	byBlocks := map[int]*verifyRow{}
	var order []int
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[3])
		r := byBlocks[n]
		if r == nil {
			r = &verifyRow{Blocks: n}
			byBlocks[n] = r
			order = append(order, n)
		}
		metrics := benchMetrics(m[5])
		switch {
		case m[1] == "Overhead":
			r.GrantNs, r.Ed25519Ns = metrics["grant-cpu-ns/op"], metrics["ed25519-cpu-ns/op"]
		case m[2] == "grant/":
			r.GrantNs = metrics["ns/op"]
		case m[2] == "ed25519/":
			r.Ed25519Ns = metrics["ns/op"]
		}
	}
	var rows []verifyRow
	for _, n := range order {
		r := byBlocks[n]
		if r.Ed25519Ns > 0 {
			r.OverheadPct = 100 * (r.GrantNs - r.Ed25519Ns) / r.Ed25519Ns
		}
		rows = append(rows, *r)
	}
	return rows, nil
}

// benchMetrics parses "123 ns/op  45 B/op  6.7 overhead-%" into unit → value.
func benchMetrics(s string) map[string]float64 {
	f := strings.Fields(s)
	m := map[string]float64{}
	for i := 0; i+1 < len(f); i += 2 {
		if v, err := strconv.ParseFloat(f[i], 64); err == nil {
			m[f[i+1]] = v
		}
	}
	return m
}

// compareRow is grant verification of a chain of Blocks blocks in thread CPU
// nanoseconds (grant's BenchmarkVerifyCompare): without a cache (Cold),
// with a cache that misses (Miss), with a warm cache (Warm), a chain of
// EdDSA JWTs of the same shape verified with golang-jwt (JWT), and the bare
// signature checks (Ed25519).
type compareRow struct {
	Blocks                         int
	Cold, Miss, Warm, JWT, Ed25519 float64
}

var benchResult = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?\s+\d+\s+(.*)$`)

// runBench runs grant's benchmarks matching pattern and returns each
// result's metrics by benchmark name (without the -GOMAXPROCS suffix).
func runBench(pattern, benchtime string) (map[string]map[string]float64, []string, error) {
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", pattern, "-benchtime", benchtime, "-count", "1",
		"github.com/parley-keyd/parley-keyd/grant")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, nil, fmt.Errorf("go test -bench %s ./grant: %v\n%s", pattern, err, out)
	}
	res := map[string]map[string]float64{}
	var order []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := benchResult.FindStringSubmatch(sc.Text()); m != nil {
			res[m[1]] = benchMetrics(m[3])
			order = append(order, m[1])
		}
	}
	return res, order, nil
}

// measureCompare runs grant's BenchmarkVerifyCompare.
func measureCompare(benchtime string) ([]compareRow, error) {
	res, order, err := runBench("^BenchmarkVerifyCompare$", benchtime)
	if err != nil {
		return nil, err
	}
	var rows []compareRow
	for _, name := range order {
		_, blocks, ok := strings.Cut(name, "/blocks=")
		n, err := strconv.Atoi(blocks)
		if !ok || err != nil {
			continue
		}
		m := res[name]
		rows = append(rows, compareRow{Blocks: n, Cold: m["cold-cpu-ns/op"], Miss: m["miss-cpu-ns/op"], Warm: m["warm-cpu-ns/op"],
			JWT: m["jwt-cpu-ns/op"], Ed25519: m["ed25519-cpu-ns/op"]})
	}
	if len(rows) == 0 {
		return nil, errors.New("BenchmarkVerifyCompare reported nothing")
	}
	return rows, nil
}

// measureSignCheck runs grant's BenchmarkSignCheck: thread CPU nanoseconds
// of a bare signature, a signature checked by verification, two compared,
// and MakeProof, by those names.
func measureSignCheck(benchtime string) (map[string]float64, error) {
	res, _, err := runBench("^BenchmarkSignCheck$", benchtime)
	if err != nil {
		return nil, err
	}
	m, ok := res["BenchmarkSignCheck"]
	if !ok {
		return nil, errors.New("BenchmarkSignCheck reported nothing")
	}
	out := map[string]float64{}
	for k, v := range m {
		if name, ok := strings.CutSuffix(k, "-cpu-ns/op"); ok {
			out[name] = v
		}
	}
	return out, nil
}
