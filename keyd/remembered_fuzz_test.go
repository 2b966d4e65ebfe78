package keyd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
)

// FuzzRememberedStoreFile reads store files of any bytes beside an audit
// log that holds one remembered approval and one forgotten: whatever the
// file says, the daemon honours at most that live approval, exactly as
// its record has it (the store's design, remembered.go).
func FuzzRememberedStoreFile(f *testing.F) {
	var once sync.Once
	var dir, live string
	var want *rememberedApproval
	var both storeFile // the store file while both were live
	var real []byte    // the store file the daemon left
	f.Cleanup(func() {
		if dir != "" {
			os.RemoveAll(dir)
		}
	})
	setup := func(t *testing.T) {
		var err error
		if dir, err = os.MkdirTemp("", "parley-remembered-fuzz-"); err != nil {
			t.Fatal(err)
		}
		h := rememberHarness(t, func(c *Config, o *Options) { o.State = dir })
		h.dir = dir
		key := newAgentKey(t)
		a := remember(t, h, key, "2h", mailScope()...)
		b := remember(t, h, key, "2h", grant.Svc("mail.example"), grant.Can("mail.drafts.*"), usd(500), grant.Risk("low"))
		both = readStore(t, h)
		if err := h.client().Forget(ctxT(t), b.Remembered, ""); err != nil {
			t.Fatal(err)
		}
		live = a.Remembered
		m := h.srv.remembered.get(live)
		cp := *m
		cp.scope.Exp, cp.scope.Nbf = 0, 0 // times are not part of a scope
		want = &cp
		stopHarness(t, h)
		if real, err = os.ReadFile(filepath.Join(dir, RememberedFileName)); err != nil {
			t.Fatal(err)
		}
	}
	f.Add([]byte(`{"remembered":[]}`))
	f.Add([]byte(`{"remembered":[{"id":"m_x","seq":3,"hash":"AAAA"}]}`))
	f.Add([]byte(`{"remembered":[{"id":"m_x","seq":1,"hash":""},{"id":"m_y","seq":18446744073709551615,"hash":"x"}]}`))
	f.Add([]byte(`not json`))
	// Stand-ins, replaced by the files the daemon wrote.
	f.Add([]byte("REAL"))
	f.Add([]byte("BOTH"))
	f.Fuzz(func(t *testing.T, b []byte) {
		once.Do(func() { setup(t) })
		if want == nil {
			t.Skip("setup failed")
		}
		mustHonour := false
		switch string(b) {
		case "REAL":
			b, mustHonour = real, true
		case "BOTH":
			b, _ = json.Marshal(both)
			mustHonour = true
		}
		state := t.TempDir()
		if err := os.WriteFile(filepath.Join(state, RememberedFileName), b, 0o600); err != nil {
			t.Fatal(err)
		}
		s := &Server{remembered: newRememberStore(), logf: func(string, ...any) {}, now: time.Now}
		s.loadRemembered(state, filepath.Join(dir, "audit.log"))
		l := s.remembered.live()
		if mustHonour && (len(l) != 1 || l[0].id != live) {
			t.Fatalf("the daemon's own store file %s: honoured %d", b, len(l))
		}
		for _, m := range l {
			if m.id != live || m.seq != want.seq || m.until != want.until || m.agent != want.agent || m.uid != want.uid ||
				!reflect.DeepEqual(m.scope, want.scope) {
				t.Fatalf("honoured %+v from %q; only %s, as recorded, may be", m, b, live)
			}
		}
	})
}
