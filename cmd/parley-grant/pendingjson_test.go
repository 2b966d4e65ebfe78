package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
)

// TestPendingJSONProposalRehashes: issue 20 item 8. An approver that checks
// a consent's proposal against its hash before approving re-hashes
// `pending --json`'s scope.proposal as §5.1 says (every member but hash and
// data). Every member the hash covers must therefore come out exactly as
// the service sent it: "from": null and "to": null, an empty field, a
// member the daemon does not know. They were dropped (omitempty), so a
// genuine consent failed the check.
func TestPendingJSONProposalRehashes(t *testing.T) {
	d := startDaemon(t, journeyPolicy, nil)
	principal := d.srv.Principal()
	keyPath, _ := writeAgentKey(t, t.TempDir())
	env := cliEnv(t, d.sock, keyPath)

	exp := time.Now().Add(10 * time.Minute).Unix()
	body := fmt.Sprintf(`{"id":"p-null","capability":"shop.order","summary":"Clear the note on order 7",`+
		`"effects":[{"op":"update","target":"order/7","field":"note","from":null,"to":null,"detail":""},`+
		`{"op":"other","target":"order/7","from":true,"to":"x","detail":"a\u00e9\u202e"}],`+
		`"cost":null,"risk":"low","undo":null,"expires":%d,"x-vendor":{"b":[1,null,{}],"a":""}}`, exp)
	hash, err := grant.ProposalHash([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	proposal := body[:len(body)-1] + `,"hash":"` + hash + `","data":{"cart":"c1"}}`
	consent := fmt.Sprintf(`{"proposal":"p-null","hash":%q,"service":"shop.example","capability":"shop.order","principal":%q,"summary":"Clear the note","expires":%d}`,
		hash, principal, exp)
	dir := t.TempDir()
	consentFile, proposalFile := filepath.Join(dir, "consent.json"), filepath.Join(dir, "proposal.json")
	os.WriteFile(consentFile, []byte(consent), 0o600)
	os.WriteFile(proposalFile, []byte(proposal), 0o600)

	bg := startCLI(t, env, "consent", "--service", "shop.example", "--consent", consentFile, "--proposal", proposalFile)
	id, _ := bg.matchCode(t)
	r := cli(t, env, 0, "pending", "--json")
	var list []struct {
		ID    string `json:"id"`
		Scope struct {
			Service  string          `json:"service"`
			Proposal json.RawMessage `json:"proposal"`
		} `json:"scope"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("pending --json: %v\n%s", err, r.stdout)
	}
	if len(list) != 1 || list[0].ID != id || list[0].Scope.Proposal == nil {
		t.Fatalf("pending --json lists %s", r.stdout)
	}
	p := list[0].Scope.Proposal
	var named struct {
		Hash string `json:"hash"`
	}
	if err := json.Unmarshal(p, &named); err != nil {
		t.Fatal(err)
	}
	got, err := grant.ProposalHash(p)
	if err != nil {
		t.Fatalf("scope.proposal does not hash: %v\n%s", err, p)
	}
	if got != hash || named.Hash != hash {
		t.Errorf("scope.proposal re-hashes to %s and names %s; the service's hash is %s\nscope.proposal: %s", got, named.Hash, hash, p)
	}
	if list[0].Scope.Service != "shop.example" {
		t.Errorf("scope.service = %q", list[0].Scope.Service)
	}
}
