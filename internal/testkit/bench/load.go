package main

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// op is one request on one client's connection.
type op func() error

// latency is the distribution of one client's requests in sequence, and the
// CPU time the server and this process (the client) spent per request.
type latency struct {
	N                    int
	P50, P99             time.Duration
	ServerCPU, ClientCPU time.Duration
}

// cpuMeter reads the CPU time of the server process and of this one.
type cpuMeter struct {
	pid                int
	server0, client0   time.Duration
	serverErr, selfErr error
}

func startCPU(pid int) *cpuMeter {
	m := &cpuMeter{pid: pid}
	m.server0, m.serverErr = cpuTime(pid)
	m.client0, m.selfErr = selfCPU()
	return m
}

// perRequest returns the CPU time each side spent per request since start.
func (m *cpuMeter) perRequest(n int64) (server, client time.Duration, err error) {
	s1, err1 := cpuTime(m.pid)
	c1, err2 := selfCPU()
	for _, err := range []error{m.serverErr, m.selfErr, err1, err2} {
		if err != nil {
			return 0, 0, err
		}
	}
	if n == 0 {
		return 0, 0, nil
	}
	return (s1 - m.server0) / time.Duration(n), (c1 - m.client0) / time.Duration(n), nil
}

func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// measureLatency runs warm requests, then n timed ones, one at a time, to
// the server process pid.
func measureLatency(pid int, do op, warm, n int) (latency, error) {
	for i := 0; i < warm; i++ {
		if err := do(); err != nil {
			return latency{}, fmt.Errorf("warm-up request %d: %w", i+1, err)
		}
	}
	d := make([]time.Duration, n)
	cpu := startCPU(pid)
	for i := range d {
		t0 := time.Now()
		if err := do(); err != nil {
			return latency{}, fmt.Errorf("request %d: %w", i+1, err)
		}
		d[i] = time.Since(t0)
	}
	server, client, err := cpu.perRequest(int64(n))
	if err != nil {
		return latency{}, err
	}
	slices.Sort(d)
	return latency{N: n, P50: quantile(d, 0.50), P99: quantile(d, 0.99), ServerCPU: server, ClientCPU: client}, nil
}

// quantile returns the nearest-rank quantile q of sorted d.
func quantile(d []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(d))+0.999999) - 1
	return d[max(0, min(i, len(d)-1))]
}

// throughput is what clients completed together in a fixed time, and the
// CPU time the server and this process spent per request meanwhile.
type throughput struct {
	Clients              int
	Requests             int64
	Elapsed              time.Duration
	PerSec               float64
	ServerCPU, ClientCPU time.Duration
	Start, End           time.Time // the counted window
	// PerGroup is the requests per group sync of a server that reports
	// it (the floor server), over the whole run with its warm-up.
	PerGroup float64 `json:",omitempty"`
}

// measureThroughput runs one goroutine per client, each issuing requests on
// its own connection back to back, for d after a short warm-up.
func measureThroughput(pid int, clients []op, d time.Duration) (throughput, error) {
	var (
		count    atomic.Int64
		counting atomic.Bool
		stop     atomic.Bool
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	for _, do := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if err := do(); err != nil {
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
					stop.Store(true)
					return
				}
				if counting.Load() {
					count.Add(1)
				}
			}
		}()
	}
	time.Sleep(d / 5) // warm-up: connections made, caches filled
	cpu := startCPU(pid)
	counting.Store(true)
	t0 := time.Now()
	time.Sleep(d)
	n := count.Load()
	elapsed := time.Since(t0)
	server, client, cpuErr := cpu.perRequest(n)
	stop.Store(true)
	wg.Wait()
	if firstErr != nil {
		return throughput{}, firstErr
	}
	if cpuErr != nil {
		return throughput{}, cpuErr
	}
	return throughput{Clients: len(clients), Requests: n, Elapsed: elapsed, PerSec: float64(n) / elapsed.Seconds(),
		ServerCPU: server, ClientCPU: client, Start: t0, End: t0.Add(elapsed)}, nil
}
