package transit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/openbao/openbao/api/v2"
	"github.com/parley-keyd/parley-keyd/keyd/signer"
)

// auth holds the daemon's token for the key service and keeps it alive: a
// renewable token is renewed when two thirds of its lifetime have passed; a
// token that cannot be renewed (any more) is replaced before it lapses, by
// logging in again with AppRole or by reading the token file again (which a
// separate agent may rewrite).
type auth struct {
	s *Signer

	mu        sync.Mutex
	token     string
	renewable bool
	ttl       time.Duration // the lifetime granted at the last login or renewal; 0: none
	expires   time.Time     // zero: the token does not expire
	kicked    chan struct{}
}

// kick asks the keeper to get a new token now (after a 403).
func (a *auth) kick() {
	a.mu.Lock()
	ch := a.kicked
	a.mu.Unlock()
	if ch != nil {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (a *auth) setToken(tok string, ttl time.Duration, renewable bool) {
	a.mu.Lock()
	a.token, a.ttl, a.renewable = tok, ttl, renewable
	if ttl > 0 {
		a.expires = time.Now().Add(ttl)
	} else {
		a.expires = time.Time{}
	}
	a.mu.Unlock()
	for _, c := range a.s.clients {
		c.SetToken(tok)
	}
}

// login gets a token: from the token file (checked with lookup-self, which
// also tells its lifetime) or by AppRole login.
func (a *auth) login(ctx context.Context) error {
	cfg := a.s.cfg
	if cfg.TokenFile != "" {
		tok, err := signer.ReadCredential(cfg.TokenFile)
		if err != nil {
			return fmt.Errorf("token: %w", err)
		}
		token := string(tok)
		clear(tok)
		var sec *api.Secret
		err = a.s.attempt(ctx, func(ctx context.Context, c *api.Client) error {
			cc, err := c.Clone()
			if err != nil {
				return &localError{err}
			}
			cc.SetToken(token)
			sec, err = cc.Auth().Token().LookupSelfWithContext(ctx)
			return err
		})
		if err != nil {
			return fmt.Errorf("token lookup: %w", err)
		}
		ttl, _ := sec.TokenTTL()
		renewable, _ := sec.TokenIsRenewable()
		a.setToken(token, ttl, renewable)
		return nil
	}
	roleID, err := signer.ReadCredential(cfg.RoleIDFile)
	if err != nil {
		return fmt.Errorf("AppRole role_id: %w", err)
	}
	defer clear(roleID)
	secretID, err := signer.ReadCredential(cfg.SecretIDFile)
	if err != nil {
		return fmt.Errorf("AppRole secret_id: %w", err)
	}
	defer clear(secretID)
	var sec *api.Secret
	err = a.s.attempt(ctx, func(ctx context.Context, c *api.Client) error {
		var err error
		sec, err = c.Logical().WriteWithContext(ctx, "auth/"+cfg.AppRoleMount+"/login",
			map[string]any{"role_id": string(roleID), "secret_id": string(secretID)})
		if err == nil && (sec == nil || sec.Auth == nil || sec.Auth.ClientToken == "") {
			err = &localError{errors.New("the AppRole login reply has no token")}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("AppRole login: %w", err)
	}
	a.setToken(sec.Auth.ClientToken, time.Duration(sec.Auth.LeaseDuration)*time.Second, sec.Auth.Renewable)
	return nil
}

// renew extends the token. It reports false when the service granted less
// than half of what was asked, which means the token is near its maximum
// lifetime and must be replaced.
func (a *auth) renew(ctx context.Context) (bool, error) {
	a.mu.Lock()
	ttl := a.ttl
	a.mu.Unlock()
	var sec *api.Secret
	err := a.s.attempt(ctx, func(ctx context.Context, c *api.Client) error {
		var err error
		sec, err = c.Auth().Token().RenewSelfWithContext(ctx, int(ttl.Seconds()))
		if err == nil && (sec == nil || sec.Auth == nil) {
			err = &localError{errors.New("the renewal reply has no auth")}
		}
		return err
	})
	if err != nil {
		return false, err
	}
	got := time.Duration(sec.Auth.LeaseDuration) * time.Second
	a.mu.Lock()
	a.expires = time.Now().Add(got)
	a.mu.Unlock()
	return got*2 >= ttl, nil
}

// next is how long the keeper may wait before it acts: until two thirds of
// the token's lifetime have passed (at least a second), or for ever for a
// token that does not expire.
func (a *auth) next() (time.Duration, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.expires.IsZero() || a.ttl == 0 {
		return 0, false
	}
	left := time.Until(a.expires)
	return max(left-a.ttl/3, time.Second), true
}

// run keeps the token alive until the signer closes. A failed renewal or
// login is tried again every few seconds.
func (a *auth) run() {
	kicked := make(chan struct{}, 1)
	a.mu.Lock()
	a.kicked = kicked
	a.mu.Unlock()
	timeout := a.s.cfg.Timeout.Duration
	failed := false
	for {
		wait, ok := a.next()
		if failed || !a.s.ready.Load() {
			wait, ok = retryDown, true
		}
		var timer *time.Timer
		var fire <-chan time.Time
		if ok {
			timer = time.NewTimer(wait)
			fire = timer.C
		}
		select {
		case <-a.s.stop:
			if timer != nil {
				timer.Stop()
			}
			return
		case <-kicked:
			failed = !a.refresh(timeout, true)
		case <-fire:
			if !a.s.ready.Load() {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				if err := a.s.ensure(ctx); err == nil {
					a.s.logf("transit: the key service answers; key version %d", a.s.version.Load())
				}
				cancel()
				continue
			}
			failed = !a.refresh(timeout, false)
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// refresh renews the token, or gets a new one when it cannot be renewed or
// forced is set. It reports whether the token is good; failures are logged.
func (a *auth) refresh(timeout time.Duration, forced bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	a.mu.Lock()
	renewable := a.renewable
	a.mu.Unlock()
	if renewable && !forced {
		ok, err := a.renew(ctx)
		if err == nil && ok {
			return true
		}
		if err != nil {
			a.s.logf("transit: renewing the token failed, getting a new one: %v", err)
		}
	}
	if err := a.login(ctx); err != nil {
		a.s.logf("transit: getting a new token failed (trying again in %v): %v", retryDown, err)
		return false
	}
	return true
}
