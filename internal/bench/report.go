package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// Goals of the performance issue, checked by report.
const (
	goalLatencyRatio    = 2.0                   // ssh-agent p50 / parley-keyd p50 at least
	goalThroughputRatio = 5.0                   // parley-keyd / ssh-agent with 16 clients at least
	goalVerifyOverhead  = 15.0                  // percent over the bare signature checks at most
	goalIdleKiB         = 15 * 1024             // idle resident memory at most
	goalConnsKiB        = 64 * 1024             // with 1000 idle connections at most
	goalReady           = 50 * time.Millisecond // from exec to the first HELLO answered, at most
)

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

func report(w io.Writer, f *Figures) {
	fmt.Fprintf(w, "parley-keyd bench: %s %s, %d CPUs (%s), state folder on %s, %s\n\n",
		f.Env.Go, f.Env.OS, f.Env.CPUs, f.Env.CPU, f.Env.FS, f.Env.Time)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\tparley-keyd GRANT (auto, fsynced)\tssh-agent sign (Ed25519, 200 B)\tratio\tgoal\t")
	fmt.Fprintf(tw, "latency p50, 1 client\t%s\t%s\t%.2fx\tssh/keyd ≥ %.0fx: %s\t\n", us(f.KeydLatency.P50), us(f.SSHLatency.P50),
		f.LatencyRatio, goalLatencyRatio, verdict(f.LatencyRatio >= goalLatencyRatio))
	fmt.Fprintf(tw, "latency p99, 1 client\t%s\t%s\t%.2fx\t\t\n", us(f.KeydLatency.P99), us(f.SSHLatency.P99),
		float64(f.SSHLatency.P99)/float64(f.KeydLatency.P99))
	fmt.Fprintf(tw, "throughput, %d clients\t%.0f/s\t%.0f/s\t%.2fx\tkeyd/ssh ≥ %.0fx: %s\t\n", f.KeydThroughput.Clients,
		f.KeydThroughput.PerSec, f.SSHThroughput.PerSec, f.ThroughputRatio, goalThroughputRatio, verdict(f.ThroughputRatio >= goalThroughputRatio))
	fmt.Fprintf(tw, "CPU per request, server (1 client)\t%s\t%s\t\t\t\n", us(f.KeydLatency.ServerCPU), us(f.SSHLatency.ServerCPU))
	fmt.Fprintf(tw, "CPU per request, client (1 client)\t%s\t%s\t\t\t\n", us(f.KeydLatency.ClientCPU), us(f.SSHLatency.ClientCPU))
	fmt.Fprintf(tw, "CPU per request, server (%d clients)\t%s\t%s\t\t\t\n", f.KeydThroughput.Clients, us(f.KeydThroughput.ServerCPU), us(f.SSHThroughput.ServerCPU))
	fmt.Fprintf(tw, "CPU per request, clients (%d clients)\t%s\t%s\t\t\t\n", f.KeydThroughput.Clients, us(f.KeydThroughput.ClientCPU), us(f.SSHThroughput.ClientCPU))
	fmt.Fprintf(tw, "resident memory, idle\t%s\t%s\t\t≤ %s: %s\t\n", mib(f.IdleRSSKiB), mib(f.SSHIdleRSSKiB), mib(goalIdleKiB), verdict(f.IdleRSSKiB <= goalIdleKiB))
	fmt.Fprintf(tw, "resident memory, %d idle connections\t%s\t\t\t≤ %s: %s\t\n", f.Conns, mib(f.ConnsRSSKiB), mib(goalConnsKiB), verdict(f.ConnsRSSKiB <= goalConnsKiB))
	fmt.Fprintf(tw, "exec to first HELLO, median of %d\t%s\t\t\t< %v: %s\t\n", len(f.Ready), ms(f.ReadyMedian), goalReady, verdict(f.ReadyMedian < goalReady))
	fmt.Fprintf(tw, "the same with %d audit records, median of %d\t%s\t\t\t< %v: %s\t\n", f.ReadyLogRecords, len(f.ReadyLog), ms(f.ReadyLogMedian),
		goalReady, verdict(f.ReadyLogMedian < goalReady))
	tw.Flush()

	if len(f.Verify) > 0 {
		fmt.Fprintf(w, "\ngrant verification, %s:\n", f.VerifyMethod)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "blocks\tgrant.Verify\ted25519.Verify × blocks\toverhead\tgoal\t")
		for _, r := range f.Verify {
			fmt.Fprintf(tw, "%d\t%.1f µs\t%.1f µs\t%.1f %%\t≤ %.0f %%: %s\t\n", r.Blocks, r.GrantNs/1e3, r.Ed25519Ns/1e3, r.OverheadPct,
				goalVerifyOverhead, verdict(r.OverheadPct <= goalVerifyOverhead))
		}
		tw.Flush()
	}
	fmt.Fprintf(w, "\nrequests: parley-keyd %d in sequence, %d in %v with %d clients; ssh-agent %d in sequence, %d in %v\n",
		f.KeydLatency.N, f.KeydThroughput.Requests, f.KeydThroughput.Elapsed.Round(time.Millisecond), f.KeydThroughput.Clients,
		f.SSHLatency.N, f.SSHThroughput.Requests, f.SSHThroughput.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "audit records per group commit (one write and fsync) with %d clients: %.1f\n", f.KeydThroughput.Clients, f.AuditBatch)
	fmt.Fprintf(w, "ready times: %v\n", f.Ready)
	fmt.Fprintf(w, "resident memory with %d idle connections, first and second time: %v KiB\n", f.Conns, f.ConnsRounds)
	fmt.Fprintf(w, "audit log after the run: %s\n", f.AuditRecords)
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
func mib(kib int) string        { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }
