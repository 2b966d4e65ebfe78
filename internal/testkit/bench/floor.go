package main

import (
	"bufio"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The floor of one auto grant: the work no implementation can skip, done on
// this machine in the same run as the systems measured.
//
//	(a) a round trip over a Unix socket to another process, with frames the
//	    size of a GRANT request and its reply (NDJSON echo);
//	(b) the Ed25519 work: the agent signs its proof, the daemon checks it,
//	    signs the grant and checks its own signature (the defence against
//	    fault attacks that grant keeps for the principal key);
//	(c) one durable write done the way the audit log does it
//	    (audit.Options.Preallocate, which parley-keyd serve sets): one
//	    record-sized line written in place into a preallocated, already
//	    written file, then fdatasync (no size or extent change, so no
//	    metadata to journal), on the filesystem of the state folder.
//
// (d), for reference only: the same line appended to a file opened O_APPEND
// and fsynced, the way the log writes a segment that has the append-only
// attribute (chattr +a).

// echoEnv names the socket a re-executed bench serves echoes on.
const (
	echoEnv      = "PARLEY_BENCH_ECHO_SOCKET"
	echoReplyEnv = "PARLEY_BENCH_ECHO_REPLY"
)

// serveEcho is the echo process: for each line it reads, it writes one line
// of the reply size. It runs until killed, or returns why it cannot.
func serveEcho(sock string, replyLen int) error {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	reply := filler("r", replyLen)
	for {
		nc, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer nc.Close()
			r := bufio.NewReaderSize(nc, 16<<10)
			for {
				if _, err := r.ReadSlice('\n'); err != nil {
					return
				}
				if _, err := nc.Write(reply); err != nil {
					return
				}
			}
		}()
	}
}

// filler returns a JSON line of exactly n bytes, newline included.
func filler(id string, n int) []byte {
	b := []byte(`{"parley":1,"id":"` + id + `","pad":"`)
	for len(b) < n-3 {
		b = append(b, 'x')
	}
	return append(b, "\"}\n"...)
}

// floor holds what the floor measurements use: the echo process and its
// connection, keys and messages of realistic size, and the two files.
type floor struct {
	echo      *exec.Cmd
	nc        net.Conn
	r         *bufio.Reader
	request   []byte // a line the size of a GRANT frame
	agent     ed25519.PrivateKey
	principal ed25519.PrivateKey
	proofMsg  []byte // the size of a proof message
	payload   []byte // the size of a grant's root payload
	record    []byte // a line the size of an issue record
	appendF   *os.File
	inPlace   *os.File
	inPlaceAt int64
	inPlaceSz int64
}

