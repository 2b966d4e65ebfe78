package keyd

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/internal/testkit/testkeys"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// forgeDaemonProof makes, with no private key, a proof by the small-order
// key for (verb, target) with the daemon's principal as audience, varying ts
// inside the proof window until the keyless signature verifies.
func forgeDaemonProof(t *testing.T, key ed25519.PublicKey, principal, verb, target string) string {
	t.Helper()
	now := time.Now().Unix() - proofWindow/2
	i, ok := testkeys.Forge(key, proofWindow, func(i int) []byte {
		return proofMessage(principal, verb, target, now+int64(i))
	})
	if !ok {
		t.Fatal("no keyless proof in the window")
	}
	p := grant.Proof{Key: grant.FormatPublicKey(key), Ts: now + int64(i),
		Sig: b64url(testkeys.ForgedSig())}
	b, _ := json.Marshal(p)
	return string(b)
}

// TestKeylessGrantRefused is the attack of issue 10 item 1 over the real
// socket: an agent asks for a grant, and for a consent, held by a
// small-order key, with a proof it forged without any private key. Such a
// grant would be usable by anyone who sees it. Every encoding of every
// small-order point is refused as invalid_params, and nothing is issued or
// queued.
func TestKeylessGrantRefused(t *testing.T) {
	h := newHarness(t)
	r := h.raw()
	principal := h.srv.Principal()
	exp := time.Now().Unix() + 600
	for i, k := range testkeys.SmallOrder() {
		holder := grant.FormatPublicKey(k.Key)
		t.Run("fail/grant/"+k.Name, func(t *testing.T) {
			body := `{"holder":"` + holder + `","caveats":[{"svc":["cal.example"]},{"can":["calendar.*"]},{"exp":` + itoa64(exp) + `}]}`
			digest, err := protocol.GrantDigest([]byte(body))
			if err != nil {
				t.Fatal(err)
			}
			proof := forgeDaemonProof(t, k.Key, principal, protocol.ProofVerbGrant, digest)
			id := "g" + itoa64(int64(i))
			r.send(`{"parley":1,"id":"` + id + `","verb":"GRANT","grant":` + body + `,"proof":` + proof + "}\n")
			f := r.read()
			if f.Kind == protocol.KindGrant {
				var res protocol.GrantResult
				json.Unmarshal(f.Data, &res)
				// Show what the issued grant is worth: anyone uses it at
				// the service with another forged proof.
				sp, _ := forgeServiceProof(k.Key, "cal.example", "ASK", "calendar.find")
				err := grant.VerifyProof(sp, "cal.example", "ASK", "calendar.find", time.Now().Unix())
				_, verr := grant.Verify([]string{res.Token}, []string{principal}, grant.Context{Service: "cal.example",
					Verb: "ASK", Capability: "calendar.find", Now: time.Now().Unix(), ProofKey: holder})
				t.Fatalf("the daemon issued a grant to a small-order key (proof at the service: %v, verify: %v)", err, verr)
			}
			if f.Kind != protocol.KindError || f.Code != protocol.CodeInvalidParams || !strings.Contains(f.Message, "holder") {
				t.Errorf("reply = %+v, want invalid_params naming the holder", f)
			}
		})
		t.Run("fail/consent/"+k.Name, func(t *testing.T) {
			pid := "p_k" + itoa64(int64(i))
			prop, hash := proposalFor(t, pid, 4500, exp)
			proof := forgeDaemonProof(t, k.Key, principal, protocol.ProofVerbConsent, hash)
			consent := consentFor(principal, pid, hash, exp)
			id := "c" + itoa64(int64(i))
			r.send(`{"parley":1,"id":"` + id + `","verb":"CONSENT","service":"shop.example","holder":"` + holder +
				`","consent":` + string(consent) + `,"proposal":` + string(prop) + `,"proof":` + proof + "}\n")
			f := r.read()
			if f.Kind != protocol.KindError || f.Code != protocol.CodeInvalidParams || !strings.Contains(f.Message, "holder") {
				t.Errorf("reply = %+v, want invalid_params naming the holder", f)
			}
			if p := h.srv.Pending(); len(p) != 0 {
				t.Errorf("a consent for a small-order key was queued for the human: %+v", p)
			}
		})
	}
	for _, rec := range auditRecords(t, h) {
		if rec.GrantID != "" {
			t.Errorf("audit log records an issued grant: %+v", rec)
		}
	}
}

func forgeServiceProof(key ed25519.PublicKey, aud, verb, target string) (grant.Proof, bool) {
	now := time.Now().Unix() - proofWindow/2
	i, ok := testkeys.Forge(key, proofWindow, func(i int) []byte {
		return proofMessage(aud, verb, target, now+int64(i))
	})
	return grant.Proof{Key: grant.FormatPublicKey(key), Ts: now + int64(i), Sig: b64url(testkeys.ForgedSig())}, ok
}

// proofWindow is §6.5's bound, in seconds, on a proof's age.
const proofWindow = 300

// proofMessage returns the bytes a proof signs (§6.5):
// canonical({"aud", "target", "ts", "verb"}). encoding/json sorts a map's
// keys, and the strings of these tests need no escape that §10 writes
// otherwise.
func proofMessage(aud, verb, target string, ts int64) []byte {
	b, err := json.Marshal(map[string]any{"aud": aud, "verb": verb, "target": target, "ts": ts})
	if err != nil {
		panic(err)
	}
	return b
}

func b64url(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }
