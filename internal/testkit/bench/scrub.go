package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/audit"
)

// The scrub's cost (issue 22): behind its fast start the daemon reads its
// whole audit log again at a bounded rate. At a million records this
// measures, on the real daemon over its socket: the start-up (exec to the
// first HELLO, which must stay under 50 ms), the scrub's wall time, CPU and
// bytes read with nothing else to do, and the issue path's latency while
// the scrub runs next to the same right after it ended, in rounds, with
// medians.

type scrubRound struct {
	Ready      time.Duration   // exec to first HELLO
	Wall       time.Duration   // from the scrub's first read to its last
	CPU        time.Duration   // the daemon's CPU time meanwhile
	Read       int64           // bytes the daemon read meanwhile (rchar)
	During     latency         // GRANT in sequence while the scrub runs
	After      latency         // and right after it ended
	ReadyLoad  time.Duration   // start-up of the run with the latency load
	Starts     []time.Duration // more starts of this binary, interleaved with …
	BaseStarts []time.Duration // … the -base binary's on the same log
	RateMiBps  int
	LogBytes   int64
	LogRecords int
}

// measureScrub writes a log of n records and runs rounds of two daemon
// starts on it: one left alone while it scrubs, one timed with GRANTs in
// sequence while it scrubs and after.
func measureScrub(bin, base, dir string, n, rounds, reqs, rate int) ([]scrubRound, error) {
	sub := filepath.Join(dir, "scrub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		return nil, err
	}
	defer os.RemoveAll(sub)
	state, sock, err := initState(bin, sub)
	if err != nil {
		return nil, err
	}
	// The baseline may not know scrub_rate: it starts with the
	// configuration as init wrote it.
	cfgPath := filepath.Join(state, "config.toml")
	plainCfg, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, err
	}
	rateCfg := plainCfg
	if rate > 0 {
		path := cfgPath
		b := slices.Clone(plainCfg)
		if !strings.Contains(string(b), "\n[audit]\n") {
			return nil, fmt.Errorf("%s has no [audit] table", path)
		}
		b = []byte(strings.Replace(string(b), "\n[audit]\n", fmt.Sprintf("\n[audit]\nscrub_rate = %d\n", rate), 1))
		if err := os.WriteFile(path, b, 0o640); err != nil {
			return nil, err
		}
		rateCfg = b
	}
	step("scrub: writing an audit log of %d records", n)
	if err := writeLog(state, n); err != nil {
		return nil, err
	}
	var size int64
	segs, err := audit.Segments(filepath.Join(state, "audit.log"))
	if err != nil {
		return nil, err
	}
	for _, s := range segs {
		if fi, err := os.Stat(s.Path); err == nil {
			size += fi.Size()
		}
	}
	var out []scrubRound
	for round := 0; round < rounds; round++ {
		step("scrub: round %d of %d", round+1, rounds)
		r := scrubRound{LogBytes: size, LogRecords: n, RateMiBps: rate}
		// Alone.
		d, ready, err := startDaemon(bin, state, sock)
		if err != nil {
			return nil, err
		}
		r.Ready = ready
		pid := d.cmd.Process.Pid
		read0, _ := procIO(pid, "rchar")
		cpu0, _ := cpuTime(pid)
		began, ended, read1, err := waitScrubbed(pid, read0, size)
		cpu1, _ := cpuTime(pid)
		if serr := d.stop(); err == nil {
			err = serr
		}
		if err != nil {
			return nil, fmt.Errorf("%w\n%s", err, d.stderr.String())
		}
		r.Wall, r.CPU, r.Read = ended.Sub(began), cpu1-cpu0, int64(read1-read0)
		// With the issue path in sequence.
		d, ready, err = startDaemon(bin, state, sock)
		if err != nil {
			return nil, err
		}
		r.ReadyLoad = ready
		pid = d.cmd.Process.Pid
		read0, _ = procIO(pid, "rchar")
		ops, closeOps, err := keydClients(sock, 1)
		if err == nil {
			// The scrub begins a second after the start.
			time.Sleep(audit.DefaultScrubDelay + 200*time.Millisecond)
			scrubbing := func() bool {
				now, err := procIO(pid, "rchar")
				return err == nil && int64(now-read0) < size*9/10
			}
			r.During, err = measureWhile(ops[0], scrubbing, reqs)
		}
		if err == nil {
			_, _, _, err = waitScrubbed(pid, read0, size)
		}
		if err == nil {
			// As many as were timed during the scrub.
			r.After, err = measureLatency(pid, ops[0], 50, r.During.N)
		}
		if closeOps != nil {
			closeOps()
		}
		if serr := d.stop(); err == nil {
			err = serr
		}
		if err != nil {
			return nil, fmt.Errorf("%w\n%s", err, d.stderr.String())
		}
		// Start-ups, this binary and the baseline in turn, each stopped
		// at once (before its scrub begins).
		for k := 0; k < 3; k++ {
			for _, b := range []string{bin, base} {
				if b == "" {
					continue
				}
				cfg := rateCfg
				if b == base {
					cfg = plainCfg
				}
				if err := os.WriteFile(cfgPath, cfg, 0o640); err != nil {
					return nil, err
				}
				d, ready, err := startDaemon(b, state, sock)
				if err != nil {
					return nil, err
				}
				if err := d.stop(); err != nil {
					return nil, fmt.Errorf("%w\n%s", err, d.stderr.String())
				}
				if b == bin {
					r.Starts = append(r.Starts, ready)
				} else {
					r.BaseStarts = append(r.BaseStarts, ready)
				}
			}
		}
		if err := os.WriteFile(cfgPath, rateCfg, 0o640); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}

