package audit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
)

// TestPowerCutEveryOffset cuts a log at every byte offset of its last
// records, as a power cut can, and also fills the rest of the file with NUL
// bytes from there, as ext4 can after a power cut with delayed allocation
// (issue 12: a NUL-filled last line stopped start-up). Open must succeed
// every time, keep every record whose line was whole, record what it cut,
// and leave a log that verifies.
func TestPowerCutEveryOffset(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	o := signedOptions(newTestClock())
	o.CheckpointEvery = 4
	l := openWith(t, o, path)
	for _, rec := range auditTestRecords(9) {
		auditTestAppend(t, l, rec)
	}
	auditTestAppend(t, l, Record{Kind: KindStop, Message: "bye"})
	mustClose(t, l)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(orig, []byte("\n"))
	lines = lines[:len(lines)-1]
	// The last three lines: a record, the stop record, the stop checkpoint.
	from := len(orig)
	for _, ln := range lines[len(lines)-3:] {
		from -= len(ln)
	}
	pub := testPub("daemon")
	// fsync is free on tmpfs; this test opens the log a thousand times.
	scratch := t.TempDir()
	if os.Geteuid() == 0 {
		scratch = auditTestTmpfs(t, "64m")
	}
	for _, nul := range []bool{false, true} {
		for off := from; off <= len(orig); off++ {
			name := fmt.Sprintf("cut-at-%d", off)
			if nul {
				name = fmt.Sprintf("nul-from-%d", off)
			}
			data := append([]byte(nil), orig[:off]...)
			if nul {
				data = append(data, make([]byte, len(orig)-off)...)
			}
			p := filepath.Join(scratch, name, "audit.log")
			os.Mkdir(filepath.Dir(p), 0o700)
			if err := os.WriteFile(p, data, 0o600); err != nil {
				t.Fatal(err)
			}
			l, err := (Options{Signer: testKey("daemon")}).Open(p)
			if err != nil {
				t.Fatalf("%s: Open: %v", name, err)
			}
			l.Close()
			after, _ := os.ReadFile(p)
			whole := bytes.LastIndexByte(orig[:off], '\n') + 1
			if !bytes.HasPrefix(after, orig[:whole]) {
				t.Fatalf("%s: the whole lines before the cut were changed", name)
			}
			rep, err := Verify(p, VerifyOptions{Key: pub})
			if err != nil {
				t.Fatalf("%s: verify after Open: %v", name, err)
			}
			if !rep.Stopped || rep.NULTail != 0 {
				t.Errorf("%s: report %+v", name, rep)
			}
			cut := len(data) - whole
			var recovered []string
			readFrom(openFile(t, p), p, int64(whole), &Filter{}, func(_ []byte, r *Record) error {
				if r.Kind == KindRecovered {
					recovered = append(recovered, r.Message)
				}
				return nil
			})
			if cut > 0 {
				want := fmt.Sprintf("dropped %d bytes of ", cut)
				if len(recovered) == 0 || !strings.Contains(recovered[0], want) {
					t.Errorf("%s: recovered records %q, want one saying %q", name, recovered, want)
				}
			}
			if off < len(orig) && !strings.Contains(strings.Join(recovered, "|"), "ended without its stop checkpoint") {
				t.Errorf("%s: no record says the previous run ended without its stop checkpoint: %q", name, recovered)
			}
			if off == len(orig) && len(recovered) != 0 {
				t.Errorf("%s: a whole log got recovered records %q", name, recovered)
			}
		}
	}
}

