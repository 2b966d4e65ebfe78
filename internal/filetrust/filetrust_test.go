package filetrust

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
)

// The daemon's user and a stranger, by number: chown needs no account, and
// the group lists the checker reads are the test's own (withAccounts).
const (
	daemonUID = 4201
	otherUID  = 4202
	daemonGID = 4301 // only the daemon is in it
	sharedGID = 4302 // the stranger is in it
	otherGID  = 4303 // the stranger's own, as primary group
	loneGID   = 4304 // not in the group list at all
)

func withAccounts(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	pw := filepath.Join(dir, "passwd")
	gr := filepath.Join(dir, "group")
	os.WriteFile(pw, []byte("root:x:0:0::/root:/bin/sh\nkeyd:x:4201:4301::/:/bin/false\nother:x:4202:4303::/:/bin/false\n"), 0o644)
	os.WriteFile(gr, []byte("root:x:0:\nkeyd:x:4301:\nshared:x:4302:keyd,other\nother:x:4303:\nwith-root:x:4305:root,keyd\n"), 0o644)
	oldP, oldG := passwdFile, groupFile
	passwdFile, groupFile = pw, gr
	t.Cleanup(func() { passwdFile, groupFile = oldP, oldG })
}

// tree is a folder of root's, 0755, in which a test builds a path.
func tree(t *testing.T) string {
	t.Helper()
	testpeer.RequireRoot(t)
	withAccounts(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	return dir
}

func file(t *testing.T, path string, uid, gid int, mode os.FileMode) string {
	t.Helper()
	if err := os.WriteFile(path, []byte("x"), mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, mode)
	os.Lchown(path, uid, gid)
	return path
}

func folder(t *testing.T, path string, uid, gid int, mode os.FileMode) string {
	t.Helper()
	if err := os.Mkdir(path, mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, mode)
	os.Lchown(path, uid, gid)
	return path
}

func setfacl(t *testing.T, args ...string) {
	t.Helper()
	if _, err := exec.LookPath("setfacl"); err != nil {
		testpeer.Unavailable(t, "setfacl (package acl) is not installed")
	}
	if out, err := exec.Command("setfacl", args...).CombinedOutput(); err != nil {
		testpeer.Unavailable(t, "setfacl "+strings.Join(args, " ")+": "+err.Error()+": "+string(out))
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		// make builds the path to check in root's folder dir and
		// returns it and the path the error must name ("" for none).
		make func(t *testing.T, dir string) (path, at string)
	}{
		{"ok/root-0644", func(t *testing.T, dir string) (string, string) {
			return file(t, dir+"/f", 0, 0, 0o644), ""
		}},
		{"ok/daemon-0600", func(t *testing.T, dir string) (string, string) {
			return file(t, dir+"/f", daemonUID, daemonGID, 0o600), ""
		}},
		{"ok/group-writable-daemon-only-group", func(t *testing.T, dir string) (string, string) {
			return file(t, dir+"/f", 0, daemonGID, 0o660), ""
		}},
		{"ok/group-writable-root-and-daemon", func(t *testing.T, dir string) (string, string) {
			return file(t, dir+"/f", 0, 4305, 0o660), ""
		}},
		{"ok/acl-read-only-for-stranger", func(t *testing.T, dir string) (string, string) {
			p := file(t, dir+"/f", 0, 0, 0o640)
			setfacl(t, "-m", "u:4202:r", p)
			return p, ""
		}},
		{"ok/acl-write-for-daemon", func(t *testing.T, dir string) (string, string) {
			p := file(t, dir+"/f", 0, 0, 0o640)
			setfacl(t, "-m", "u:4201:rw", p)
			return p, ""
		}},
		{"ok/sticky-folder-entry-of-root", func(t *testing.T, dir string) (string, string) {
			d := folder(t, dir+"/tmp", 0, 0, 0o777|fs.ModeSticky)
			return file(t, d+"/f", 0, 0, 0o644), ""
		}},
		{"ok/link-to-root-file", func(t *testing.T, dir string) (string, string) {
			file(t, dir+"/real", 0, 0, 0o644)
			os.Symlink("real", dir+"/link")
			return dir + "/link", ""
		}},
		{"ok/relative-link-up-and-down", func(t *testing.T, dir string) (string, string) {
			d := folder(t, dir+"/a", 0, 0, 0o755)
			folder(t, dir+"/b", 0, 0, 0o755)
			file(t, dir+"/b/f", 0, 0, 0o644)
			os.Symlink("../b/f", d+"/link")
			return d + "/link", ""
		}},

		{"fail/mode-0666", func(t *testing.T, dir string) (string, string) {
			p := file(t, dir+"/f", 0, 0, 0o666)
			return p, p
		}},
		{"fail/owned-by-stranger", func(t *testing.T, dir string) (string, string) {
			p := file(t, dir+"/f", otherUID, daemonGID, 0o640)
			return p, p
		}},
		{"fail/group-writable-shared-group", func(t *testing.T, dir string) (string, string) {
			p := file(t, dir+"/f", 0, sharedGID, 0o664)
			return p, p
		}},
		{"fail/group-writable-strangers-primary-group", func(t *testing.T, dir string) (string, string) {
			p := file(t, dir+"/f", 0, otherGID, 0o664)
			return p, p
		}},
		{"fail/group-writable-unlisted-group", func(t *testing.T, dir string) (string, string) {
			p := file(t, dir+"/f", 0, loneGID, 0o664)
			return p, p
		}},
		{"fail/acl-write-for-stranger", func(t *testing.T, dir string) (string, string) {
			p := file(t, dir+"/f", 0, 0, 0o640)
			setfacl(t, "-m", "u:4202:rw", p)
			return p, p
		}},
		{"fail/acl-write-for-stranger-masked", func(t *testing.T, dir string) (string, string) {
			// The mask makes it ineffective today; the owner's next
			// chmod g+w would not.
			p := file(t, dir+"/f", 0, 0, 0o640)
			setfacl(t, "-m", "u:4202:rw,m::r", p)
			return p, p
		}},
		{"fail/acl-write-for-shared-group", func(t *testing.T, dir string) (string, string) {
			p := file(t, dir+"/f", 0, 0, 0o640)
			setfacl(t, "-m", "g:4302:rw", p)
			return p, p
		}},
		{"fail/acl-on-a-folder-above", func(t *testing.T, dir string) (string, string) {
			d := folder(t, dir+"/d", 0, 0, 0o755)
			setfacl(t, "-m", "u:4202:rwx", d)
			return file(t, d+"/f", 0, 0, 0o644), d
		}},
		{"fail/folder-above-0777", func(t *testing.T, dir string) (string, string) {
			d := folder(t, dir+"/d", 0, 0, 0o777)
			return file(t, d+"/f", 0, 0, 0o644), d
		}},
		{"fail/folder-above-owned-by-stranger", func(t *testing.T, dir string) (string, string) {
			d := folder(t, dir+"/d", otherUID, otherGID, 0o755)
			return file(t, d+"/f", 0, 0, 0o644), d
		}},
		{"fail/sticky-folder-entry-of-stranger", func(t *testing.T, dir string) (string, string) {
			d := folder(t, dir+"/tmp", 0, 0, 0o777|fs.ModeSticky)
			p := file(t, d+"/f", otherUID, otherGID, 0o644)
			return p, p
		}},
		{"fail/missing-in-sticky-folder", func(t *testing.T, dir string) (string, string) {
			d := folder(t, dir+"/tmp", 0, 0, 0o777|fs.ModeSticky)
			return d + "/f", d
		}},
		{"fail/link-into-strangers-folder", func(t *testing.T, dir string) (string, string) {
			d := folder(t, dir+"/home", otherUID, otherGID, 0o755)
			file(t, d+"/f", otherUID, otherGID, 0o644)
			os.Symlink(d+"/f", dir+"/link")
			return dir + "/link", d
		}},
		{"fail/link-to-strangers-file", func(t *testing.T, dir string) (string, string) {
			p := file(t, dir+"/f", otherUID, otherGID, 0o644)
			os.Symlink("f", dir+"/link")
			return dir + "/link", p
		}},
		{"fail/link-owned-by-stranger", func(t *testing.T, dir string) (string, string) {
			file(t, dir+"/f", 0, 0, 0o644)
			os.Symlink("f", dir+"/link")
			os.Lchown(dir+"/link", otherUID, otherGID)
			return dir + "/link", dir + "/link"
		}},
		{"fail/link-in-a-folder-above", func(t *testing.T, dir string) (string, string) {
			d := folder(t, dir+"/mine", otherUID, otherGID, 0o755)
			folder(t, d+"/etc", 0, 0, 0o755)
			file(t, d+"/etc/f", 0, 0, 0o644)
			os.Symlink(d+"/etc", dir+"/etc")
			return dir + "/etc/f", d
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tree(t)
			path, at := tc.make(t, dir)
			err := Check(path, daemonUID)
			var ue *UnsafeError
			switch {
			case at == "" && err != nil:
				t.Fatalf("Check(%s) = %v, want nil", path, err)
			case at == "":
				if f, err := Open(path, daemonUID); err != nil {
					t.Errorf("Open: %v", err)
				} else {
					f.Close()
				}
				return
			case !errors.As(err, &ue):
				t.Fatalf("Check(%s) = %v, want an UnsafeError at %s", path, err, at)
			case ue.Path != at || ue.File != path:
				t.Errorf("UnsafeError at %s for %s, want at %s: %v", ue.Path, ue.File, at, err)
			}
			if f, err := Open(path, daemonUID); err == nil {
				f.Close()
				t.Errorf("Open opened what Check refused")
			}
			// The fix tightens, never loosens: every chown names root as
			// the owner, every chmod a mode nobody else may write.
			checkFix(t, ue.Fix)
		})
	}
}

var (
	chmodRE = regexp.MustCompile(`chmod (\S+)`)
	chownRE = regexp.MustCompile(`chown (\S+)`)
)

func checkFix(t *testing.T, fix string) {
	t.Helper()
	if !chownRE.MatchString(fix) {
		t.Errorf("fix %q names no safe owner", fix)
	}
	for _, m := range chownRE.FindAllStringSubmatch(fix, -1) {
		if owner, _, _ := strings.Cut(m[1], ":"); owner != "root" {
			t.Errorf("fix %q gives a file to %s", fix, owner)
		}
	}
	for _, m := range chmodRE.FindAllStringSubmatch(fix, -1) {
		if mode, err := strconv.ParseUint(m[1], 8, 32); err != nil || mode&0o022 != 0 {
			t.Errorf("fix %q sets mode %s", fix, m[1])
		}
	}
	for _, bad := range []string{"chgrp", "setfacl -m", "usermod"} {
		if strings.Contains(fix, bad) {
			t.Errorf("fix %q contains %q", fix, bad)
		}
	}
}

func TestCheckMissing(t *testing.T) {
	dir := tree(t)
	// In a folder only root may write, a missing file is just missing.
	if err := Check(dir+"/nothing", daemonUID); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if err := Check(dir+"/no/such/folder", daemonUID); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing folder: %v", err)
	}
	// A file where a folder should be.
	file(t, dir+"/f", 0, 0, 0o644)
	if err := Check(dir+"/f/g", daemonUID); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("through a file: %v", err)
	}
}

