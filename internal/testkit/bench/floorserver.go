package main

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"
)

// The floor server: the CPU floor of an auto grant, durable write included
// (issue 25). A re-executed bench that does, per request, only what no
// grant daemon can skip, the cheapest way known in Go:
//
//   - read one frame of a GRANT's size from a Unix socket;
//   - the daemon's Ed25519 work: check the agent's proof, sign the grant,
//     check that signature;
//   - put a record of an issue record's size in the queue of one writer
//     goroutine, which takes every record queued, writes them with one
//     pwrite in place into a file of zeros written and fsynced beforehand
//     (the floor's write (c), for a group) and calls fdatasync once for
//     the group, so that requests that arrive while a sync runs share the
//     next one, as the daemon's group commit does;
//   - after the sync, the writer itself writes each request's reply (a
//     frame of a reply's size): no goroutine is woken to reply.
//
// Its CPU per request under the bench's clients is what any Go daemon doing
// this work pays at the least: the wake-ups of a socket server, the Ed25519
// work, and, per group, the writer's wake-up, its blocking fdatasync (with
// the runtime's hand-off of its processor while the thread is blocked, which
// no Go program avoids), and the kernel's work for the sync. It leaves out
// all the daemon could avoid: JSON, policy, the audit record's hash chain,
// one wake-up per waiting request. In sequence every request is its own
// group.

const (
	floorServerEnv      = "PARLEY_BENCH_FLOOR_SERVER"
	floorServerFileEnv  = "PARLEY_BENCH_FLOOR_FILE"
	floorServerSizesEnv = "PARLEY_BENCH_FLOOR_SIZES"
	floorServerGroupEnv = "PARLEY_BENCH_FLOOR_GROUP"
)

// sysFloorServer names the floor server's rows.
const sysFloorServer = "floor server (Ed25519 + group fdatasync)"

// floorServerFileSize is the size of the floor server's file of zeros.
const floorServerFileSize = 16 << 20

// floorWaiter is a request whose record is queued: its reply goes to nc
// once the record is on disk.
type floorWaiter struct{ nc net.Conn }

// floorWriter is the floor server's one writer.
type floorWriter struct {
	f       *os.File
	at      int64
	record  []byte
	reply   []byte
	mu      sync.Mutex
	queue   []floorWaiter
	wake    chan struct{}
	scratch []byte
	// most is the most records one sync takes (-floorgroup), or 0.
	most int
	// groups and records count the syncs and the records they made
	// durable, for the bench's question "?" (floorStats).
	groups, records atomic.Int64
}

func (w *floorWriter) enqueue(nc net.Conn) {
	w.mu.Lock()
	w.queue = append(w.queue, floorWaiter{nc})
	first := len(w.queue) == 1
	w.mu.Unlock()
	if first {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

func (w *floorWriter) run() error {
	var group []floorWaiter
	for range w.wake {
		w.mu.Lock()
		if w.most > 0 && len(w.queue) > w.most {
			// The rest waits for the next sync: wake this loop again.
			group = append(group[:0], w.queue[:w.most]...)
			w.queue = append(w.queue[:0], w.queue[w.most:]...)
			select {
			case w.wake <- struct{}{}:
			default:
			}
		} else {
			group, w.queue = w.queue, group[:0]
		}
		w.mu.Unlock()
		if len(group) == 0 {
			continue
		}
		w.scratch = w.scratch[:0]
		for range group {
			w.scratch = append(w.scratch, w.record...)
		}
		if w.at+int64(len(w.scratch)) > floorServerFileSize {
			w.at = 0
		}
		if _, err := w.f.WriteAt(w.scratch, w.at); err != nil {
			return err
		}
		w.at += int64(len(w.scratch))
		if err := unix.Fdatasync(int(w.f.Fd())); err != nil {
			return err
		}
		w.groups.Add(1)
		w.records.Add(int64(len(group)))
		for _, g := range group {
			g.nc.Write(w.reply)
		}
	}
	return nil
}

// serveFloor is the floor server's process. It runs until killed, or
// returns why it cannot.
func serveFloor(sock, file string, replyLen, recLen, most int) error {
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	// Zeros written, not fallocated: see startFloor.
	if _, err := f.Write(make([]byte, floorServerFileSize)); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	w := &floorWriter{f: f, record: filler("a", recLen), reply: filler("r", replyLen), wake: make(chan struct{}, 1), most: most}
	_, agent, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	_, principal, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	// Messages of the real sizes, as the floor's (b) signs them.
	proofMsg := []byte(`{"aud":"ed25519:` + strings.Repeat("k", 43) + `","target":"` + strings.Repeat("t", 43) + `","ts":1700000000,"verb":"GRANT"}`)
	payload := []byte(`{"caveats":[{"svc":["cal.example"]},{"can":["calendar.find"]},{"exp":1700003600}],"iat":1700000000,"iss":"ed25519:` +
		strings.Repeat("k", 43) + `","nonce":"` + strings.Repeat("n", 22) + `","sub":"ed25519:` + strings.Repeat("s", 43) + `"}`)
	proof := ed25519.Sign(agent, proofMsg)
	agentPub := agent.Public().(ed25519.PublicKey)
	principalPub := principal.Public().(ed25519.PublicKey)

	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- w.run() }()
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				errc <- err
				return
			}
			go func() {
				defer nc.Close()
				r := bufio.NewReaderSize(nc, 16<<10)
				for {
					line, err := r.ReadSlice('\n')
					if err != nil {
						return
					}
					if string(line) == "?\n" {
						fmt.Fprintf(nc, "%d %d\n", w.groups.Load(), w.records.Load())
						continue
					}
					if !ed25519.Verify(agentPub, proofMsg, proof) {
						return
					}
					sig := ed25519.Sign(principal, payload)
					if !ed25519.Verify(principalPub, payload, sig) {
						return
					}
					w.enqueue(nc)
				}
			}()
		}
	}()
	return <-errc
}

