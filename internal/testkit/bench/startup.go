package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/keystore"
)

// Start-up against the length of the audit log (issue 12): the daemon reads
// the last checkpoint of its log and the records after it, so its time from
// exec to the first HELLO and its idle memory must not grow with the log.
// Goal: under 50 ms and under 15 MB at a million records.

// startupRow is the daemon's start-up with an audit log of Records records.
type startupRow struct {
	Records     int
	Bytes       int64
	Segments    int
	Generate    time.Duration // writing the log through audit.Log, for the record
	Ready       []time.Duration
	ReadyMedian time.Duration
	RSSKiB      []int // idle, right after the first HELLO of each start
	RSSMedian   int
	// ReadBytes is what the daemon had read through read(2) when it
	// answered its first HELLO (rchar of /proc/PID/io: the audit log, its
	// configuration and policy, the key): unlike a time, it does not
	// depend on what else the machine does.
	ReadBytes []int
}

// parseSizes reads -startup: record counts separated by commas.
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(strings.ReplaceAll(f, "_", ""))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-startup: %q is not a record count", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// measureStartup makes a state folder for each size and writes an audit
// log of that many records into it with the state's own principal key (as
// the daemon would have). Then it starts the daemon runs times on each, the
// sizes in turn, so that the load of the machine falls on all alike; the
// smallest log is the floor the others compare with.
func measureStartup(bin, dir string, sizes []int, runs int) ([]startupRow, error) {
	rows := make([]startupRow, len(sizes))
	states := make([][2]string, len(sizes))
	for i, n := range sizes {
		sub := filepath.Join(dir, fmt.Sprintf("startup-%d", n))
		if err := os.Mkdir(sub, 0o700); err != nil {
			return nil, err
		}
		defer os.RemoveAll(sub) // a million records take half a gigabyte
		state, sock, err := initState(bin, sub)
		if err != nil {
			return nil, err
		}
		states[i] = [2]string{state, sock}
		step("start-up: writing an audit log of %d records", n)
		rows[i].Records = n
		t0 := time.Now()
		if err := writeLog(state, n); err != nil {
			return nil, err
		}
		rows[i].Generate = time.Since(t0)
		segs, err := audit.Segments(filepath.Join(state, "audit.log"))
		if err != nil {
			return nil, err
		}
		rows[i].Segments = len(segs)
		for _, s := range segs {
			if fi, err := os.Stat(s.Path); err == nil {
				rows[i].Bytes += fi.Size()
			}
		}
	}
	step("start-up: %d starts on each log, in turn", runs)
	for run := 0; run < runs; run++ {
		for i := range sizes {
			row := &rows[i]
			d, ready, err := startDaemon(bin, states[i][0], states[i][1])
			if err != nil {
				return nil, err
			}
			pid := d.cmd.Process.Pid
			kib, err := rssKiB(pid)
			var read int
			if err == nil {
				read, err = procIO(pid, "rchar")
			}
			if serr := d.stop(); err == nil {
				err = serr
			}
			if err != nil {
				return nil, err
			}
			row.Ready = append(row.Ready, ready)
			row.RSSKiB = append(row.RSSKiB, kib)
			row.ReadBytes = append(row.ReadBytes, read)
		}
	}
	for i := range rows {
		r := slices.Clone(rows[i].Ready)
		slices.Sort(r)
		rows[i].ReadyMedian = r[len(r)/2]
		k := slices.Clone(rows[i].RSSKiB)
		slices.Sort(k)
		rows[i].RSSMedian = k[len(k)/2]
	}
	return rows, nil
}

// procIO reads a field of /proc/PID/io.
func procIO(pid int, field string) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if name, v, ok := strings.Cut(line, ": "); ok && name == field {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("/proc/%d/io has no %s", pid, field)
}

// writeLog appends n issue records of a grant's size to the state's audit
// log from many goroutines, so that they commit in large groups.
func writeLog(state string, n int) error {
	signer, err := keystore.Load(state, func() ([]byte, error) { return nil, fmt.Errorf("the bench key is not encrypted") })
	if err != nil {
		return err
	}
	defer signer.Close()
	l, err := audit.Options{Signer: signer}.Open(filepath.Join(state, "audit.log"))
	if err != nil {
		return err
	}
	caveats := json.RawMessage(`[{"svc":["cal.example"]},{"can":["calendar.*"]},{"exp":1790003600}]`)
	const workers = 1024
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				_, err := l.Append(audit.Record{Kind: audit.KindIssue, RequestID: fmt.Sprintf("r_%08d", i),
					Caller: &audit.Caller{UID: 1000, GID: 1000, PID: 4242, User: "bot", Exe: "/usr/bin/agent"},
					Holder: "ed25519:gTl3Dqh9F19Wo1Rmw0x-zMuNipG07jeiXfYPW4_Js5Q", Requested: caveats, Issued: caveats,
					Decision: "auto", DecidedBy: &audit.Decider{Rule: "calendar-auto"},
					GrantID: "WudMMrIw5wfkNGVoyUdJfcc-nQwOTFwjH9w4DwaUIKc", Expiry: 1790003600})
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		l.Close()
		return err
	}
	return l.Close()
}

func reportStartup(w io.Writer, rows []startupRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nstart-up against the audit log's length (goal at a million records: < %v and ≤ %s):\n", goalReady, mib(goalIdleKiB))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "records\tsegments\tsize\texec to first HELLO, median\tread by then\tidle resident memory, median\tstarts\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%d\t%.0f MB\t%s\t%.0f KiB\t%s\t%d\t\n", r.Records, r.Segments, float64(r.Bytes)/1e6, ms(r.ReadyMedian),
			float64(slices.Max(r.ReadBytes))/1024, mib(r.RSSMedian), len(r.Ready))
	}
	tw.Flush()
	first, last := rows[0], rows[len(rows)-1]
	fmt.Fprintf(w, "at %d records: %s; %.2fx the time and %.2fx the bytes read of %d records in the same run\n", last.Records,
		verdict(last.ReadyMedian < goalReady && last.RSSMedian <= goalIdleKiB),
		float64(last.ReadyMedian)/float64(first.ReadyMedian), float64(slices.Max(last.ReadBytes))/float64(slices.Max(first.ReadBytes)), first.Records)
	for _, r := range rows {
		fmt.Fprintf(w, "ready times with %d records: %v\n", r.Records, r.Ready)
	}
}
