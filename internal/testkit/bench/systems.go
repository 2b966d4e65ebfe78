package main

import (
	"context"
	"fmt"
	"runtime/pprof"
	"slices"
	"time"
)

// system is one server and one kind of client that the bench measures over
// a socket in every round: the latency of one client in sequence and the
// throughput of many clients, each on its own connection, with the CPU time
// of the server process and of this one.
//
// The bench's own systems are parley-keyd driven by client.Client, the same
// daemon driven by a client written from docs/protocol.md, and ssh-agent.
// Another file adds systems by appending to extraSystems (a daemon with
// another signer backend, say); their rows appear in every table.
type system struct {
	// name labels the system's rows.
	name string
	// pid is the server process whose CPU time is read.
	pid int
	// grants says that each request is an auto GRANT, so that its latency
	// is compared with the floor and its server CPU with the Ed25519 work.
	grants bool
	// connect opens n clients; the first one also runs the latency phase.
	connect func(n int) ([]op, func(), error)
	// stop, if set, ends the server when the bench ends.
	stop func()
	// groups, if set, returns how many group syncs the server has done
	// and how many requests they made durable (the floor server).
	groups func() (groups, records int64, err error)

	ops   []op
	close func()
}

// benchEnv is what a system needs to start its own server.
type benchEnv struct {
	// bin is the parley-keyd binary, dir a folder for state and sockets
	// on the filesystem being measured.
	bin, dir string
	clients  int
	// base is the baseline's parley-keyd binary (-base), or "".
	base string
	// tmpfs is a tmpfs folder for the daemons' twins on tmpfs (-tmpfs),
	// or "".
	tmpfs string
}

// extraSystems start more systems to measure, after the bench's own. Each
// returns its systems, or an error that stops the bench.
var extraSystems []func(e *benchEnv) ([]*system, error)

// round is what one round measured, by system name.
type round struct {
	Floor floorRound
	// Ed25519 is the daemon's Ed25519 work per grant, in thread CPU time.
	Ed25519    ed25519CPU
	Latency    map[string]latency
	Throughput map[string]throughput
}

// runRounds measures the floor and every system, interleaved, rounds times.
func runRounds(systems []*system, fl *floor, rounds, n int, d time.Duration) ([]round, error) {
	var out []round
	for i := 0; i < rounds; i++ {
		step("round %d of %d: floor, then %d requests in sequence and %v of %d clients per system", i+1, rounds, n, d, len(systems[0].ops))
		r := round{Latency: map[string]latency{}, Throughput: map[string]throughput{}}
		var err error
		if r.Floor, err = fl.measureFloor(n); err != nil {
			return nil, err
		}
		if r.Ed25519, err = fl.measureEd25519CPU(n / 4); err != nil {
			return nil, err
		}
		// Each round starts with another system, so that none is always
		// measured first, right after the floor, or last.
		order := append(slices.Clone(systems[i%len(systems):]), systems[:i%len(systems)]...)
		// The labels tell the systems' clients apart in a -cpuprofile.
		for _, s := range order {
			pprof.Do(context.Background(), pprof.Labels("system", s.name, "phase", "latency"), func(context.Context) {
				r.Latency[s.name], err = measureLatency(s.pid, s.ops[0], 0, n)
			})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
		}
		for _, s := range order {
			var g0, n0, g1, n1 int64
			if s.groups != nil {
				if g0, n0, err = s.groups(); err != nil {
					return nil, fmt.Errorf("%s: %w", s.name, err)
				}
			}
			pprof.Do(context.Background(), pprof.Labels("system", s.name, "phase", "throughput"), func(context.Context) {
				r.Throughput[s.name], err = measureThroughput(s.pid, s.ops, d)
			})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
			if s.groups != nil {
				if g1, n1, err = s.groups(); err != nil {
					return nil, fmt.Errorf("%s: %w", s.name, err)
				}
				if g1 > g0 {
					t := r.Throughput[s.name]
					t.PerGroup = float64(n1-n0) / float64(g1-g0)
					r.Throughput[s.name] = t
				}
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// spread is the median of a figure over the rounds and its range.
type spread struct{ Median, Min, Max float64 }

func spreadOf(rounds []round, f func(r *round) float64) spread {
	v := make([]float64, len(rounds))
	for i := range rounds {
		v[i] = f(&rounds[i])
	}
	slices.Sort(v)
	if len(v) == 0 {
		return spread{}
	}
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return spread{m, v[0], v[len(v)-1]}
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
