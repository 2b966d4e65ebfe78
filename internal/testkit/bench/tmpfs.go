package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"
)

// The daemon on tmpfs: -tmpfs DIR (by default /dev/shm) runs this daemon,
// and with -base the baseline too, a second time with its state folder on
// tmpfs, where fsync and fdatasync return at once, and measures it with the
// protocol client in every round next to the daemon on disk. The daemon's
// durable write is then the difference of the two p50s within a round,
// compared with the floor's own durable write (c) of the same round
// (issue 25): the cost of everything the daemon does around its write
// besides the write itself.

// The tmpfs twins of the disk systems.
const (
	sysTmpfs     = "parley-keyd on tmpfs, protocol client"
	sysBaseTmpfs = "baseline on tmpfs, protocol client"
)

// goalWrite: the daemon's durable write at most this times the floor's.
const goalWrite = 1.2

// tmpfsTwins pairs each disk system with its twin on tmpfs.
var tmpfsTwins = [][2]string{{sysKeydDocs, sysTmpfs}, {sysBaseDocs, sysBaseTmpfs}}

func init() {
	extraSystems = append(extraSystems, func(e *benchEnv) ([]*system, error) {
		if e.tmpfs == "" {
			return nil, nil
		}
		var st unix.Statfs_t
		if err := unix.Statfs(e.tmpfs, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
			return nil, fmt.Errorf("-tmpfs %s is not a tmpfs mount (fix: pass a tmpfs folder, or -tmpfs '' for none)", e.tmpfs)
		}
		top, err := os.MkdirTemp(e.tmpfs, "parley-bench-")
		if err != nil {
			return nil, err
		}
		var out []*system
		var stops []func()
		stopAll := func() {
			for _, s := range stops {
				s()
			}
			os.RemoveAll(top)
		}
		for _, d := range []struct{ name, bin string }{{sysTmpfs, e.bin}, {sysBaseTmpfs, e.base}} {
			if d.bin == "" {
				continue
			}
			dir := filepath.Join(top, fmt.Sprint(len(out)))
			if err := os.Mkdir(dir, 0o700); err != nil {
				stopAll()
				return nil, err
			}
			state, sock, err := initState(d.bin, dir)
			if err != nil {
				stopAll()
				return nil, fmt.Errorf("%s: %w", d.name, err)
			}
			dm, _, err := startDaemon(d.bin, state, sock)
			if err != nil {
				stopAll()
				return nil, fmt.Errorf("%s: %w", d.name, err)
			}
			stops = append(stops, func() { dm.stop() })
			out = append(out, &system{name: d.name, pid: dm.cmd.Process.Pid, grants: true,
				connect: func(n int) ([]op, func(), error) { return rawClients(sock, n) }})
		}
		out[len(out)-1].stop = stopAll
		return out, nil
	})
}

// writeOf is a disk system's durable write in round r: its p50 less its
// tmpfs twin's. Zero when the twin was not measured.
func writeOf(r *round, disk, twin string) time.Duration {
	if r.Latency[twin].N == 0 || r.Latency[disk].N == 0 {
		return 0
	}
	return r.Latency[disk].P50 - r.Latency[twin].P50
}

// reportWrite prints the daemon's durable write against the floor's, and
// its CPU per grant against the floor's CPU (Ed25519 work and the echo
// server's CPU per round trip).
func reportWrite(w io.Writer, f *Figures) {
	if len(f.Rounds) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "\nthe daemon's durable write: p50 on disk less p50 on tmpfs (protocol client), against the floor's write (c), per round:\n")
	fmt.Fprintln(tw, "\tdaemon's write\tfloor's write (c)\tdaemon's / floor's\tgoal\tp50 on tmpfs\t")
	for _, pair := range tmpfsTwins {
		disk, twin := pair[0], pair[1]
		if f.Rounds[0].Latency[twin].N == 0 {
			continue
		}
		wr := spreadOf(f.Rounds, func(r *round) float64 { return micros(writeOf(r, disk, twin)) })
		ratio := spreadOf(f.Rounds, func(r *round) float64 {
			return float64(writeOf(r, disk, twin)) / float64(r.Floor.Write.P50)
		})
		tp50 := spreadOf(f.Rounds, func(r *round) float64 { return micros(r.Latency[twin].P50) })
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t≤ %.1f×: %s\t%s\t\n", disk, fmtUs(wr), fmtUs(f.Summary.Write), fmtX(ratio), goalWrite, verdict(ratio.Median <= goalWrite), fmtUs(tp50))
	}
	tw.Flush()

	fmt.Fprintf(w, "\nthe daemon's CPU per grant, many clients, against its Ed25519 work + the echo server's CPU per round trip (%s + %s):\n",
		fmtUs(f.Summary.Ed25519CPU), fmtUs(spreadOf(f.Rounds, func(r *round) float64 { return micros(r.Floor.EchoCPU) })))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\tserver CPU per grant\t/ (Ed25519 + echo)\tgoal\t")
	for _, name := range f.GrantSystems {
		cpu := spreadOf(f.Rounds, func(r *round) float64 { return micros(r.Throughput[name].ServerCPU) })
		ratio := spreadOf(f.Rounds, func(r *round) float64 {
			return float64(r.Throughput[name].ServerCPU) / float64(r.Ed25519.Grant+r.Floor.EchoCPU)
		})
		fmt.Fprintf(tw, "%s\t%s\t%s\t≤ %.1f×: %s\t\n", name, fmtUs(cpu), fmtX(ratio), goalCPUFloor, verdict(ratio.Median <= goalCPUFloor))
	}
	tw.Flush()
}

// goalCPUFloor: the daemon's CPU per grant under many clients at most this
// times its Ed25519 work plus the echo server's CPU per round trip.
const goalCPUFloor = 1.3
