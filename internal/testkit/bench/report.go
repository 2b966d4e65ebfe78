package main

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// Goals of the performance issues, checked by report.
const (
	goalP50Floor       = 1.3  // issue p50 at most this times the floor's p50
	goalP99Floor       = 2.0  // issue p99 at most this times the floor's p99
	goalCPUEd25519     = 1.5  // daemon CPU per auto grant at most this times its Ed25519 work
	goalClientCPU      = 1.0  // client.Client's CPU per request at most this times the protocol client's
	goalVerifyOverhead = 15.0 // percent over the bare signature checks at most
	goalIdleKiB        = 15 * 1024
	goalConnsKiB       = 64 * 1024
	goalReady          = 50 * time.Millisecond
)

// summary holds the medians over the rounds (with their ranges) that the
// report prints; times in microseconds.
type summary struct {
	// The floor's parts, p50 (RoundTrip, Ed25519 and Write in wall time
	// within the floor requests; Append for reference).
	RoundTrip, Ed25519, Write, Append spread
	WriteP99, AppendP99               spread
	// Floor is the floor's p50, the sum of the parts' p50; FloorP99 the
	// p99 of the floor requests.
	Floor, FloorP99, FloorRequestP50 spread
	// The daemon's Ed25519 work per grant in thread CPU time, and parts.
	Ed25519CPU, ProofCheck, Sign, SelfCheck spread
	Systems                                 []systemSummary
}

type systemSummary struct {
	Name   string
	Grants bool
	// Latency of one client in sequence, and its ratios to the floor.
	P50, P99, P50Floor, P99Floor spread
	// Throughput with the clients of the run, and its ratio to ssh-agent's.
	PerSec, PerSecSSH spread
	// CPU per request of the server and this process (the clients), with
	// one client and with many.
	ServerCPU1, ClientCPU1, ServerCPUN, ClientCPUN spread
	// The server's CPU per grant over its Ed25519 work, with one client
	// and with many.
	CPUEd1, CPUEdN spread
	// ClientCPUDocs is ClientCPU1 over the protocol client's.
	ClientCPUDocs spread
}