// measureWhile times do, one at a time, while cond holds (checked every
// ten requests), at most n times.
func measureWhile(do op, cond func() bool, n int) (latency, error) {
	var d []time.Duration
	for len(d) < n && (len(d)%10 != 0 || cond()) {
		t0 := time.Now()
		if err := do(); err != nil {
			return latency{}, fmt.Errorf("request %d: %w", len(d)+1, err)
		}
		d = append(d, time.Since(t0))
	}
	if len(d) < 10 {
		return latency{}, fmt.Errorf("only %d requests while the scrub ran", len(d))
	}
	slices.Sort(d)
	return latency{N: len(d), P50: quantile(d, 0.50), P99: quantile(d, 0.99)}, nil
}

// waitScrubbed waits until the daemon pid has read size bytes more than
// read0 (the whole log), and returns when it began reading, when it was
// done, and its rchar then.
func waitScrubbed(pid, read0 int, size int64) (began, ended time.Time, read int, err error) {
	deadline := time.Now().Add(time.Duration(size/(1<<20)+60) * time.Second)
	for time.Now().Before(deadline) {
		now, err := procIO(pid, "rchar")
		if err != nil {
			return began, ended, 0, err
		}
		if began.IsZero() && now-read0 > 1<<20 {
			began = time.Now()
		}
		if int64(now-read0) >= size {
			return began, time.Now(), now, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return began, ended, 0, fmt.Errorf("the daemon did not read its whole log (%d bytes) by the deadline", size)
}

func reportScrub(w io.Writer, rows []scrubRound) {
	if len(rows) == 0 {
		return
	}
	med := func(f func(scrubRound) time.Duration) time.Duration {
		var d []time.Duration
		for _, r := range rows {
			d = append(d, f(r))
		}
		slices.Sort(d)
		return d[len(d)/2]
	}
	r0 := rows[0]
	rate := "the default rate"
	if r0.RateMiBps > 0 {
		rate = fmt.Sprintf("scrub_rate = %d MiB/s", r0.RateMiBps)
	}
	fmt.Fprintf(w, "\nthe scrub of %d records (%.0f MB), at %s, medians of %d rounds:\n", r0.LogRecords, float64(r0.LogBytes)/1e6, rate, len(rows))
	wall, cpu := med(func(r scrubRound) time.Duration { return r.Wall }), med(func(r scrubRound) time.Duration { return r.CPU })
	fmt.Fprintf(w, "  wall %s, daemon CPU %s (%.1f%% of one core), read %.0f MB\n", wall.Round(time.Millisecond), cpu.Round(time.Millisecond),
		100*float64(cpu)/float64(wall), float64(rows[len(rows)/2].Read)/1e6)
	var starts, bases []time.Duration
	for _, r := range rows {
		starts = append(append(starts, r.Ready, r.ReadyLoad), r.Starts...)
		bases = append(bases, r.BaseStarts...)
	}
	fmt.Fprintf(w, "  start-up (exec to first HELLO), median of %d: %s", len(starts), ms(median(starts)))
	if len(bases) > 0 {
		fmt.Fprintf(w, "; the -base binary's, interleaved, median of %d: %s", len(bases), ms(median(bases)))
	}
	fmt.Fprintln(w)
	during, after := med(func(r scrubRound) time.Duration { return r.During.P50 }), med(func(r scrubRound) time.Duration { return r.After.P50 })
	fmt.Fprintf(w, "  issue p50 while it runs %s, after it %s (%.2fx); p99 %s and %s\n", us(during), us(after), float64(during)/float64(after),
		us(med(func(r scrubRound) time.Duration { return r.During.P99 })), us(med(func(r scrubRound) time.Duration { return r.After.P99 })))
	var b strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&b, " [wall %s cpu %s ready %s/%s p50 %s/%s]", r.Wall.Round(time.Millisecond), r.CPU.Round(time.Millisecond),
			ms(r.Ready), ms(r.ReadyLoad), us(r.During.P50), us(r.After.P50))
	}
	fmt.Fprintf(w, "  rounds:%s\n", b.String())
}
