package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"
)

// A baseline: -base BIN runs a second parley-keyd, built from another
// commit, on a state folder of its own, and measures it in every round next
// to this one (both client kinds), so that a change is judged against its
// baseline in the same run, interleaved, by the medians of the per-round
// ratios. On a shared machine, two runs an hour apart differ by more than
// most changes do.

// The baseline's systems.
const (
	sysBase     = "baseline, client.Client"
	sysBaseDocs = "baseline, protocol client"
)

func init() {
	extraSystems = append(extraSystems, func(e *benchEnv) ([]*system, error) {
		if e.base == "" {
			return nil, nil
		}
		dir := filepath.Join(e.dir, "base")
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, err
		}
		state, sock, err := initState(e.base, dir)
		if err != nil {
			return nil, fmt.Errorf("baseline: %w", err)
		}
		d, _, err := startDaemon(e.base, state, sock)
		if err != nil {
			return nil, fmt.Errorf("baseline: %w", err)
		}
		pid := d.cmd.Process.Pid
		stop := func() { d.stop() }
		return []*system{
			{name: sysBase, pid: pid, grants: true, connect: func(n int) ([]op, func(), error) { return keydClients(sock, n) }},
			{name: sysBaseDocs, pid: pid, grants: true, stop: stop, connect: func(n int) ([]op, func(), error) { return rawClients(sock, n) }},
		}, nil
	})
}

// reportBase prints, when there is a baseline, this daemon's figures over
// the baseline's: the medians over the rounds of the ratios within each
// round.
func reportBase(w io.Writer, f *Figures) {
	if len(f.Rounds) == 0 || f.Rounds[0].Latency[sysBase].N == 0 {
		return
	}
	fmt.Fprintf(w, "\nthis daemon over the baseline (-base), median of the per-round ratios (min–max):\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "client\tserver CPU, 1 client\tserver CPU, many\tp50, 1 client\tp99, 1 client\tthroughput\t")
	for _, pair := range [][2]string{{sysKeyd, sysBase}, {sysKeydDocs, sysBaseDocs}} {
		this, base := pair[0], pair[1]
		ratio := func(get func(r *round, sys string) time.Duration) spread {
			return spreadOf(f.Rounds, func(r *round) float64 {
				if b := get(r, base); b > 0 {
					return float64(get(r, this)) / float64(b)
				}
				return 0
			})
		}
		cpu1 := ratio(func(r *round, s string) time.Duration { return r.Latency[s].ServerCPU })
		cpuN := ratio(func(r *round, s string) time.Duration { return r.Throughput[s].ServerCPU })
		p50 := ratio(func(r *round, s string) time.Duration { return r.Latency[s].P50 })
		p99 := ratio(func(r *round, s string) time.Duration { return r.Latency[s].P99 })
		thr := spreadOf(f.Rounds, func(r *round) float64 {
			if b := r.Throughput[base].PerSec; b > 0 {
				return r.Throughput[this].PerSec / b
			}
			return 0
		})
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", this, fmtX(cpu1), fmtX(cpuN), fmtX(p50), fmtX(p99), fmtX(thr))
	}
	tw.Flush()
}