// floorServer is the running floor server process.
type floorServer struct {
	cmd  *exec.Cmd
	sock string
	file string
}

// startFloorServer starts the floor server with its socket and file in dir,
// its frames and records of the sizes given, newlines included.
// most, if above 0, is the most records one sync takes.
func startFloorServer(dir string, replyLen, recLen, most int) (*floorServer, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	s := &floorServer{sock: filepath.Join(dir, "floor-server.sock"), file: filepath.Join(dir, "floor-server.log")}
	s.cmd = exec.Command(self)
	s.cmd.Env = append(os.Environ(), floorServerEnv+"="+s.sock, floorServerFileEnv+"="+s.file,
		floorServerSizesEnv+"="+strconv.Itoa(replyLen)+","+strconv.Itoa(recLen), floorServerGroupEnv+"="+strconv.Itoa(most))
	s.cmd.Stderr = os.Stderr
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		nc, err := net.Dial("unix", s.sock)
		if err == nil {
			nc.Close()
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("floor server did not listen: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}

func (s *floorServer) stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
	os.Remove(s.file)
	os.Remove(s.sock)
}

// floorServerMain runs the floor server if this process was started as one.
func floorServerMain() {
	sock := os.Getenv(floorServerEnv)
	if sock == "" {
		return
	}
	var replyLen, recLen int
	if _, err := fmt.Sscanf(os.Getenv(floorServerSizesEnv), "%d,%d", &replyLen, &recLen); err != nil {
		fmt.Fprintf(os.Stderr, "bench floor server: sizes: %v\n", err)
		os.Exit(1)
	}
	most, _ := strconv.Atoi(os.Getenv(floorServerGroupEnv))
	fmt.Fprintf(os.Stderr, "bench floor server: %v\n", serveFloor(sock, os.Getenv(floorServerFileEnv), replyLen, recLen, most))
	os.Exit(1)
}

// floorClients connects n clients to the floor server, each sending frames
// of a GRANT's size and reading the replies.
func floorClients(sock string, request []byte, n int) ([]op, func(), error) {
	var ops []op
	var conns []net.Conn
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	for i := 0; i < n; i++ {
		nc, err := net.Dial("unix", sock)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, nc)
		r := bufio.NewReaderSize(nc, 16<<10)
		ops = append(ops, func() error {
			if _, err := nc.Write(request); err != nil {
				return err
			}
			_, err := r.ReadSlice('\n')
			return err
		})
	}
	return ops, closeAll, nil
}

// reportCPUFloor prints the daemon's CPU per grant against the floor
// server's CPU per request, under many clients and in sequence.
func reportCPUFloor(w io.Writer, f *Figures) {
	if len(f.Rounds) == 0 || f.Rounds[0].Throughput[sysFloorServer].Requests == 0 {
		return
	}
	fsN := spreadOf(f.Rounds, func(r *round) float64 { return micros(r.Throughput[sysFloorServer].ServerCPU) })
	fs1 := spreadOf(f.Rounds, func(r *round) float64 { return micros(r.Latency[sysFloorServer].ServerCPU) })
	per := spreadOf(f.Rounds, func(r *round) float64 { return r.Throughput[sysFloorServer].PerGroup })
	fmt.Fprintf(w, "\nthe daemon's CPU per grant against the floor server's CPU per request (Ed25519 work, socket, one fdatasync per group; %s under %d clients with %.1f (%.1f–%.1f) requests per group, %s in sequence):\n",
		fmtUs(fsN), f.Rounds[0].Throughput[sysFloorServer].Clients, per.Median, per.Min, per.Max, fmtUs(fs1))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\tserver CPU per grant, many\t/ floor server's\tgoal\tin sequence / floor server's\t")
	for _, name := range f.GrantSystems {
		cpu := spreadOf(f.Rounds, func(r *round) float64 { return micros(r.Throughput[name].ServerCPU) })
		ratioN := spreadOf(f.Rounds, func(r *round) float64 {
			return float64(r.Throughput[name].ServerCPU) / float64(r.Throughput[sysFloorServer].ServerCPU)
		})
		ratio1 := spreadOf(f.Rounds, func(r *round) float64 {
			return float64(r.Latency[name].ServerCPU) / float64(r.Latency[sysFloorServer].ServerCPU)
		})
		fmt.Fprintf(tw, "%s\t%s\t%s\t≤ %.1f×: %s\t%s\t\n", name, fmtUs(cpu), fmtX(ratioN), goalCPUFloor, verdict(ratioN.Median <= goalCPUFloor), fmtX(ratio1))
	}
	tw.Flush()
}

// floorStats asks the floor server how many groups it has synced and how
// many records they held.
func floorStats(sock string) (groups, records int64, err error) {
	nc, err := net.Dial("unix", sock)
	if err != nil {
		return 0, 0, err
	}
	defer nc.Close()
	if _, err := nc.Write([]byte("?\n")); err != nil {
		return 0, 0, err
	}
	line, err := bufio.NewReader(nc).ReadString('\n')
	if err != nil {
		return 0, 0, err
	}
	_, err = fmt.Sscanf(line, "%d %d", &groups, &records)
	return groups, records, err
}
