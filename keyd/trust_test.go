package keyd

import (
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/parley-keyd/parley-keyd/internal/duration"
	"github.com/parley-keyd/parley-keyd/internal/filetrust"
)

// fileKey matches the configuration keys that name a file the daemon reads,
// runs or loads. A new such key must be in TrustedFiles: this test finds it
// by its name, so that it cannot skip the check of property 12.
var fileKey = regexp.MustCompile(`(_file|_command|^module|^policy)$`)

// TestTrustedFilesCoverEveryFileKey sets every such key of Config, however
// deep, to a path of its own and wants TrustedFiles to list each.
func TestTrustedFilesCoverEveryFileKey(t *testing.T) {
	var c Config
	var want []string
	var walk func(v reflect.Value, prefix string)
	walk = func(v reflect.Value, prefix string) {
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if name == "" || name == "-" {
				continue
			}
			key := prefix + name
			fv := v.Field(i)
			switch {
			case fv.Kind() == reflect.Struct && f.Type != reflect.TypeOf(duration.Value{}):
				walk(fv, key+".")
			case !fileKey.MatchString(name):
			case fv.Kind() == reflect.String:
				p := "/trusted/" + key
				fv.SetString(p)
				want = append(want, p)
			case fv.Kind() == reflect.Slice && fv.Type().Elem().Kind() == reflect.String:
				p := "/trusted/" + key
				fv.Set(reflect.ValueOf([]string{p, "--arg"}))
				want = append(want, p)
			default:
				t.Errorf("%s: a file key of kind %s", key, fv.Kind())
			}
		}
	}
	walk(reflect.ValueOf(&c).Elem(), "")
	if len(want) < 9 {
		t.Fatalf("found only %d file keys: %v", len(want), want)
	}
	var got []string
	for _, f := range c.TrustedFiles() {
		got = append(got, f.Path)
	}
	for _, p := range want {
		if !slices.Contains(got, p) {
			t.Errorf("TrustedFiles does not list %s: its file is never checked", strings.TrimPrefix(p, "/trusted/"))
		}
	}
}

// TestLoadConfigRefusesUnsafeNamedFiles: each kind of file the
// configuration names is checked at load, so serve, reload and status
// refuse it alike.
func TestLoadConfigRefusesUnsafeNamedFiles(t *testing.T) {
	dir := t.TempDir()
	loose := filepath.Join(dir, "loose")
	os.WriteFile(loose, []byte("x\n"), 0o600)
	os.Chmod(loose, 0o666)
	os.WriteFile(filepath.Join(dir, "policy.toml"), []byte(testPolicy), 0o600)
	for _, tc := range []struct{ what, table string }{
		{"audit.witness_command", "[audit]\nwitness_command = [\"" + loose + "\"]\n"},
		// A script given to an interpreter is the program as much.
		{"audit.witness_command", "[audit]\nwitness_command = [\"/bin/sh\", \"-e\", \"" + loose + "\"]\n"},
		{"audit.witness_file", "[audit]\nwitness_file = \"" + loose + "\"\n"},
		{"key.transit.ca_file", "[key]\nbackend = \"transit\"\n[key.transit]\naddresses = [\"https://bao:8200\"]\ntoken_file = \"/nonexistent/t\"\nca_file = \"" + loose + "\"\n"},
		{"key.transit.token_file", "[key]\nbackend = \"transit\"\n[key.transit]\naddresses = [\"https://bao:8200\"]\ntoken_file = \"" + loose + "\"\n"},
		{"key.pkcs11.module", "[key]\nbackend = \"pkcs11\"\n[key.pkcs11]\nmodule = \"" + loose + "\"\ntoken = \"t\"\npin_file = \"/nonexistent/p\"\n"},
		{"key.pkcs11.pin_file", "[key]\nbackend = \"pkcs11\"\n[key.pkcs11]\nmodule = \"/nonexistent/m.so\"\ntoken = \"t\"\npin_file = \"" + loose + "\"\n"},
		{"policy", "policy = \"" + loose + "\"\n"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			path := filepath.Join(dir, "config.toml")
			os.WriteFile(path, []byte(tc.table), 0o600)
			_, err := LoadConfig(path)
			var te *TrustError
			var ue *filetrust.UnsafeError
			if !errors.As(err, &te) || !errors.As(err, &ue) || te.Problems[0].What != tc.what || ue.Path != loose {
				t.Fatalf("LoadConfig = %v, want the unsafe %s refused", err, tc.what)
			}
			if te.Config == nil {
				t.Error("no configuration for status to report on")
			}
		})
	}
	// The configuration file itself.
	path := filepath.Join(dir, "config.toml")
	os.WriteFile(path, nil, 0o600)
	os.Chmod(path, 0o622)
	var ue *filetrust.UnsafeError
	if _, err := LoadConfig(path); !errors.As(err, &ue) || ue.Path != path {
		t.Fatalf("LoadConfig of a file others may write = %v", err)
	}
}

// TestCheckDaemonUser: the daemon's user has no role, whether named, by
// uid, through a group it is in or as a dual-role user; root is exempt.
func TestCheckDaemonUser(t *testing.T) {
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skip("no user nobody")
	}
	uid64, _ := strconv.ParseUint(u.Uid, 10, 32)
	uid := uint32(uid64)
	g, err := user.LookupGroupId(u.Gid)
	if err != nil {
		t.Skip("nobody has no group")
	}
	for _, tc := range []struct {
		name   string
		access Access
		role   string
	}{
		{"fail/agent-by-name", Access{AgentUsers: []string{"nobody"}}, "an agent"},
		{"fail/agent-by-uid", Access{AgentUsers: []string{u.Uid}}, "an agent"},
		{"fail/agent-by-group", Access{AgentGroups: []string{g.Name}}, "an agent"},
		{"fail/approver", Access{ApproverUsers: []string{"nobody"}}, "an approver"},
		{"fail/approver-by-gid", Access{ApproverGroups: []string{u.Gid}}, "an approver"},
		{"fail/dual-role", Access{AgentUsers: []string{"nobody"}, ApproverUsers: []string{"nobody"}, DualRoleUsers: []string{"nobody"}}, "a dual-role user"},
		{"fail/dual-role-listed-only", Access{DualRoleUsers: []string{"nobody"}}, "a dual-role user"},
		{"ok/others", Access{AgentUsers: []string{"root"}, ApproverUsers: []string{"daemon"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Config{Access: tc.access}
			err := c.CheckDaemonUser(uid)
			var own *OwnUserError
			switch {
			case tc.role == "" && err != nil:
				t.Fatal(err)
			case tc.role != "" && (!errors.As(err, &own) || own.Role != tc.role || own.User != "nobody"):
				t.Fatalf("CheckDaemonUser = %v, want nobody refused as %s", err, tc.role)
			}
			if err := c.CheckDaemonUser(0); err != nil {
				t.Errorf("root: %v", err)
			}
		})
	}
}
