package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd"
	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/policies"
)

// These tests run parley-grant run against a real daemon on a real socket,
// with a real CMD: a shell script that reads $PARLEY_GRANT_FILE every
// 50 ms and logs, for each read, the time, the token it read, and the modes
// of the file and its folder.

// tokenReader is the CMD of the run tests: reader LOG STOP CODE logs reads
// until the file STOP exists, then exits with CODE. SIGUSR1 is logged to
// LOG.sig; SIGTERM is logged and ends it with 3.
const tokenReader = `
log=$1; stop=$2; code=$3
trap 'echo usr1 >> "$log.sig"' USR1
trap 'echo term >> "$log.sig"; exit 3' TERM
echo "$PARLEY_GRANT_FILE" > "$log.path"
while [ ! -e "$stop" ]; do
	t=$(date +%s)
	tok=$(cat "$PARLEY_GRANT_FILE" 2>/dev/null) || tok=MISSING
	[ -n "$tok" ] || tok=EMPTY
	echo "$t $tok $(stat -c %a "$PARLEY_GRANT_FILE") $(stat -c %a "${PARLEY_GRANT_FILE%/*}")" >> "$log"
	sleep 0.05
done
exit "$code"
`

// runReader is one parley-grant run of tokenReader.
type runReader struct {
	*background
	log, stop string
}

func startRun(t *testing.T, env []string, exp string, code int) *runReader {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "reader.sh")
	if err := os.WriteFile(script, []byte(tokenReader), 0o700); err != nil {
		t.Fatal(err)
	}
	r := &runReader{log: filepath.Join(dir, "log"), stop: filepath.Join(dir, "stop")}
	r.background = startCLI(t, env, "run", "--svc", "shop.example", "--can", "shop.*", "--exp", exp, "--", "sh", script, r.log, r.stop, strconv.Itoa(code))
	return r
}

// reads is one line of the reader's log.
type read struct {
	at          int64
	token       string
	mode, dmode string
}

func (r *runReader) reads(t *testing.T) []read {
	t.Helper()
	b, err := os.ReadFile(r.log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []read
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 4 {
			continue // a line the script is writing now
		}
		at, _ := strconv.ParseInt(f[0], 10, 64)
		out = append(out, read{at, f[1], f[2], f[3]})
	}
	return out
}

// distinct returns how many different tokens the reader has seen.
func (r *runReader) distinct(t *testing.T) int {
	seen := map[string]bool{}
	for _, rd := range r.reads(t) {
		seen[rd.token] = true
	}
	return len(seen)
}

// checkReads asserts that every read found one whole token signed by a
// principal, held by holder, that had not expired, in a 0600 file in a
// 0700 folder.
func checkReads(t *testing.T, reads []read, holder string) {
	t.Helper()
	if len(reads) == 0 {
		t.Fatal("the command read nothing")
	}
	for i, rd := range reads {
		tok, err := grant.Decode(rd.token)
		if err != nil {
			t.Fatalf("read %d found no whole token (%q): %v", i, rd.token, err)
		}
		if err := tok.CheckChain(); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if tok.Holder() != holder {
			t.Fatalf("read %d: holder %s, want %s", i, tok.Holder(), holder)
		}
		exp, ok := tok.Expiry()
		if !ok || exp <= rd.at {
			t.Fatalf("read %d at %d found a token expiring at %d", i, rd.at, exp)
		}
		if rd.mode != "600" || rd.dmode != "700" {
			t.Fatalf("read %d: file mode %s, folder mode %s, want 600 and 700", i, rd.mode, rd.dmode)
		}
	}
}