func TestCheckLinkLoop(t *testing.T) {
	dir := tree(t)
	os.Symlink("b", dir+"/a")
	os.Symlink("a", dir+"/b")
	if err := Check(dir+"/a", daemonUID); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("loop: %v", err)
	}
}

func TestReadFile(t *testing.T) {
	dir := tree(t)
	p := dir + "/f"
	os.WriteFile(p, []byte("0123456789"), 0o644)
	if b, err := ReadFile(p, daemonUID, 10); err != nil || string(b) != "0123456789" {
		t.Errorf("ReadFile = %q, %v", b, err)
	}
	if _, err := ReadFile(p, daemonUID, 9); err == nil {
		t.Error("ReadFile read past its bound")
	}
	// Not a regular file: a FIFO would block the daemon.
	if err := syscall.Mkfifo(dir+"/fifo", 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(dir+"/fifo", daemonUID, 10); err == nil {
		t.Error("ReadFile read a FIFO")
	}
}

// TestCheckRealTree checks what every test of the daemon relies on: a
// file in a fresh temporary folder of this process's user is trusted by a
// daemon running as that user.
func TestCheckRealTree(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	os.WriteFile(p, []byte("x"), 0o600)
	if err := Check(p, uint32(os.Geteuid())); err != nil {
		t.Fatal(err)
	}
}

func encodeACL(entries []aclEntry) []byte {
	b := binary.LittleEndian.AppendUint32(nil, aclVersion)
	for _, e := range entries {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

func TestParseACL(t *testing.T) {
	good := encodeACL([]aclEntry{{aclUserObj, 6, 0xffffffff}, {aclUser, 6, 4202}, {aclGroupObj, 4, 0xffffffff}, {aclMask, 6, 0xffffffff}, {aclOther, 4, 0xffffffff}})
	if e, err := parseACL(good); err != nil || len(e) != 5 || e[1].id != 4202 {
		t.Errorf("parseACL = %+v, %v", e, err)
	}
	for name, b := range map[string][]byte{
		"fail/short":       {2, 0},
		"fail/version":     encodeACL(nil)[:0:0],
		"fail/partial":     append(encodeACL(nil), 1, 2, 3),
		"fail/unknown-tag": encodeACL([]aclEntry{{0x40, 6, 1}}),
	} {
		if name == "fail/version" {
			b = binary.LittleEndian.AppendUint32(nil, 1)
		}
		if _, err := parseACL(b); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

// FuzzParseACL: what parses re-encodes to the same bytes.
func FuzzParseACL(f *testing.F) {
	f.Add(encodeACL([]aclEntry{{aclUserObj, 6, 0}, {aclUser, 2, 4202}, {aclOther, 0, 0}}))
	f.Add([]byte{2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := parseACL(b)
		if err != nil {
			return
		}
		if got := encodeACL(e); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded %x, want %x", got, b)
		}
	})
}
