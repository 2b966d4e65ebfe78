package main

import (
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/internal/testkit/clidocstest"
	"github.com/parley-keyd/parley-keyd/notify/phone"
)

// TestCompletionDevices runs each shell's real completion script against
// the real binary: devices revoke and confirm offer the paired phones' names
// from the state folder (confirm only those waiting for their code).
func TestCompletionDevices(t *testing.T) {
	bin := filepath.Join(binaries(t), "parley-keyd")
	dir := t.TempDir()
	if out, err := exec.Command(bin, "gendocs", "--dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("gendocs: %v\n%s", err, out)
	}
	state := t.TempDir()
	devs := phone.OpenDevices(state)
	now := time.Now()
	pair := func(name string) phone.Device {
		tok, _, err := devs.NewPairing(name, time.Hour, now)
		if err != nil {
			t.Fatal(err)
		}
		d, _, err := devs.Pair(tok, "192.0.2.7", now)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	kitchen := pair("kitchen-phone")
	if _, err := devs.Confirm(kitchen.Name, kitchen.Code, now); err != nil {
		t.Fatal(err)
	}
	pair("desk-phone")

	cases := []struct {
		name  string
		env   []string
		words []string
		want  []string
	}{
		{"ok/revoke", nil, []string{"devices", "--state", state, "revoke", ""}, []string{"desk-phone", "kitchen-phone"}},
		{"ok/revoke-prefix", nil, []string{"devices", "revoke", "--state", state, "k"}, []string{"kitchen-phone"}},
		{"ok/confirm-waiting-only", nil, []string{"devices", "--state", state, "confirm", ""}, []string{"desk-phone"}},
		{"ok/confirm-no-code", nil, []string{"devices", "--state", state, "confirm", "desk-phone", ""}, nil},
		{"ok/state-from-env", []string{"PARLEY_KEYD_STATE=" + state}, []string{"devices", "revoke", ""}, []string{"desk-phone", "kitchen-phone"}},
		{"ok/no-state-nothing", nil, []string{"devices", "--state", filepath.Join(state, "none"), "revoke", ""}, nil},
	}
	for _, sh := range clidocstest.Shells {
		t.Run(sh, func(t *testing.T) {
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					got := clidocstest.Complete(t, dir, sh, bin, tc.env, tc.words...)
					slices.Sort(got)
					if len(got) == 0 {
						got = nil
					}
					if !slices.Equal(got, tc.want) {
						t.Errorf("%s completion of %q offers %q, want %q", sh, tc.words, got, tc.want)
					}
				})
			}
		})
	}
}
