package transit

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openbao/openbao/api/v2"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
)

// The opt-in tests against a real OpenBao or Vault (docs/key-service.md,
// "Testing against a real server"). No registry reachable here serves a
// server, so they skip, by name, unless the variables are set; they never
// fail for a missing server, even under PARLEY_REQUIRE_PEERS=1.
const (
	envAddr       = "PARLEY_TEST_BAO_ADDR"
	envToken      = "PARLEY_TEST_BAO_TOKEN"
	envCACert     = "PARLEY_TEST_BAO_CACERT"
	envAddrs      = "PARLEY_TEST_BAO_ADDRS"
	envKillLeader = "PARLEY_TEST_BAO_KILL_LEADER"
	envHADuration = "PARLEY_TEST_BAO_HA_SECONDS"
)

// realMount enables a transit engine at a mount of its own for this test
// and removes it (and with it every key in it) at the end.
func realMount(t *testing.T, addr, token string) string {
	t.Helper()
	conf := api.NewConfig()
	conf.Address = addr
	if ca := os.Getenv(envCACert); ca != "" {
		if err := conf.ConfigureTLS(&api.TLSConfig{CACert: ca}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := api.NewClient(conf)
	if err != nil {
		t.Fatal(err)
	}
	c.SetToken(token)
	b := make([]byte, 4)
	rand.Read(b)
	mount := "parley-test-" + hex.EncodeToString(b)
	if err := c.Sys().Mount(mount, &api.MountInput{Type: "transit"}); err != nil {
		t.Fatalf("enabling transit at %s: %v", mount, err)
	}
	t.Cleanup(func() {
		if err := c.Sys().Unmount(mount); err != nil {
			t.Errorf("removing the test mount %s: %v", mount, err)
		}
	})
	return mount
}

func realConfig(t *testing.T, addrs []string, mount, token string) signer.TransitConfig {
	t.Helper()
	dir := t.TempDir()
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	c := signer.Config{Backend: signer.Transit, Transit: signer.TransitConfig{
		Addresses: addrs, Mount: mount, Name: "principal", TokenFile: tok, CAFile: os.Getenv(envCACert)}}
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	return c.Transit
}

// TestRealServer creates a transit key in a real server, signs with it,
// imports a file key and signs with that, then removes its mount.
func TestRealServer(t *testing.T) {
	addr, token := os.Getenv(envAddr), os.Getenv(envToken)
	if addr == "" || token == "" {
		t.Skipf("TestRealServer needs a real OpenBao or Vault: set %s and %s (docs/key-service.md)", envAddr, envToken)
	}
	mount := realMount(t, addr, token)
	cfg := realConfig(t, []string{addr}, mount, token)
	ctx := context.Background()

	res, err := Init(ctx, cfg, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(cfg, Options{Principal: res.Public, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mustSign(t, s, res.Public)
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}

	seed := make([]byte, 32)
	rand.Read(seed)
	cfg.Name = "imported"
	imp, err := Init(ctx, cfg, token, seed)
	if err != nil {
		t.Fatal(err)
	}
	want := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	if !imp.Public.Equal(want) {
		t.Fatal("the imported key's public key is not the file key's")
	}
	s2, err := Open(cfg, Options{Principal: want})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	mustSign(t, s2, want)
}

// TestRealLeaderKill signs continuously through a 3-node raft cluster while
// PARLEY_TEST_BAO_KILL_LEADER runs. Every call must end: with a signature
// that verifies, or with an unavailable refusal; none may hang or fail any
// other way, and signing must resume after the kill.
func TestRealLeaderKill(t *testing.T) {
	addrs, token, kill := os.Getenv(envAddrs), os.Getenv(envToken), os.Getenv(envKillLeader)
	if addrs == "" || token == "" || kill == "" {
		t.Skipf("TestRealLeaderKill needs a 3-node cluster: set %s, %s and %s (docs/key-service.md)", envAddrs, envToken, envKillLeader)
	}
	list := strings.Split(addrs, ",")
	mount := realMount(t, list[0], token)
	cfg := realConfig(t, list, mount, token)
	res, err := Init(context.Background(), cfg, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(cfg, Options{Principal: res.Public, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	run := 30 * time.Second
	if v := os.Getenv(envHADuration); v != "" {
		var secs int
		fmt.Sscan(v, &secs)
		run = time.Duration(secs) * time.Second
	}
	var signed, refused atomic.Int64
	var lastOK atomic.Int64
	var mu sync.Mutex
	var other []error
	var gap time.Duration
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				msg := []byte(fmt.Sprintf("grant %d/%d", i, n))
				t0 := time.Now()
				sig, err := s.Sign(nil, msg, crypto.Hash(0))
				var u *signer.UnavailableError
				switch {
				case err == nil && ed25519.Verify(res.Public, msg, sig):
					signed.Add(1)
					now := time.Now().UnixNano()
					if prev := lastOK.Swap(now); prev != 0 {
						mu.Lock()
						gap = max(gap, time.Duration(now-prev))
						mu.Unlock()
					}
				case errors.As(err, &u):
					refused.Add(1)
				default:
					mu.Lock()
					other = append(other, fmt.Errorf("call %d/%d: %v (verify failed: %v)", i, n, err, err == nil))
					mu.Unlock()
				}
				if d := time.Since(t0); d > 2*cfg.Timeout.Duration {
					mu.Lock()
					other = append(other, fmt.Errorf("call %d/%d took %v, past its deadline", i, n, d))
					mu.Unlock()
				}
			}
		}(i)
	}
	time.Sleep(run / 4) // let signing settle before the kill; the test measures what follows
	out, err := exec.Command("sh", "-c", kill).CombinedOutput()
	if err != nil {
		t.Errorf("%s: %v: %s", envKillLeader, err, out)
	}
	killedAt := signed.Load()
	time.Sleep(run * 3 / 4) // keep signing through the election
	close(stop)
	wg.Wait()
	t.Logf("signed %d, refused unavailable %d, longest gap between signatures %v", signed.Load(), refused.Load(), gap)
	for _, err := range other {
		t.Error(err)
	}
	if signed.Load() <= killedAt {
		t.Fatal("no signature after the leader was killed")
	}
}
