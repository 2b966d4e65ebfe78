package keyd

import (
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/parley-keyd/parley-keyd/grant"
	"github.com/parley-keyd/parley-keyd/keyd/audit"
	"github.com/parley-keyd/parley-keyd/keyd/checkpoint"
	"github.com/parley-keyd/parley-keyd/keyd/client"
	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// TestAuditVerbForApprovers reads the log through the daemon: an approver
// gets the records as stored and as rendered, a page at a time, filtered by
// grant; an agent is refused, and its refusal is recorded too.
func TestAuditVerbForApprovers(t *testing.T) {
	h := newHarness(t, func(c *Config, o *Options) {
		c.Access = Access{AgentUsers: []string{"nobody-agent"}, ApproverUsers: []string{me(t)}}
	})
	// The harness's user approves only here; the pipeline is asked for the
	// grants directly, as an agent caller.
	c := h.client()
	agentCaller := Caller{Identity: selfIdentity(t), Roles: Roles{Agent: true}}
	var ids []string
	for range 3 {
		ids = append(ids, issueDirect(t, h, agentCaller))
	}
	page, err := c.Audit(ctxT(t), protocol.AuditQuery{Grant: ids[1]})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Records) != 1 || !strings.Contains(page.Lines[0], ids[1]) || !strings.Contains(string(page.Records[0]), `"grant_id":"`+ids[1]+`"`) {
		t.Fatalf("the grant's records: %+v", page)
	}
	var rec audit.Record
	if err := json.Unmarshal(page.Records[0], &rec); err != nil || rec.Kind != audit.KindIssue {
		t.Errorf("record %s: %v", page.Records[0], err)
	}
	// A page of two, then the rest from Next.
	first, err := c.Audit(ctxT(t), protocol.AuditQuery{Limit: 2})
	if err != nil || len(first.Records) != 2 || !first.More {
		t.Fatalf("first page %+v, %v", first, err)
	}
	rest, err := c.Audit(ctxT(t), protocol.AuditQuery{From: first.Next})
	if err != nil || rest.More || len(rest.Records) == 0 {
		t.Fatalf("rest %+v, %v", rest, err)
	}
	if err := json.Unmarshal(rest.Records[0], &rec); err != nil || rec.Seq != first.Next {
		t.Errorf("the second page starts at %d, want %d", rec.Seq, first.Next)
	}
	// Follow: a wait returns once new records are written, and the reader
	// goes on from Next. (Each AUDIT leaves a record of its own, which a
	// follower reads too.)
	found := make(chan struct{})
	var want string
	ready := make(chan struct{})
	go func() {
		q := protocol.AuditQuery{From: rest.Next, Wait: true}
		<-ready
		for range 50 {
			p, err := c.Audit(ctxT(t), q)
			if err != nil {
				t.Error(err)
				return
			}
			for _, l := range p.Lines {
				if strings.Contains(l, want) {
					close(found)
					return
				}
			}
			q.From = p.Next
		}
	}()
	want = issueDirect(t, h, agentCaller)
	close(ready)
	select {
	case <-found:
	case <-time.After(60 * time.Second):
		t.Fatalf("following the log did not bring grant %s", want)
	}
	// An agent may not read the log.
	_, err = h.srv.Handle(ctxT(t), agentCaller, &protocol.Frame{Verb: protocol.VerbAudit}, nil)
	wantCode(t, err, protocol.CodeForbidden)
}

// TestWatchCarriesCheckpoints: an approver's WATCH brings the log's latest
// checkpoint at once and each new one, signed by the principal key, so that
// the approver can keep it out of the daemon's reach.
func TestWatchCarriesCheckpoints(t *testing.T) {
	h := newHarness(t)
	cps := make(chan *checkpoint.Checkpoint, 8)
	go h.client().Watch(ctxT(t), client.Feed{Checkpoint: func(cp *checkpoint.Checkpoint) { cps <- cp }})
	pub := h.key.Public().(ed25519.PublicKey)
	next := func() *checkpoint.Checkpoint {
		select {
		case cp := <-cps:
			if err := cp.Verify(pub); err != nil {
				t.Fatalf("checkpoint %+v: %v", cp, err)
			}
			return cp
		case <-time.After(10 * time.Second):
			t.Fatal("no checkpoint on the watch")
		}
		return nil
	}
	first := next()
	if _, err := h.srv.AuditLog().Checkpoint(); err != nil {
		t.Fatal(err)
	}
	second := next()
	if second.Seq <= first.Seq || checkpoint.Consistent(first, second) != nil {
		t.Errorf("checkpoints %+v then %+v", first, second)
	}
}

// issueDirect asks the pipeline for a grant by policy as caller and returns
// its id.
func issueDirect(t *testing.T, h *harness, caller Caller) string {
	t.Helper()
	key := newAgentKey(t)
	holder := grant.FormatPublicKey(key.Public().(ed25519.PublicKey))
	body, _ := json.Marshal(protocol.GrantBody{Holder: holder, Caveats: []grant.Caveat{grant.Svc("cal.example"), grant.Can("calendar.find")}})
	digest, err := protocol.GrantDigest(body)
	if err != nil {
		t.Fatal(err)
	}
	proof, err := grant.MakeProof(key, h.srv.Principal(), protocol.ProofVerbGrant, digest, time.Now().Unix())
	if err != nil {
		t.Fatal(err)
	}
	reply, err := h.srv.Handle(ctxT(t), caller, &protocol.Frame{Verb: protocol.VerbGrant, Grant: body, Proof: &proof}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var res protocol.GrantResult
	if err := json.Unmarshal(reply.Data, &res); err != nil {
		t.Fatal(err)
	}
	return res.GrantID
}
