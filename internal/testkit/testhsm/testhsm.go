// Package testhsm gives tests and the benchmark a real PKCS#11 token:
// SoftHSM2 (Debian package softhsm2) with its own configuration and token
// folder, so that nothing touches the machine's tokens.
package testhsm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Module paths where Debian and other distributions install SoftHSM2.
var modulePaths = []string{
	"/usr/lib/softhsm/libsofthsm2.so",
	"/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so",
	"/usr/lib/aarch64-linux-gnu/softhsm/libsofthsm2.so",
	"/usr/lib64/pkcs11/libsofthsm2.so",
	"/usr/lib/pkcs11/libsofthsm2.so",
}

// Token is a SoftHSM2 token in a folder of its own.
type Token struct {
	Module    string // the PKCS#11 library
	Conf      string // the SOFTHSM2_CONF file; set it in the environment of whatever loads Module
	TokensDir string // where SoftHSM2 keeps the token's files
	Label     string
	PIN       string
	SOPIN     string
}

// Find returns the SoftHSM2 module and softhsm2-util, or an error that says
// which package provides them.
func Find() (module, util string, err error) {
	for _, p := range modulePaths {
		if _, err := os.Stat(p); err == nil {
			module = p
			break
		}
	}
	util, lerr := exec.LookPath("softhsm2-util")
	if module == "" || lerr != nil {
		return "", "", fmt.Errorf("SoftHSM2 is not installed (Debian: apt-get install softhsm2)")
	}
	return module, util, nil
}

// New makes a configuration in dir and initializes a token labelled label
// with the user PIN pin in it.
func New(dir, label, pin string) (*Token, error) {
	module, util, err := Find()
	if err != nil {
		return nil, err
	}
	t := &Token{Module: module, Conf: filepath.Join(dir, "softhsm2.conf"), TokensDir: filepath.Join(dir, "tokens"),
		Label: label, PIN: pin, SOPIN: "so-" + pin}
	if err := os.MkdirAll(t.TokensDir, 0o700); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf("directories.tokendir = %s\nobjectstore.backend = file\nlog.level = ERROR\nslots.removable = false\n", t.TokensDir)
	if err := os.WriteFile(t.Conf, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(util, "--init-token", "--free", "--label", label, "--so-pin", t.SOPIN, "--pin", pin)
	cmd.Env = append(os.Environ(), "SOFTHSM2_CONF="+t.Conf)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("softhsm2-util --init-token: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return t, nil
}

// Files returns the folders SoftHSM2 made for the token's objects.
func (t *Token) Files() ([]string, error) {
	return filepath.Glob(filepath.Join(t.TokensDir, "*"))
}

// Remove takes the token away under whatever has it open, as a pulled
// token would go. Each of its folders is first renamed out of TokensDir,
// which is atomic, and only then removed: SoftHSM2 may be writing a file
// into a folder (a session reopened after an error does) while it is
// being removed, and os.RemoveAll then fails with "directory not empty".
// What SoftHSM2 writes into the renamed folder is no longer the token's
// and goes with the test's temporary folder.
func (t *Token) Remove() error {
	files, err := t.Files()
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("token %q has no files in %s", t.Label, t.TokensDir)
	}
	for i, f := range files {
		gone := filepath.Join(filepath.Dir(t.TokensDir), fmt.Sprintf("removed-%s-%d", filepath.Base(f), i))
		if err := os.Rename(f, gone); err != nil {
			return err
		}
		os.RemoveAll(gone) // best effort: the rename already took the token away
	}
	return nil
}