// startFloor starts the echo process and opens the floor's files in dir.
// reqLen and replyLen are the sizes of a GRANT frame and its reply, recLen
// of an audit issue record, all with their newlines.
func startFloor(dir string, reqLen, replyLen, recLen int) (*floor, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "echo.sock")
	f := &floor{request: filler("1", reqLen), record: filler("a", recLen)}
	f.echo = exec.Command(self)
	f.echo.Env = append(os.Environ(), echoEnv+"="+sock, echoReplyEnv+"="+strconv.Itoa(replyLen))
	f.echo.Stderr = os.Stderr
	if err := f.echo.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if f.nc, err = net.Dial("unix", sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			f.stop()
			return nil, fmt.Errorf("echo process did not listen: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	f.r = bufio.NewReaderSize(f.nc, 16<<10)

	if _, f.agent, err = ed25519.GenerateKey(rand.Reader); err != nil {
		return nil, err
	}
	if _, f.principal, err = ed25519.GenerateKey(rand.Reader); err != nil {
		return nil, err
	}
	// The sizes of the real messages: a proof of a GRANT and a root payload
	// with the bench's three caveats.
	key := func(k ed25519.PrivateKey) string {
		return "ed25519:" + b64url.EncodeToString(k.Public().(ed25519.PublicKey))
	}
	sum := sha256.Sum256([]byte("grant object"))
	now := time.Now().Unix()
	f.proofMsg = fmt.Appendf(nil, `{"aud":%q,"target":%q,"ts":%d,"verb":"GRANT"}`, key(f.principal), b64url.EncodeToString(sum[:]), now)
	f.payload = fmt.Appendf(nil, `{"caveats":[{"svc":["cal.example"]},{"can":["calendar.find"]},{"exp":%d}],"iat":%d,"iss":%q,"nonce":"%s","sub":%q}`,
		now+3600, now, key(f.principal), strings.Repeat("n", 22), key(f.agent))

	if f.appendF, err = os.OpenFile(filepath.Join(dir, "floor-append.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND|os.O_TRUNC, 0o600); err != nil {
		f.stop()
		return nil, err
	}
	// Preallocate by writing zeros, not with fallocate: fallocate leaves
	// unwritten extents, and the first write into each would change
	// metadata that fdatasync must then journal.
	f.inPlaceSz = 16 << 20
	if f.inPlace, err = os.OpenFile(filepath.Join(dir, "floor-inplace.log"), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600); err != nil {
		f.stop()
		return nil, err
	}
	if _, err := f.inPlace.Write(make([]byte, f.inPlaceSz)); err != nil {
		f.stop()
		return nil, err
	}
	if err := f.inPlace.Sync(); err != nil {
		f.stop()
		return nil, err
	}
	return f, nil
}

func (f *floor) stop() {
	if f.nc != nil {
		f.nc.Close()
	}
	if f.echo != nil && f.echo.Process != nil {
		f.echo.Process.Kill()
		f.echo.Wait()
	}
	for _, file := range []*os.File{f.appendF, f.inPlace} {
		if file != nil {
			file.Close()
			os.Remove(file.Name())
		}
	}
}

// roundTrip is (a).
func (f *floor) roundTrip() error {
	if _, err := f.nc.Write(f.request); err != nil {
		return err
	}
	_, err := f.r.ReadSlice('\n')
	return err
}

// ed25519Work is (b), in the order of a grant: the agent signs its proof,
// the daemon checks it, signs the grant and checks that signature.
func (f *floor) ed25519Work() error {
	proof := ed25519.Sign(f.agent, f.proofMsg)
	if !ed25519.Verify(f.agent.Public().(ed25519.PublicKey), f.proofMsg, proof) {
		return fmt.Errorf("floor: proof does not verify")
	}
	sig := ed25519.Sign(f.principal, f.payload)
	if !ed25519.Verify(f.principal.Public().(ed25519.PublicKey), f.payload, sig) {
		return fmt.Errorf("floor: grant signature does not verify")
	}
	return nil
}

// appendSync is (d).
func (f *floor) appendSync() error {
	if _, err := f.appendF.Write(f.record); err != nil {
		return err
	}
	return f.appendF.Sync()
}

// inPlaceSync is (c).
func (f *floor) inPlaceSync() error {
	if f.inPlaceAt+int64(len(f.record)) > f.inPlaceSz {
		f.inPlaceAt = 0
	}
	if _, err := f.inPlace.WriteAt(f.record, f.inPlaceAt); err != nil {
		return err
	}
	f.inPlaceAt += int64(len(f.record))
	return unix.Fdatasync(int(f.inPlace.Fd()))
}

// floorRound is one round of floor requests.
type floorRound struct {
	RoundTrip, Ed25519, Write, Append dist
	// Request is (a), (b) and (c) in sequence, timed as one: its p99 is
	// the floor's p99.
	Request dist
	// Sum is the floor's p50: the sum of the parts' p50.
	Sum time.Duration
	// EchoCPU is the echo process's CPU time per round trip (a): what a
	// server spends, at the least, to be woken by a frame on a Unix socket,
	// read it and write a reply. The daemon's CPU per grant is compared
	// with its Ed25519 work plus this.
	EchoCPU time.Duration
}

// dist is a latency distribution's p50 and p99.
type dist struct{ P50, P99 time.Duration }

func distOf(d []time.Duration) dist {
	slices.Sort(d)
	return dist{quantile(d, 0.50), quantile(d, 0.99)}
}

// measureFloor runs n floor requests, each followed by an append timed on
// its own.
func (f *floor) measureFloor(n int) (floorRound, error) {
	a, b, c, req, d := make([]time.Duration, n), make([]time.Duration, n), make([]time.Duration, n), make([]time.Duration, n), make([]time.Duration, n)
	echo := f.echo.Process.Pid
	echo0, err := cpuTimeFine(echo)
	if err != nil {
		return floorRound{}, err
	}
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := f.roundTrip(); err != nil {
			return floorRound{}, err
		}
		t1 := time.Now()
		if err := f.ed25519Work(); err != nil {
			return floorRound{}, err
		}
		t2 := time.Now()
		if err := f.inPlaceSync(); err != nil {
			return floorRound{}, err
		}
		t3 := time.Now()
		if err := f.appendSync(); err != nil {
			return floorRound{}, err
		}
		a[i], b[i], c[i], req[i], d[i] = t1.Sub(t0), t2.Sub(t1), t3.Sub(t2), t3.Sub(t0), time.Since(t3)
	}
	echo1, err := cpuTimeFine(echo)
	if err != nil {
		return floorRound{}, err
	}
	r := floorRound{RoundTrip: distOf(a), Ed25519: distOf(b), Write: distOf(c), Request: distOf(req), Append: distOf(d)}
	r.Sum = r.RoundTrip.P50 + r.Ed25519.P50 + r.Write.P50
	r.EchoCPU = (echo1 - echo0) / time.Duration(n)
	return r, nil
}

// ed25519CPU is the daemon's Ed25519 work for one auto grant in thread CPU
// time, and its parts.
type ed25519CPU struct {
	// ProofCheck verifies the agent's proof, Sign signs the grant, and
	// SelfCheck verifies that signature (grant's defence against faults).
	ProofCheck, Sign, SelfCheck time.Duration
	// Grant is the sum: the daemon's Ed25519 work per auto grant.
	Grant time.Duration
}

// measureEd25519CPU times the daemon's Ed25519 operations for n grants on a
// locked thread, in thread CPU time, and returns the means.
func (f *floor) measureEd25519CPU(n int) (ed25519CPU, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	proof := ed25519.Sign(f.agent, f.proofMsg)
	agentPub := f.agent.Public().(ed25519.PublicKey)
	principalPub := f.principal.Public().(ed25519.PublicKey)
	var e ed25519CPU
	for i := 0; i < n; i++ {
		t0 := threadCPU()
		ok := ed25519.Verify(agentPub, f.proofMsg, proof)
		t1 := threadCPU()
		sig := ed25519.Sign(f.principal, f.payload)
		t2 := threadCPU()
		ok = ok && ed25519.Verify(principalPub, f.payload, sig)
		t3 := threadCPU()
		if !ok {
			return ed25519CPU{}, fmt.Errorf("floor: signature check failed")
		}
		e.ProofCheck += t1 - t0
		e.Sign += t2 - t1
		e.SelfCheck += t3 - t2
	}
	e.ProofCheck /= time.Duration(n)
	e.Sign /= time.Duration(n)
	e.SelfCheck /= time.Duration(n)
	e.Grant = e.ProofCheck + e.Sign + e.SelfCheck
	return e, nil
}

// threadCPU returns the CPU time the calling OS thread has used.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		panic(err)
	}
	return time.Duration(ts.Nano())
}
