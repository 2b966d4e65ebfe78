package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testhsm"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testtransit"
	"github.com/parley-keyd/parley-keyd/keyd"
)

// signerRow is what one key backend gives: GRANT latency of one client in
// sequence and throughput with the configured clients, through a daemon
// that signs with it, the audit log fsynced as always.
type signerRow struct {
	Backend    string
	Latency    latency
	Throughput throughput
}

// signerBackend sets up one backend in a state folder: its [key] table and
// the environment the daemon needs, and a cleanup.
type signerBackend struct {
	name, kind string
	setup      func(dir string) (keyTable string, env []string, cleanup func(), err error)
}

var signerBackends = []signerBackend{
	{"file", "file", func(string) (string, []string, func(), error) { return "", nil, func() {}, nil }},
	{"pkcs11 (SoftHSM2)", "pkcs11", setupSoftHSM},
	{"transit over HTTP (test server, not OpenBao)", "transit", func(dir string) (string, []string, func(), error) { return setupTransit(dir, false) }},
	{"transit over TLS (test server, not OpenBao)", "transit", func(dir string) (string, []string, func(), error) { return setupTransit(dir, true) }},
}

func setupSoftHSM(dir string) (string, []string, func(), error) {
	tok, err := testhsm.New(dir, "parley", "4711")
	if err != nil {
		return "", nil, nil, err
	}
	pin := filepath.Join(dir, "pin")
	if err := os.WriteFile(pin, []byte("4711"), 0o600); err != nil {
		return "", nil, nil, err
	}
	table := fmt.Sprintf("\n[key]\nbackend = \"pkcs11\"\n[key.pkcs11]\nmodule = %q\ntoken = \"parley\"\npin_file = %q\nsessions = 8\n", tok.Module, pin)
	return table, []string{"SOFTHSM2_CONF=" + tok.Conf}, func() {}, nil
}

// setupTransit serves the transit engine from this process
// (internal/testkit/testtransit): the figures include its own cost, and a real
// OpenBao (storage, audit devices, policy checks) costs more.
func setupTransit(dir string, tls bool) (string, []string, func(), error) {
	srv := testtransit.New()
	if tls {
		srv = testtransit.NewTLS()
	}
	srv.AddToken("s.bench", testtransit.Token{})
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("s.bench"), 0o600); err != nil {
		srv.Close()
		return "", nil, nil, err
	}
	ca, err := srv.CAFile(dir)
	if err != nil {
		srv.Close()
		return "", nil, nil, err
	}
	table := fmt.Sprintf("\n[key]\nbackend = \"transit\"\n[key.transit]\naddresses = [%q]\nca_file = %q\ntoken_file = %q\n", srv.URL, ca, tok)
	return table, nil, srv.Close, nil
}

// measureSigners runs the GRANT load of the main figures through a daemon
// for each key backend in turn, in this one run.
func measureSigners(o options, bin, dir string) ([]signerRow, error) {
	u, err := user.Current()
	if err != nil {
		return nil, err
	}
	var rows []signerRow
	for i, b := range signerBackends {
		sub := filepath.Join(dir, fmt.Sprintf("signer-%d", i))
		if err := os.Mkdir(sub, 0o700); err != nil {
			return nil, err
		}
		table, env, cleanup, err := b.setup(sub)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.name, err)
		}
		row, err := measureSigner(o, bin, sub, u.Username, b, table, env)
		cleanup()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.name, err)
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func measureSigner(o options, bin, dir, agent string, b signerBackend, table string, env []string) (signerRow, error) {
	state, sock := filepath.Join(dir, "state"), filepath.Join(dir, "keyd.sock")
	if err := os.Mkdir(state, 0o700); err != nil {
		return signerRow{}, err
	}
	env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	args := []string{"init", "--state", state, "--config-dir", state}
	if table != "" {
		cfg := keyd.DefaultConfig(sock, agent, "") + table
		if err := os.WriteFile(filepath.Join(state, "config.toml"), []byte(cfg), 0o640); err != nil {
			return signerRow{}, err
		}
		args = append(args, "--backend", b.kind)
	} else {
		args = append(args, "--socket", sock, "--agent-user", agent)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		return signerRow{}, fmt.Errorf("parley-keyd %s: %v: %s", strings.Join(args, " "), err, out)
	}
	if err := os.WriteFile(filepath.Join(state, "policy.toml"), []byte(benchPolicy), 0o640); err != nil {
		return signerRow{}, err
	}
	d, err := startDaemonEnv(bin, state, sock, env)
	if err != nil {
		return signerRow{}, err
	}
	defer d.stop()
	step("%s: %d grants in sequence, then %d clients for %v", b.name, o.n, o.clients, o.duration)
	ops, closeOps, err := keydClients(sock, o.clients)
	if err != nil {
		return signerRow{}, err
	}
	defer closeOps()
	row := signerRow{Backend: b.name}
	pid := d.cmd.Process.Pid
	if row.Latency, err = measureLatency(pid, ops[0], o.warm, o.n); err != nil {
		return signerRow{}, err
	}
	if row.Throughput, err = measureThroughput(pid, ops, o.duration); err != nil {
		return signerRow{}, err
	}
	return row, d.stop()
}

// startDaemonEnv runs parley-keyd serve with env and returns once it has
// answered a HELLO.
func startDaemonEnv(bin, state, sock string, env []string) (*daemon, error) {
	d := &daemon{bin: bin, state: state, sock: sock, exited: make(chan error, 1)}
	d.cmd = exec.Command(bin, "serve", "--state", state, "--config", filepath.Join(state, "config.toml"))
	d.cmd.Stderr = &d.stderr
	d.cmd.Env = env
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { d.exited <- d.cmd.Wait() }()
	deadline := time.Now().Add(15 * time.Second)
	for !helloOnce(sock) {
		select {
		case err := <-d.exited:
			return nil, fmt.Errorf("parley-keyd serve exited: %v\n%s", err, d.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("parley-keyd did not answer within 15s\n%s", d.stderr.String())
		}
		time.Sleep(time.Millisecond) // polling the socket: the daemon has no other readiness signal
	}
	return d, nil
}

func reportSigners(w io.Writer, rows []signerRow) {
	if len(rows) == 0 {
		return
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "\nkey backends: GRANT (auto, fsynced) through a daemon signing with each\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "backend\tp50, 1 client\tp99, 1 client\tthroughput, %d clients\t\n", rows[0].Throughput.Clients)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f/s\t\n", r.Backend, us(r.Latency.P50), us(r.Latency.P99), r.Throughput.PerSec)
	}
	tw.Flush()
	w.Write(b.Bytes())
}