func summarize(f *Figures) summary {
	rs := f.Rounds
	us := func(get func(r *round) time.Duration) spread {
		return spreadOf(rs, func(r *round) float64 { return micros(get(r)) })
	}
	s := summary{
		RoundTrip:       us(func(r *round) time.Duration { return r.Floor.RoundTrip.P50 }),
		Ed25519:         us(func(r *round) time.Duration { return r.Floor.Ed25519.P50 }),
		Write:           us(func(r *round) time.Duration { return r.Floor.Write.P50 }),
		WriteP99:        us(func(r *round) time.Duration { return r.Floor.Write.P99 }),
		Append:          us(func(r *round) time.Duration { return r.Floor.Append.P50 }),
		AppendP99:       us(func(r *round) time.Duration { return r.Floor.Append.P99 }),
		Floor:           us(func(r *round) time.Duration { return r.Floor.Sum }),
		FloorRequestP50: us(func(r *round) time.Duration { return r.Floor.Request.P50 }),
		FloorP99:        us(func(r *round) time.Duration { return r.Floor.Request.P99 }),
		Ed25519CPU:      us(func(r *round) time.Duration { return r.Ed25519.Grant }),
		ProofCheck:      us(func(r *round) time.Duration { return r.Ed25519.ProofCheck }),
		Sign:            us(func(r *round) time.Duration { return r.Ed25519.Sign }),
		SelfCheck:       us(func(r *round) time.Duration { return r.Ed25519.SelfCheck }),
	}
	ratio := func(a, b time.Duration) float64 {
		if b == 0 {
			return 0
		}
		return float64(a) / float64(b)
	}
	for _, name := range f.Systems {
		lat := func(get func(l latency) time.Duration) spread {
			return us(func(r *round) time.Duration { return get(r.Latency[name]) })
		}
		thr := func(get func(t throughput) time.Duration) spread {
			return us(func(r *round) time.Duration { return get(r.Throughput[name]) })
		}
		grants := slices.Contains(f.GrantSystems, name)
		ss := systemSummary{
			Name: name, Grants: grants,
			P50:        lat(func(l latency) time.Duration { return l.P50 }),
			P99:        lat(func(l latency) time.Duration { return l.P99 }),
			ServerCPU1: lat(func(l latency) time.Duration { return l.ServerCPU }),
			ClientCPU1: lat(func(l latency) time.Duration { return l.ClientCPU }),
			ServerCPUN: thr(func(t throughput) time.Duration { return t.ServerCPU }),
			ClientCPUN: thr(func(t throughput) time.Duration { return t.ClientCPU }),
			PerSec:     spreadOf(rs, func(r *round) float64 { return r.Throughput[name].PerSec }),
			PerSecSSH: spreadOf(rs, func(r *round) float64 {
				if ssh := r.Throughput[sysSSH].PerSec; ssh > 0 {
					return r.Throughput[name].PerSec / ssh
				}
				return 0
			}),
			P50Floor: spreadOf(rs, func(r *round) float64 { return ratio(r.Latency[name].P50, r.Floor.Sum) }),
			P99Floor: spreadOf(rs, func(r *round) float64 { return ratio(r.Latency[name].P99, r.Floor.Request.P99) }),
		}
		if grants {
			ss.CPUEd1 = spreadOf(rs, func(r *round) float64 { return ratio(r.Latency[name].ServerCPU, r.Ed25519.Grant) })
			ss.CPUEdN = spreadOf(rs, func(r *round) float64 { return ratio(r.Throughput[name].ServerCPU, r.Ed25519.Grant) })
			ss.ClientCPUDocs = spreadOf(rs, func(r *round) float64 {
				return ratio(r.Latency[name].ClientCPU, r.Latency[sysKeydDocs].ClientCPU)
			})
		}
		s.Systems = append(s.Systems, ss)
	}
	return s
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// fmtUs prints a spread of microseconds: "512 µs (498–530)".
func fmtUs(s spread) string {
	return fmt.Sprintf("%.0f µs (%.0f–%.0f)", s.Median, s.Min, s.Max)
}

// fmtX prints a spread of ratios: "1.52× (1.48–1.60)".
func fmtX(s spread) string {
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", s.Median, s.Min, s.Max)
}

func report(w io.Writer, f *Figures) {
	s := &f.Summary
	fmt.Fprintf(w, "parley-keyd bench: %s %s, %d CPUs (%s), state folder on %s, %s\n", f.Env.Go, f.Env.OS, f.Env.CPUs, f.Env.CPU, f.Env.FS, f.Env.Time)
	fmt.Fprintf(w, "%d rounds, interleaved; each figure is the median over the rounds (min–max)\n\n", len(f.Rounds))

	fmt.Fprintf(w, "floor of one auto grant, measured in this run:\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "(a) NDJSON echo round trip to another process, %d B out, %d B back\tp50 %s\t\n", f.RequestBytes, f.ReplyBytes, fmtUs(s.RoundTrip))
	fmt.Fprintf(tw, "(b) Ed25519: proof signed, proof checked, grant signed, grant checked\tp50 %s\t\n", fmtUs(s.Ed25519))
	fmt.Fprintf(tw, "(c) %d B in place into a preallocated file + fdatasync (as the audit log writes)\tp50 %s\tp99 %s\n", f.RecordBytes, fmtUs(s.Write), fmtUs(s.WriteP99))
	fmt.Fprintf(tw, "floor p50 = (a)+(b)+(c)\t%s\t\n", fmtUs(s.Floor))
	fmt.Fprintf(tw, "floor request, (a) (b) (c) in sequence\tp50 %s\tp99 %s\n", fmtUs(s.FloorRequestP50), fmtUs(s.FloorP99))
	fmt.Fprintf(tw, "(d) for reference: append + fsync (an append-only segment)\tp50 %s\tp99 %s\n", fmtUs(s.Append), fmtUs(s.AppendP99))
	tw.Flush()

	fmt.Fprintf(w, "\nlatency, 1 client in sequence:\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\tp50\tp99\tp50 / floor\tp99 / floor p99\tgoal\t")
	for _, ss := range s.Systems {
		goal := ""
		if ss.Grants {
			goal = fmt.Sprintf("≤ %.1f× and ≤ %.0f×: %s", goalP50Floor, goalP99Floor,
				verdict(ss.P50Floor.Median <= goalP50Floor && ss.P99Floor.Median <= goalP99Floor))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", ss.Name, fmtUs(ss.P50), fmtUs(ss.P99), fmtX(ss.P50Floor), fmtX(ss.P99Floor), goal)
	}
	tw.Flush()

	fmt.Fprintf(w, "\nthroughput, %d clients each on its own connection:\n", f.Rounds[0].Throughput[sysKeyd].Clients)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\trequests/s\tto ssh-agent\t")
	for _, ss := range s.Systems {
		fmt.Fprintf(tw, "%s\t%.0f/s (%.0f–%.0f)\t%s\t\n", ss.Name, ss.PerSec.Median, ss.PerSec.Min, ss.PerSec.Max, fmtX(ss.PerSecSSH))
	}
	tw.Flush()

	fmt.Fprintf(w, "\nCPU per request (server from /proc/PID/stat, clients: this process, getrusage):\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\tserver, 1 client\tclient, 1 client\tserver, many\tclients, many\t")
	for _, ss := range s.Systems {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", ss.Name, fmtUs(ss.ServerCPU1), fmtUs(ss.ClientCPU1), fmtUs(ss.ServerCPUN), fmtUs(ss.ClientCPUN))
	}
	tw.Flush()

	fmt.Fprintf(w, "\nthe daemon's Ed25519 work per auto grant, thread CPU: %s = proof check %s + signature %s + check of the signature %s\n",
		fmtUs(s.Ed25519CPU), fmtUs(s.ProofCheck), fmtUs(s.Sign), fmtUs(s.SelfCheck))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\tdaemon CPU per grant / Ed25519 work, 1 client\tmany clients\tgoal\tclient CPU / protocol client's\tgoal\t")
	for _, ss := range s.Systems {
		if !ss.Grants {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t≤ %.1f×: %s\t%s\t≤ %.1f×: %s\t\n", ss.Name, fmtX(ss.CPUEd1), fmtX(ss.CPUEdN),
			goalCPUEd25519, verdict(ss.CPUEdN.Median <= goalCPUEd25519), fmtX(ss.ClientCPUDocs), goalClientCPU, verdict(ss.ClientCPUDocs.Median <= goalClientCPU))
	}
	tw.Flush()

	fmt.Fprintf(w, "\nmemory and start-up:\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "resident memory, idle\t%s\tssh-agent %s\t≤ %s: %s\t\n", mib(f.IdleRSSKiB), mib(f.SSHIdleRSSKiB), mib(goalIdleKiB), verdict(f.IdleRSSKiB <= goalIdleKiB))
	fmt.Fprintf(tw, "resident memory, %d idle connections\t%s\t\t≤ %s: %s\t\n", f.Conns, mib(f.ConnsRSSKiB), mib(goalConnsKiB), verdict(f.ConnsRSSKiB <= goalConnsKiB))
	fmt.Fprintf(tw, "exec to first HELLO, median of %d\t%s\t\t< %v: %s\t\n", len(f.Ready), ms(f.ReadyMedian), goalReady, verdict(f.ReadyMedian < goalReady))
	fmt.Fprintf(tw, "the same with %d audit records, median of %d\t%s\t\t< %v: %s\t\n", f.ReadyLogRecords, len(f.ReadyLog), ms(f.ReadyLogMedian),
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
	if len(f.Compare) > 0 {
		fmt.Fprintf(w, "\ngrant.Verify with a BlockCache, and a JWT chain of the same shape (golang-jwt, EdDSA), thread CPU per chain:\n")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "blocks\tcold (no cache)\tcache missing\twarm cache\tJWT chain\tJWT / cold\tcold / warm\t")
		for _, r := range f.Compare {
			fmt.Fprintf(tw, "%d\t%.1f µs\t%.1f µs\t%.1f µs\t%.1f µs\t%.2f×\t%.1f×\t\n", r.Blocks, r.Cold/1e3, r.Miss/1e3, r.Warm/1e3, r.JWT/1e3,
				r.JWT/r.Cold, r.Cold/r.Warm)
		}
		tw.Flush()
	}
	if m := f.SignCheck; len(m) > 0 {
		fmt.Fprintf(w, "\nsigning a grant payload, thread CPU: bare %.1f µs, verified after signing %.1f µs, signed twice and compared %.1f µs; MakeProof %.1f µs\n",
			m["sign"]/1e3, m["sign+verify"]/1e3, m["sign-twice"]/1e3, m["makeproof"]/1e3)
	}

	fmt.Fprintf(w, "\nper round: %d requests in sequence and %v of %d clients per system\n", f.Rounds[0].Latency[sysKeyd].N,
		f.Rounds[0].Throughput[sysKeyd].Elapsed.Round(100*time.Millisecond), f.Rounds[0].Throughput[sysKeyd].Clients)
	fmt.Fprintf(w, "audit records per group commit (one write and fsync), client.Client throughput runs: %.1f\n", f.AuditBatch)
	fmt.Fprintf(w, "ready times: %v\n", f.Ready)
	fmt.Fprintf(w, "resident memory with %d idle connections, first and second time: %v KiB\n", f.Conns, f.ConnsRounds)
	fmt.Fprintf(w, "audit log after the run: %s\n", f.AuditRecords)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
func mib(kib int) string        { return fmt.Sprintf("%.1f MiB", float64(kib)/1024) }

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", micros(d)) }
