package transit

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
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

// adminClients returns an OpenBao client with token for each address, as
// an admin's tool would make it (it follows the server's redirects: it is
// the test's, not the daemon's).
func adminClients(t *testing.T, addrs []string, token string) []*api.Client {
	t.Helper()
	var cs []*api.Client
	for _, addr := range addrs {
		conf := api.NewConfig()
		conf.Address = addr
		conf.Timeout = 10 * time.Second
		conf.MaxRetries = 0 // the callers try the next node, or again
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
		cs = append(cs, c)
	}
	return cs
}

// realMount enables a transit engine at a mount of its own for this test,
// through the first node that takes the request, waits until every node
// serves it, and removes it (and with it every key in it) at the end
// through whichever node answers then: the one that took it may be the
// leader the test killed.
func realMount(t *testing.T, addrs []string, token string, wait time.Duration) string {
	t.Helper()
	clients := adminClients(t, addrs, token)
	b := make([]byte, 4)
	rand.Read(b)
	mount := "parley-test-" + hex.EncodeToString(b)
	if err := mountAny(clients, addrs, mount); err != nil {
		t.Fatalf("enabling transit at %s: %v", mount, err)
	}
	t.Cleanup(func() {
		if err := unmountAny(clients, addrs, mount); err != nil {
			t.Errorf("removing the test mount %s: %v", mount, err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := waitServed(ctx, clients, addrs, mount, ""); err != nil {
		t.Fatal(err)
	}
	return mount
}

// mountAny enables transit at mount through the first node that takes it.
func mountAny(clients []*api.Client, addrs []string, mount string) error {
	var errs []error
	for i, c := range clients {
		err := c.Sys().Mount(mount, &api.MountInput{Type: "transit"})
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addrs[i], err))
	}
	return errors.Join(errs...)
}

// unmountAny removes mount through the first node that answers.
func unmountAny(clients []*api.Client, addrs []string, mount string) error {
	var errs []error
	for i, c := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := c.Sys().UnmountWithContext(ctx, mount)
		cancel()
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addrs[i], err))
	}
	return errors.Join(errs...)
}

// waitServed returns once every node serves mount, and with key set, has
// that key: a standby serves reads and signatures from what raft has
// replicated to it, and said 404 before the mount reached it. It fails
// when ctx ends first, naming the node.
func waitServed(ctx context.Context, clients []*api.Client, addrs []string, mount, key string) error {
	for i, c := range clients {
		var last error // the node's own answer, not the deadline cutting a probe short
		for {
			err := served(ctx, c, mount, key)
			if err == nil {
				break
			}
			if ctx.Err() == nil || last == nil {
				last = err
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s does not serve %s yet: %v", addrs[i], mount+"/keys/"+key, last)
			case <-time.After(100 * time.Millisecond): // polling a remote condition, within ctx
			}
		}
	}
	return nil
}

// served returns nil when the node c serves mount (a probe for a key that
// does not exist gets the engine's own 404, not "no handler for route"),
// and with key set, when it returns that key.
func served(ctx context.Context, c *api.Client, mount, key string) error {
	probe := key
	if probe == "" {
		probe = "parley-probe-no-such-key"
	}
	resp, err := c.Logical().ReadRawWithContext(ctx, mount+"/keys/"+probe)
	if resp == nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch {
	case resp.StatusCode == 200:
		return nil
	case resp.StatusCode == 404 && key == "" && !strings.Contains(string(body), "no handler for route"):
		return nil
	}
	return fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
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
	mount := realMount(t, []string{addr}, token, 30*time.Second)
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
	// Whatever the order of the nodes, leader first or not: the mount and
	// the key must have reached every node before signing starts.
	mount := realMount(t, list, token, time.Minute)
	cfg := realConfig(t, list, mount, token)
	res, err := Init(context.Background(), cfg, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := waitServed(ctx, adminClients(t, list, token), list, mount, cfg.Name); err != nil {
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