func openFile(t *testing.T, p string) *os.File {
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestNULLastLine: a last line of NUL bytes with a newline after it, and NUL
// bytes in the middle of a torn tail that has whole lines after them, are
// cut like a torn line, whatever their bytes.
func TestNULLastLine(t *testing.T) {
	for _, tail := range []string{"\x00\x00\x00\x00\n", "\x00\x00\x00\x00", "{\"seq\":4,\x00\x00\x00\x00\x00\n{\"seq\":5}\n\x00\x00"} {
		path := filepath.Join(t.TempDir(), "audit.log")
		l := openWith(t, signedOptions(newTestClock()), path)
		auditTestAppend(t, l, Record{Kind: KindStart})
		l.Close()
		f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		f.WriteString(tail)
		f.Close()
		l = openWith(t, signedOptions(newTestClock()), path)
		mustClose(t, l)
		if _, err := Verify(path, VerifyOptions{Key: testPub("daemon")}); err != nil {
			t.Errorf("tail %q: verify after Open: %v", tail, err)
		}
	}
}

// TestTornTailNotACrash: a checkpoint after damaged bytes cannot come from
// a crash (a checkpoint is written on its own, after an fsync of what came
// before), so Open refuses instead of cutting.
func TestTornTailNotACrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	l := openWith(t, signedOptions(newTestClock()), path)
	auditTestAppend(t, l, Record{Kind: KindStart})
	l.Close()
	lines := fileLines(t, path)
	n := len(lines)
	damaged := append(append([]string(nil), lines[:n-2]...), "\x00\x00\x00\x00\n", lines[n-1])
	writeLines(t, path, damaged)
	before, _ := os.ReadFile(path)
	if l, err := (Options{Signer: testKey("daemon")}).Open(path); err == nil {
		l.Close()
		t.Fatal("Open cut a checkpoint as a torn tail")
	} else {
		t.Logf("Open: %v", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("Open changed the file it refused")
	}
	// The same in a log without a signer, where Open reads the whole file.
	unsigned := filepath.Join(t.TempDir(), "audit.log")
	l = auditTestOpen(t, unsigned)
	auditTestAppend(t, l, Record{Kind: KindStart})
	l.Close()
	writeLines(t, unsigned, append(fileLines(t, unsigned), "\x00\x00\n", lines[n-1]))
	if l, err := Open(unsigned); err == nil {
		l.Close()
		t.Fatal("Open (no signer) cut a checkpoint as a torn tail")
	} else if !strings.Contains(err.Error(), "not the trace of a crash") {
		t.Errorf("Open (no signer): %v", err)
	}
}

// TestKill9MidBurst kills a real process with SIGKILL while 64 of its
// goroutines append, five times on one log. The helper prints the seq and
// request id of every append acknowledged to it, after Append returned;
// every one must be in the log afterwards, and the log must verify.
func TestKill9MidBurst(t *testing.T) {
	if os.Getenv("PARLEY_AUDIT_KILL9_HELPER") != "" {
		return
	}
	for _, pre := range []int64{0, 64 << 10} {
		t.Run(fmt.Sprintf("preallocate=%d", pre), func(t *testing.T) { testKill9(t, pre) })
	}
}

func testKill9(t *testing.T, pre int64) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	acked := map[uint64]string{}
	for round := range 5 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKill9Helper$", "-test.count=1")
		cmd.Env = append(os.Environ(), "PARLEY_AUDIT_KILL9_HELPER="+path, fmt.Sprintf("PARLEY_AUDIT_KILL9_ROUND=%d", round),
			fmt.Sprintf("PARLEY_AUDIT_KILL9_PREALLOCATE=%d", pre))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		n := 0
		kill := 1500 + round*300
		for sc.Scan() {
			seq, id, ok := strings.Cut(sc.Text(), " ")
			if !ok {
				continue
			}
			s, err := strconv.ParseUint(seq, 10, 64)
			if err != nil {
				t.Fatalf("helper said %q", sc.Text())
			}
			acked[s] = id
			if n++; n == kill {
				cmd.Process.Signal(syscall.SIGKILL)
			}
		}
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: helper ended with %v, not SIGKILL, after %d acks:\n%s", round, err, n, stderr.String())
		}
		// Acks read after the kill were written before it.
		if pre > 0 {
			// The file still holds preallocated zeros after the kill.
			fi, _ := os.Stat(path)
			t.Logf("round %d: %d bytes after the kill", round, fi.Size())
		}
		l, err := (Options{Signer: testKey("daemon"), Preallocate: pre}).Open(path)
		if err != nil {
			t.Fatalf("round %d: Open after kill -9: %v", round, err)
		}
		mustClose(t, l)
		recs := allRecords(t, path)
		for seq, id := range acked {
			if r, ok := recs[seq]; !ok || r.RequestID != id {
				t.Fatalf("round %d: acknowledged record %d (%s) is not in the log", round, seq, id)
			}
		}
		if _, err := Verify(path, VerifyOptions{Key: testPub("daemon")}); err != nil {
			t.Fatalf("round %d: verify: %v", round, err)
		}
		t.Logf("round %d: killed after %d acks; %d acknowledged in all, all in the log", round, n, len(acked))
	}
}