// TestRunKeepsTheFileFresh: a CMD that reads the file every 50 ms always
// finds a whole, unexpired token while run renews 6-second grants; each
// renewal is a new token; CMD's exit status is run's; the file and its
// folder are gone after. A PARLEY_GRANT_FILE planted in run's environment
// is neither what CMD gets nor written to.
//
// Six seconds, not three: an expiry is a whole second, so a three-second
// grant lives two to three, and renewed at two thirds of that it has about
// 0.7 s to spare, which a loaded CI machine once missed.
func TestRunKeepsTheFileFresh(t *testing.T) {
	d := startDaemon(t, journeyPolicy, nil)
	keyPath, key := writeAgentKey(t, t.TempDir())
	planted := filepath.Join(t.TempDir(), "planted")
	if err := os.WriteFile(planted, []byte("untouched\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(cliEnv(t, d.sock, keyPath), GrantFileEnv+"="+planted)
	r := startRun(t, env, "6s", 7)
	waitUntil(t, "three tokens read", func() bool { return r.distinct(t) >= 3 })
	os.WriteFile(r.stop, nil, 0o600)
	if code := r.wait(t); code != 7 {
		t.Fatalf("run exited %d, want the command's 7; stderr: %s", code, r.stderr.String())
	}
	checkReads(t, r.reads(t), pubOf(key))
	path, err := os.ReadFile(r.log + ".path")
	if err != nil {
		t.Fatal(err)
	}
	file := strings.TrimSpace(string(path))
	if file == planted {
		t.Fatal("the command got the planted PARLEY_GRANT_FILE")
	}
	if b, _ := os.ReadFile(planted); string(b) != "untouched\n" {
		t.Fatalf("the planted file was written: %q", b)
	}
	if _, err := os.Lstat(filepath.Dir(file)); !os.IsNotExist(err) {
		t.Fatalf("the token's folder is still there after run: %v", err)
	}
}

// TestRunStopsWhenRefused: once the daemon refuses a renewal (here: an
// approver locked it), run says so on stderr and asks no more; the command
// goes on and its status is run's.
func TestRunStopsWhenRefused(t *testing.T) {
	d := startDaemon(t, journeyPolicy, nil)
	keyPath, key := writeAgentKey(t, t.TempDir())
	r := startRun(t, cliEnv(t, d.sock, keyPath), "3s", 0)
	waitUntil(t, "a renewal", func() bool { return r.distinct(t) >= 2 })
	c, err := client.Dial(d.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.Lock(context.Background(), "run test"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "run to stop renewing", func() bool { return strings.Contains(r.stderr.String(), "renewing stopped") })
	n := r.distinct(t)
	// Two more lifetimes: a run that went on asking would have written
	// (it is refused, so it could not) or said more.
	said := r.stderr.String()
	time.Sleep(6 * time.Second)
	if r.distinct(t) != n {
		t.Fatal("a new token appeared after the refusal")
	}
	if r.stderr.String() != said {
		t.Fatalf("run went on after it stopped renewing:\n%s", strings.TrimPrefix(r.stderr.String(), said))
	}
	if !strings.Contains(said, "locked") {
		t.Errorf("the message does not say why: %s", said)
	}
	os.WriteFile(r.stop, nil, 0o600)
	if code := r.wait(t); code != 0 {
		t.Fatalf("run exited %d, want 0; stderr: %s", code, r.stderr.String())
	}
	reads := r.reads(t)
	var valid []read
	for _, rd := range reads {
		if tok, err := grant.Decode(rd.token); err == nil {
			if exp, _ := tok.Expiry(); exp > rd.at {
				valid = append(valid, rd)
			}
		}
	}
	checkReads(t, valid, pubOf(key))
}

// TestRunForwardsSignals: SIGUSR1 and SIGTERM sent to run reach the
// command; the command's exit on SIGTERM (3) is run's. A command that dies
// by a signal makes run exit 128+N.
func TestRunForwardsSignals(t *testing.T) {
	d := startDaemon(t, journeyPolicy, nil)
	keyPath, _ := writeAgentKey(t, t.TempDir())
	env := cliEnv(t, d.sock, keyPath)
	r := startRun(t, env, "1h", 0)
	waitUntil(t, "the command to read", func() bool { return len(r.reads(t)) > 0 })
	sigs := func() string { b, _ := os.ReadFile(r.log + ".sig"); return string(b) }
	r.cmd.Process.Signal(syscall.SIGUSR1)
	waitUntil(t, "SIGUSR1 at the command", func() bool { return strings.Contains(sigs(), "usr1") })
	r.cmd.Process.Signal(syscall.SIGTERM)
	if code := r.wait(t); code != 3 {
		t.Fatalf("run exited %d, want the command's 3; stderr: %s", code, r.stderr.String())
	}
	if !strings.Contains(sigs(), "term") {
		t.Fatal("SIGTERM did not reach the command")
	}

	// A command killed by a signal.
	cli(t, env, 128+int(syscall.SIGKILL), "run", "--svc", "shop.example", "--can", "shop.*", "--exp", "1h", "--", "sh", "-c", "kill -KILL $$")
	cli(t, env, 128+int(syscall.SIGTERM), "run", "--svc", "shop.example", "--can", "shop.*", "--exp", "1h", "--", "sh", "-c", "kill -TERM $$")
}

// TestRunRefusesAnUnsafeFolder: run does not make the token's folder in a
// temporary folder others may write to without the sticky bit, where they
// could rename the folder away and plant their own.
func TestRunRefusesAnUnsafeFolder(t *testing.T) {
	d := startDaemon(t, journeyPolicy, nil)
	keyPath, _ := writeAgentKey(t, t.TempDir())
	open := filepath.Join(t.TempDir(), "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	env := append(cliEnv(t, d.sock, keyPath), "TMPDIR="+open)
	res := cli(t, env, exitFail, "run", "--svc", "shop.example", "--can", "shop.*", "--exp", "1h", "--", "true")
	if !strings.Contains(res.stderr, "refusing to keep the token under "+open) {
		t.Fatalf("stderr: %s", res.stderr)
	}
	if ents, _ := os.ReadDir(open); len(ents) != 0 {
		t.Fatalf("run made %v in the open folder", ents)
	}
}

// TestRunReplacesAPlantedLink: a link put in place of the token's file
// (by anything running as the user) is replaced by the next renewal, and
// what it pointed to is never written.
func TestRunReplacesAPlantedLink(t *testing.T) {
	d := startDaemon(t, journeyPolicy, nil)
	keyPath, key := writeAgentKey(t, t.TempDir())
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "plant.sh")
	// The command swaps the file for a link to the victim, then waits for
	// the next renewal to replace the link with a file.
	os.WriteFile(script, []byte(`
ln -sf "$1" "$PARLEY_GRANT_FILE.new" && mv -f "$PARLEY_GRANT_FILE.new" "$PARLEY_GRANT_FILE"
i=0
while [ -L "$PARLEY_GRANT_FILE" ]; do
	i=$((i+1)); [ $i -lt 400 ] || exit 9
	sleep 0.05
done
cat "$PARLEY_GRANT_FILE" > "$2"
`), 0o700)
	out := filepath.Join(dir, "token")
	res := cli(t, cliEnv(t, d.sock, keyPath), 0, "run", "--svc", "shop.example", "--can", "shop.*", "--exp", "3s", "--", "sh", script, victim, out)
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Fatalf("the link's target was written: %q; stderr: %s", b, res.stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	checkReads(t, []read{{at: time.Now().Unix() - 1, token: strings.TrimSpace(string(b)), mode: "600", dmode: "700"}}, pubOf(key))
}

// stoppableDaemon is a daemon on sock that the test stops when it likes.
func stoppableDaemon(t *testing.T, sock string) (stop func()) {
	t.Helper()
	dir := t.TempDir()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := keyd.ParseConfig([]byte(keyd.DefaultConfig(sock, u.Username, u.Username)), filepath.Join(dir, "config.toml"))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policies.Parse([]byte(journeyPolicy), "policy.toml")
	if err != nil {
		t.Fatal(err)
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	d, err := keyd.New(keyd.Options{Config: cfg, Policy: pol, State: dir, Signer: key, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(ctx, ln) }()
	<-d.AuditLog().Started()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-ran:
		case <-time.After(15 * time.Second):
			t.Error("the daemon did not stop within 15 s")
		}
		os.Remove(sock)
	}
	t.Cleanup(stop)
	return stop
}

// TestRunDaemonGoesAway: while the daemon is gone, run says on stderr that
// renewing fails and tries again, the command keeps running on the token it
// has; a daemon back on the socket renews it again.
func TestRunDaemonGoesAway(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	stop := stoppableDaemon(t, sock)
	keyPath, _ := writeAgentKey(t, t.TempDir())
	r := startRun(t, cliEnv(t, sock, keyPath), "3s", 5)
	waitUntil(t, "a renewal", func() bool { return r.distinct(t) >= 2 })
	stop()
	waitUntil(t, "run to say renewing fails", func() bool {
		return strings.Contains(r.stderr.String(), "renewing the grant failed") &&
			strings.Contains(r.stderr.String(), "trying again")
	})
	n := r.distinct(t)
	stoppableDaemon(t, sock)
	waitUntil(t, "a renewal from the new daemon", func() bool { return r.distinct(t) > n })
	os.WriteFile(r.stop, nil, 0o600)
	if code := r.wait(t); code != 5 {
		t.Fatalf("run exited %d, want the command's 5; stderr: %s", code, r.stderr.String())
	}
}

// runRememberPolicy lets the human remember mail approvals, with grants of
// six seconds under them.
var runRememberPolicy = strings.Replace(rememberPolicy, `remember_exp = "10m"`, `remember_exp = "6s"`, 1)

// TestRunUnderRememberedApproval: the first grant of run waits for the
// human, who approves it remembered; the renewals are then issued at once
// under it (six-second slices, so several). Once the human forgets it, the
// next renewal waits for a human and run says so on stderr with the match
// code; denied, run stops renewing, and the command's status is run's.
func TestRunUnderRememberedApproval(t *testing.T) {
	d := startDaemon(t, runRememberPolicy, nil)
	keyPath, key := writeAgentKey(t, t.TempDir())
	env := cliEnv(t, d.sock, keyPath)
	dir := t.TempDir()
	script := filepath.Join(dir, "reader.sh")
	os.WriteFile(script, []byte(tokenReader), 0o700)
	r := &runReader{log: filepath.Join(dir, "log"), stop: filepath.Join(dir, "stop")}
	r.background = startCLI(t, env, "run", "--svc", "mail.example", "--can", "mail.read", "--exp", "8s", "--", "sh", script, r.log, r.stop, "4")
	id, code := r.matchCode(t)
	cli(t, env, 0, "approve", id, "--code", code, "--remember", "15m")
	defer func() { t.Logf("run stderr:\n%s", r.stderr.String()) }()
	waitUntil(t, "three tokens under the remembered approval", func() bool { return r.distinct(t) >= 3 })
	checkReads(t, r.reads(t), pubOf(key))
	m := rememberedJSON(t, env)[0]
	if m.Issued < 2 {
		t.Errorf("remembered lists %d grants issued under it", m.Issued)
	}
	cli(t, env, 0, "forget", m.ID)
	var renewal []string
	waitUntil(t, "run to say the renewal waits for a human", func() bool {
		renewal = regexp.MustCompile(`renewing the grant waits for a human: approve (r_[a-z0-9]+) with match code (\d\d)`).FindStringSubmatch(r.stderr.String())
		return renewal != nil
	})
	cli(t, env, 0, "deny", renewal[1])
	waitUntil(t, "run to stop renewing", func() bool { return strings.Contains(r.stderr.String(), "renewing stopped") })
	os.WriteFile(r.stop, nil, 0o600)
	if c := r.wait(t); c != 4 {
		t.Fatalf("run exited %d, want the command's 4; stderr: %s", c, r.stderr.String())
	}
}
