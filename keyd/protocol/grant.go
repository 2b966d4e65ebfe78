package protocol

import (
	"crypto/sha256"
	"encoding/base64"

	"github.com/parley-keyd/parley-keyd/grant"
)

// GrantBody is the "grant" object of GRANT and EXPLAIN: the key the grant
// is for and the caveats asked for, in the spec's shape (§6.3).
type GrantBody struct {
	Holder  string         `json:"holder"`
	Caveats []grant.Caveat `json:"caveats"`
}

// ProofVerbGrant and ProofVerbConsent are the proof verbs for the daemon's
// audience: a proof for GRANT signs the digest of the grant object, a proof
// for CONSENT the consent's proposal hash. The audience is the principal key,
// so a proof made for one daemon is useless at another.
const (
	ProofVerbGrant   = "GRANT"
	ProofVerbConsent = "CONSENT"
)

// GrantDigest is the proof target for a GRANT request: b64url(sha256) of the
// canonical JSON of the "grant" object exactly as sent.
func GrantDigest(raw []byte) (string, error) {
	c, err := grant.CanonicalizeJSON(raw)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// GrantResult is the data of a GRANT reply.
type GrantResult struct {
	Token     string         `json:"token"`
	GrantID   string         `json:"grant_id"`
	Expires   int64          `json:"expires"`
	Caveats   []grant.Caveat `json:"caveats"`
	Decision  string         `json:"decision"` // "auto", "ask" or "remembered"
	Rule      string         `json:"rule,omitempty"`
	Approver  string         `json:"approver,omitempty"`
	Channel   string         `json:"channel,omitempty"`
	Strength  string         `json:"strength,omitempty"`
	Narrowed  []string       `json:"narrowed,omitempty"`
	RequestID string         `json:"request"`
	// Remembered is, for a grant issued under a remembered approval
	// (Decision "remembered"), that approval's id, and Until its end (unix
	// seconds): the agent asks again before Expires, and stops once Until
	// has passed or the approval was forgotten.
	Remembered string `json:"remembered,omitempty"`
	Until      int64  `json:"until,omitempty"`
}

// Event is the data of an EVENT the daemon sends while a request waits.
type Event struct {
	Message  string   `json:"-"`
	Request  string   `json:"request"`
	Code     string   `json:"code"`
	Channels []string `json:"channels"`
	Strong   bool     `json:"strong"`
	Expires  int64    `json:"expires"`
}

// Explanation is the data of an EXPLAIN reply.
type Explanation struct {
	Action   string         `json:"action"`
	Agent    string         `json:"agent"`
	Rule     string         `json:"rule"`
	Reason   string         `json:"reason"`
	Narrowed []string       `json:"narrowed"`
	Channels []string       `json:"channels"`
	Strong   bool           `json:"strong"`
	Caveats  []grant.Caveat `json:"caveats"`
	Allows   []string       `json:"allows"`
	Expires  int64          `json:"expires"`
	// Remembered names the remembered approval under which a GRANT for
	// the request would be issued at once, though the rule asks (Action
	// "ask"); Until is when that approval ends. Empty when none covers it.
	Remembered string `json:"remembered,omitempty"`
	Until      int64  `json:"until,omitempty"`
}