// TestKill9Helper is the process TestKill9MidBurst kills.
func TestKill9Helper(t *testing.T) {
	path := os.Getenv("PARLEY_AUDIT_KILL9_HELPER")
	if path == "" {
		t.Skip("helper process only")
	}
	round := os.Getenv("PARLEY_AUDIT_KILL9_ROUND")
	pre, _ := strconv.ParseInt(os.Getenv("PARLEY_AUDIT_KILL9_PREALLOCATE"), 10, 64)
	o := Options{Signer: testKey("daemon"), CheckpointEvery: 200, Preallocate: pre}
	l, err := o.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	for g := range 64 {
		go func() {
			for i := 0; ; i++ {
				id := fmt.Sprintf("k%s-%d-%d", round, g, i)
				seq, err := l.Append(Record{Kind: KindIssue, RequestID: id, GrantID: id})
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(3)
				}
				mu.Lock()
				fmt.Fprintf(w, "%d %s\n", seq, id)
				w.Flush()
				mu.Unlock()
			}
		}()
	}
	time.Sleep(time.Minute)
	os.Exit(4)
}

// TestFullDiskResumesWithoutReopen fills a small tmpfs so that a write is
// cut short, and makes the cut-back fail too (the append-only attribute
// refuses truncation), which used to leave the log refusing every record
// until a restart (issue 12). Appends must fail with ErrUnavailable and
// ENOSPC, leave no partial line once the log can cut it, and succeed again
// when space returns, without Reopen.
func TestFullDiskResumesWithoutReopen(t *testing.T) {
	dir := auditTestTmpfs(t, "64k")
	path := filepath.Join(dir, "audit.log")
	l := openWith(t, signedOptions(newTestClock()), path)
	defer l.Close()
	auditTestAppend(t, l, Record{Kind: KindStart})
	filler := fillFilesystem(t, dir)
	before, _ := os.Stat(path)

	if out, err := exec.Command("chattr", "+a", path).CombinedOutput(); err != nil {
		testpeer.Unavailable(t, fmt.Sprintf("chattr +a: %v: %s", err, out))
	}
	big := Record{Kind: KindIssue, Requested: []byte(`["` + strings.Repeat("m", 11000) + `"]`)}
	_, err := l.Append(big)
	if !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("append on a full disk: %v, want ENOSPC and ErrUnavailable", err)
	}
	if _, err := l.Append(Record{Kind: KindIssue}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("append while a partial write cannot be cut: %v", err)
	}
	exec.Command("chattr", "-a", path).Run()
	os.Remove(filler)
	seq := auditTestAppend(t, l, big)
	after, _ := os.Stat(path)
	if after.Size() <= before.Size() {
		t.Errorf("log did not grow: %d → %d", before.Size(), after.Size())
	}
	rep, err := Verify(path, VerifyOptions{Key: testPub("daemon")})
	if err != nil {
		t.Fatalf("verify after the disk filled and emptied: %v", err)
	}
	if rep.Head.Seq != seq {
		t.Errorf("head %d, last append %d", rep.Head.Seq, seq)
	}
}

func fillFilesystem(t *testing.T, dir string) string {
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := bytes.Repeat([]byte{'x'}, 1024)
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling: %v", err)
			}
			break
		}
	}
	for {
		if _, err := f.Write([]byte{'x'}); err != nil {
			break
		}
	}
	return filler
}

