package signer

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/testkit/testpeer"
)

// TestReadCredentialRefusesAgentGroup: a key service token root owns, mode
// 0640, whose group an agent is in. The check of "others" passed it, yet
// the agent reads the token and signs whatever it likes at the key service
// as the principal, without the daemon, its policy or its log. A
// credential may be readable by a group only when nobody but root and the
// daemon's user is in it.
func TestReadCredentialRefusesAgentGroup(t *testing.T) {
	testpeer.RequirePeers(t)
	uid, gid := testpeer.EnsureUser(t, testpeer.Name("credagent"))
	dir, err := os.MkdirTemp("", "credgroup")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	path := filepath.Join(dir, "bao-token")
	if err := os.WriteFile(path, []byte("s.principal-token\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	os.Chown(path, 0, int(gid))
	os.Chmod(path, 0o640)
	// The agent can read it: the attack is real.
	if setpriv, err := exec.LookPath("setpriv"); err == nil {
		out, err := exec.Command(setpriv, "--reuid="+strconv.Itoa(int(uid)), "--regid="+strconv.Itoa(int(gid)), "--clear-groups", "cat", path).Output()
		if err != nil || !strings.Contains(string(out), "s.principal-token") {
			t.Fatalf("the agent could not read the token (%v): the test set-up is wrong", err)
		}
	}
	if got, err := ReadCredential(path); err == nil {
		t.Fatalf("ReadCredential read %q from a file the agent's group may read", got)
	} else if !strings.Contains(err.Error(), "group") {
		t.Fatalf("ReadCredential = %v, want a refusal naming the group", err)
	}
	// Group root (nobody but root in it) stays allowed.
	os.Chown(path, 0, 0)
	if _, err := ReadCredential(path); err != nil {
		t.Fatalf("a token of root:root, 0640: %v", err)
	}
	// An ACL entry that lets the agent read it is the same door.
	if setfacl, err := exec.LookPath("setfacl"); err == nil {
		os.Chmod(path, 0o600)
		if out, err := exec.Command(setfacl, "-m", "u:"+strconv.Itoa(int(uid))+":r", path).CombinedOutput(); err != nil {
			t.Skipf("setfacl: %v: %s", err, out)
		}
		if _, err := ReadCredential(path); err == nil || !strings.Contains(err.Error(), "ACL") {
			t.Fatalf("ReadCredential of a token an ACL lets the agent read = %v, want a refusal naming the ACL", err)
		}
	}
}
