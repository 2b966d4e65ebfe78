package grant

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
)

// Proposal is a service's plan in answer to an INTENT (§5.1). Unknown
// fields are ignored (§2.1), but they are covered by the hash.
type Proposal struct {
	ID         string          `json:"id"`
	Capability string          `json:"capability"`
	Summary    string          `json:"summary"`
	Effects    []Effect        `json:"effects"`
	Cost       *Money          `json:"cost"`
	Risk       string          `json:"risk"`
	Undo       *Undo           `json:"undo"`
	Expires    int64           `json:"expires"`
	Hash       string          `json:"hash,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`
}

// Effect is one principal-observable change a commit will cause (§5.1).
// From and To are scalars: nil, bool, string or an integer json.Number.
type Effect struct {
	Op     string `json:"op"`
	Target string `json:"target"`
	Field  string `json:"field,omitempty"`
	From   any    `json:"from,omitempty"`
	To     any    `json:"to,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// Undo is a proposal's undo window in seconds from commit.
type Undo struct {
	Window int64 `json:"window"`
}

// The effect ops of §5.1.
var effectOps = map[string]bool{
	"create": true, "update": true, "delete": true, "send": true, "charge": true, "other": true,
}

// Facts returns what caveats look at in p, for Context.Proposal. Hash is the
// proposal's hash field; compute it with ProposalHash when it is not trusted.
func (p *Proposal) Facts() *ProposalFacts {
	return &ProposalFacts{Hash: p.Hash, Cost: p.Cost, Risk: p.Risk}
}

// ProposalHash returns b64url(sha256(canonical(proposal without "hash" and
// "data"))) for a proposal given as JSON (§5.1). It refuses a proposal that
// is not an object, has duplicate keys, or has a non-integer number outside
// data.
func ProposalHash(raw []byte) (string, error) {
	v, err := parseJSON(raw)
	if err != nil {
		return "", fmt.Errorf("proposal: %w", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return "", errors.New("proposal: not an object")
	}
	return hashProposalMap(m)
}

func hashProposalMap(m map[string]any) (string, error) {
	rest := make(map[string]any, len(m))
	for k, v := range m {
		if k != "hash" && k != "data" {
			rest[k] = v
		}
	}
	c, err := Canonical(rest)
	if err != nil {
		return "", fmt.Errorf("proposal: %w", err)
	}
	sum := sha256.Sum256(c)
	return b64.EncodeToString(sum[:]), nil
}

// ParseProposal parses and checks the shape of a proposal (§5.1): id and
// capability non-empty strings; summary a string; effects a list whose ops
// are create, update, delete, send, charge or other, with string target,
// field and detail and scalar from and to; cost null or {amount: int,
// currency: string}; risk low, medium or high; undo null or {window: int ≥
// 0}; expires an integer; and no non-integer number anywhere but in data,
// so that the proposal can be hashed.
func ParseProposal(raw []byte) (*Proposal, error) {
	v, err := parseJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("proposal: %w", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("proposal: not an object")
	}
	if _, err := hashProposalMap(m); err != nil {
		return nil, err
	}
	if err := checkProposalShape(m); err != nil {
		return nil, fmt.Errorf("proposal: %w", err)
	}
	var p Proposal
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("proposal: %w", err)
	}
	return &p, nil
}

func checkProposalShape(m map[string]any) error {
	for _, k := range []string{"id", "capability"} {
		if s, ok := m[k].(string); !ok || s == "" {
			return fmt.Errorf("%s: want a non-empty string", k)
		}
	}
	if _, ok := m["summary"].(string); !ok {
		return errors.New("summary: want a string")
	}
	effects, ok := m["effects"].([]any)
	if !ok {
		return errors.New("effects: want a list")
	}
	for i, e := range effects {
		em, ok := e.(map[string]any)
		if !ok {
			return fmt.Errorf("effects[%d]: want an object", i)
		}
		if op, _ := em["op"].(string); !effectOps[op] {
			return fmt.Errorf("effects[%d].op: want create, update, delete, send, charge or other", i)
		}
		if _, ok := em["target"].(string); !ok {
			return fmt.Errorf("effects[%d].target: want a string", i)
		}
		for _, k := range []string{"field", "detail"} {
			if x, present := em[k]; present {
				if _, ok := x.(string); !ok {
					return fmt.Errorf("effects[%d].%s: want a string", i, k)
				}
			}
		}
		for _, k := range []string{"from", "to"} {
			switch em[k].(type) {
			case nil, bool, string, json.Number:
			default:
				return fmt.Errorf("effects[%d].%s: want a scalar", i, k)
			}
		}
	}
	switch c := m["cost"].(type) {
	case nil:
		if _, present := m["cost"]; !present {
			return errors.New("cost: missing (use null for free)")
		}
	case map[string]any:
		if _, err := intField(c, "amount"); err != nil {
			return fmt.Errorf("cost.%w", err)
		}
		if _, ok := c["currency"].(string); !ok {
			return errors.New("cost.currency: want a string")
		}
	default:
		return errors.New("cost: want null or {amount, currency}")
	}
	if r, _ := m["risk"].(string); r == "" {
		return errors.New("risk: want low, medium or high")
	} else if _, ok := RiskRank(r); !ok {
		return fmt.Errorf("risk: %q is not low, medium or high", r)
	}
	switch u := m["undo"].(type) {
	case nil:
		if _, present := m["undo"]; !present {
			return errors.New("undo: missing (use null when irreversible)")
		}
	case map[string]any:
		w, err := intField(u, "window")
		if err != nil {
			return fmt.Errorf("undo.%w", err)
		}
		if w < 0 {
			return errors.New("undo.window: negative")
		}
	default:
		return errors.New("undo: want null or {window}")
	}
	if _, err := intField(m, "expires"); err != nil {
		return err
	}
	if h, present := m["hash"]; present {
		if _, ok := h.(string); !ok {
			return errors.New("hash: want a string")
		}
	}
	return nil
}

func intField(m map[string]any, k string) (int64, error) {
	n, ok := m[k].(json.Number)
	if !ok {
		return 0, fmt.Errorf("%s: want an integer", k)
	}
	v, err := parseIntText(string(n))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", k, err)
	}
	return v, nil
}

// CheckConsent is the check a consent request must pass before it is shown
// to a human (§6.6): proposalRaw is the proposal the agent received from
// service. It returns the parsed proposal when c's hash equals the
// recomputed hash of the proposal (and the proposal's own hash field, if
// any), c names the proposal's id, service and capability, the proposal has
// not expired at now, and c does not outlive it. Errors are *Error:
// invalid_params for a malformed proposal, conflict for a mismatch,
// expired for a proposal or request past its expiry.
func CheckConsent(c ConsentRequest, service string, proposalRaw []byte, now int64) (*Proposal, error) {
	p, err := ParseProposal(proposalRaw)
	if err != nil {
		return nil, newError(CodeBadInput, err.Error())
	}
	h, err := ProposalHash(proposalRaw)
	if err != nil {
		return nil, newError(CodeBadInput, err.Error())
	}
	conflict := func(msg string) error { return newError(CodeConflict, "consent: "+msg) }
	switch {
	case c.Hash != h:
		return nil, conflict("the hash does not match the proposal")
	case p.Hash != "" && p.Hash != h:
		return nil, conflict("the proposal's hash field does not match its contents")
	case c.Proposal != p.ID:
		return nil, conflict("the proposal id does not match")
	case c.Service != service:
		return nil, conflict("the service does not match the one that sent the proposal")
	case c.Capability != p.Capability:
		return nil, conflict("the capability does not match the proposal")
	case now >= p.Expires:
		return nil, newError(CodeExpired, "consent: the proposal has expired")
	case c.Expires > p.Expires:
		return nil, conflict("the request outlives the proposal")
	case now >= c.Expires:
		return nil, newError(CodeExpired, "consent: the request has expired")
	}
	return p, nil
}