// TestReadOnlyFilesystem: an ext4 filesystem that goes read-only under the
// log (errors=remount-ro after an error, the way a disk fault shows) makes
// every append fail with EROFS and ErrUnavailable; nothing acknowledged is
// lost, and after the filesystem is repaired the log opens, with a record
// saying the run ended without its stop checkpoint. (A running log cannot
// see a read-only remount by an admin: the kernel refuses it while the file
// is open for writing. ext4 does not take writes again on that mount
// after such an error, so here the daemon does need a restart.)
func TestReadOnlyFilesystem(t *testing.T) {
	testpeer.RequireRoot(t)
	for _, tool := range []string{"mkfs.ext4", "e2fsck", "losetup"} {
		if _, err := exec.LookPath(tool); err != nil {
			testpeer.Unavailable(t, "needs "+tool)
		}
	}
	work := t.TempDir()
	img := filepath.Join(work, "img")
	mnt := filepath.Join(work, "mnt")
	os.Mkdir(mnt, 0o700)
	run := func(name string, args ...string) {
		t.Helper()
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			testpeer.Unavailable(t, fmt.Sprintf("%s %v: %v: %s", name, args, err, out))
		}
	}
	run("truncate", "-s", "16M", img)
	run("mkfs.ext4", "-q", img)
	run("mount", "-o", "loop,errors=remount-ro", img, mnt)
	mounted := true
	defer func() {
		if mounted {
			exec.Command("umount", mnt).Run()
		}
	}()
	path := filepath.Join(mnt, "audit.log")
	l := openWith(t, signedOptions(newTestClock()), path)
	var acked []uint64
	for _, rec := range auditTestRecords(20) {
		acked = append(acked, auditTestAppend(t, l, rec))
	}
	dev, err := exec.Command("findmnt", "-no", "SOURCE", mnt).Output()
	if err != nil {
		t.Fatal(err)
	}
	trigger := "/sys/fs/ext4/" + filepath.Base(strings.TrimSpace(string(dev))) + "/trigger_fs_error"
	if err := os.WriteFile(trigger, []byte("parley-keyd test\n"), 0o200); err != nil {
		testpeer.Unavailable(t, "cannot make ext4 fail: "+err.Error())
	}
	for range 3 {
		if _, err := l.Append(Record{Kind: KindIssue}); !errors.Is(err, syscall.EROFS) || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("append on a read-only filesystem: %v, want EROFS and ErrUnavailable", err)
		}
	}
	if err := l.Close(); err == nil {
		t.Error("Close on a read-only filesystem reported no error for its stop checkpoint")
	}
	run("umount", mnt)
	mounted = false
	exec.Command("e2fsck", "-fy", img).Run()
	run("mount", "-o", "loop", img, mnt)
	mounted = true
	l = openWith(t, signedOptions(newTestClock()), path)
	mustClose(t, l)
	recs := allRecords(t, path)
	for _, seq := range acked {
		if _, ok := recs[seq]; !ok {
			t.Errorf("acknowledged record %d lost", seq)
		}
	}
	found := false
	for _, r := range recs {
		found = found || r.Kind == KindRecovered && strings.Contains(r.Message, "ended without its stop checkpoint")
	}
	if !found {
		t.Error("no record says the run ended without its stop checkpoint")
	}
	if _, err := Verify(path, VerifyOptions{Key: testPub("daemon")}); err != nil {
		t.Errorf("verify: %v", err)
	}
}

// TestFullDiskPreallocated: with a preallocated tail, a full disk leaves the
// log its reserve; records go on into it, Append refuses with ENOSPC once
// it is used up, and resumes without Reopen when space returns.
func TestFullDiskPreallocated(t *testing.T) {
	dir := auditTestTmpfs(t, "256k")
	path := filepath.Join(dir, "audit.log")
	o := signedOptions(newTestClock())
	o.Preallocate = 16 << 10
	l := openWith(t, o, path)
	defer l.Close()
	auditTestAppend(t, l, Record{Kind: KindStart})
	filler := fillFilesystem(t, dir)
	var acked []uint64
	var err error
	for i := 0; i < 1000; i++ {
		var seq uint64
		if seq, err = l.Append(auditTestRecords(1)[0]); err != nil {
			break
		}
		acked = append(acked, seq)
	}
	if !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("append after the reserve: %v, want ENOSPC", err)
	}
	if len(acked) == 0 || len(acked) > 40 {
		t.Errorf("%d records went into a reserve of 16 KiB", len(acked))
	}
	os.Remove(filler)
	auditTestAppend(t, l, Record{Kind: KindIssue})
	if rep, err := Verify(path, VerifyOptions{Key: testPub("daemon")}); err != nil || rep.NULTail == 0 {
		t.Fatalf("verify a live preallocated log: %+v, %v", rep, err)
	}
	mustClose(t, l)
	rep, err := Verify(path, VerifyOptions{Key: testPub("daemon")})
	if err != nil || rep.NULTail != 0 || !rep.Stopped {
		t.Fatalf("verify after Close: %+v, %v", rep, err)
	}
}
