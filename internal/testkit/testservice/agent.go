package testservice

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
)

// Agent is the client side of a test: it sends request frames to a service
// over the HTTP bridge (§2.4), signing the proof of possession (§6.5) with Key
// whenever grants go with a request.
type Agent struct {
	// URL is the service's bridge endpoint.
	URL string
	// Service is the service id the proofs are bound to (the aud).
	Service string
	// Key is the agent's own key, the holder of the grants it presents.
	Key ed25519.PrivateKey
	// HTTP is the client to use; nil means http.DefaultClient.
	HTTP *http.Client

	seq atomic.Int64
}

// Reply is a reply frame: its exact bytes and the fields tests look at.
type Reply struct {
	Raw       []byte                `json:"-"`
	Kind      string                `json:"kind"`
	Re        string                `json:"re"`
	Code      string                `json:"code"`
	Message   string                `json:"message"`
	Need      []grant.Caveat        `json:"need"`
	Consent   *grant.ConsentRequest `json:"consent"`
	Proposals []json.RawMessage     `json:"proposals"`
	Receipt   json.RawMessage       `json:"receipt"`
	Replay    bool                  `json:"replay"`
	Data      json.RawMessage       `json:"data"`
}

// Proposal returns the first proposal of a PROPOSALS reply, parsed.
func (r *Reply) Proposal() (*grant.Proposal, error) {
	if r.Kind != "PROPOSALS" || len(r.Proposals) == 0 {
		return nil, fmt.Errorf("not a PROPOSALS reply: %s", r.Raw)
	}
	return grant.ParseProposal(r.Proposals[0])
}

// ReceiptID returns the id of a RECEIPT reply's receipt, or "".
func (r *Reply) ReceiptID() string {
	var rc struct {
		ID string `json:"id"`
	}
	json.Unmarshal(r.Receipt, &rc)
	return rc.ID
}

// Do sends one request frame: verb, the fields given, and when grants is
// not empty, the grants with a proof for target signed now.
func (a *Agent) Do(verb string, fields map[string]any, target string, grants []string) (*Reply, error) {
	f := map[string]any{}
	for k, v := range fields {
		f[k] = v
	}
	f["parley"] = 1
	f["id"] = "a" + strconv.FormatInt(a.seq.Add(1), 10)
	f["verb"] = verb
	if len(grants) > 0 {
		p, err := grant.MakeProof(a.Key, a.Service, verb, target, time.Now().Unix())
		if err != nil {
			return nil, err
		}
		f["grants"], f["proof"] = grants, p
	}
	body, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	hc := a.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Post(a.URL, "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxFrame+1))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		return nil, fmt.Errorf("bridge answered %s (%s): %s", resp.Status, resp.Header.Get("Content-Type"), raw)
	}
	raw = bytes.TrimSuffix(raw, []byte("\n"))
	r := &Reply{Raw: raw}
	if err := json.Unmarshal(raw, r); err != nil {
		return nil, fmt.Errorf("reply %q: %w", raw, err)
	}
	return r, nil
}

// Ask sends ASK for capability.
func (a *Agent) Ask(capability string, grants ...string) (*Reply, error) {
	return a.Do("ASK", map[string]any{"capability": capability}, capability, grants)
}

// Intent sends INTENT for capability with params.
func (a *Agent) Intent(capability string, params any, grants ...string) (*Reply, error) {
	return a.Do("INTENT", map[string]any{"capability": capability, "params": params}, capability, grants)
}

// Commit sends COMMIT of proposal id with hash.
func (a *Agent) Commit(id, hash string, grants ...string) (*Reply, error) {
	return a.Do("COMMIT", map[string]any{"proposal": id, "hash": hash}, hash, grants)
}

// Undo sends UNDO of receipt id.
func (a *Agent) Undo(receipt string, grants ...string) (*Reply, error) {
	return a.Do("UNDO", map[string]any{"receipt": receipt}, receipt, grants)
}
