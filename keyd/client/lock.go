package client

import (
	"context"
	"errors"

	"github.com/parley-keyd/parley-keyd/keyd/protocol"
)

// Lock locks the daemon (LOCK, approvers only): every new request is refused
// with "locked" and every waiting one is withdrawn until Unlock. It returns
// the lock in force (an earlier one, if the daemon was locked already) and
// the daemon's message, which carries a warning when the lock would not
// survive a restart.
func (c *Client) Lock(ctx context.Context, reason string) (*protocol.LockView, string, error) {
	r, err := c.Do(ctx, &protocol.Frame{Verb: protocol.VerbLock, Reason: reason}, nil)
	if err != nil {
		return nil, "", err
	}
	var v protocol.LockView
	if err := decodeData(r.Data, &v); err != nil {
		return nil, r.Message, nil
	}
	return &v, r.Message, nil
}

// Unlock lifts the lock (UNLOCK, approvers who are not also agents). It
// returns the daemon's message: "unlocked", or that it was not locked.
func (c *Client) Unlock(ctx context.Context) (string, error) {
	r, err := c.Do(ctx, &protocol.Frame{Verb: protocol.VerbUnlock}, nil)
	if err != nil {
		return "", err
	}
	return r.Message, nil
}

// ApproveOptions are the optional parts of an APPROVE.
type ApproveOptions struct {
	// Remember, when set, asks the daemon to keep approving the same
	// request for that long ("2h"; one of PendingView.Remember's range).
	// The daemon then approves nothing unless it can remember it.
	Remember string
}

// ApproveWith approves request id as Approve does, with o.
func (c *Client) ApproveWith(ctx context.Context, id, match, channel string, o ApproveOptions) error {
	_, err := c.Do(ctx, &protocol.Frame{Verb: protocol.VerbApprove, Request: id, Match: match, Channel: channel,
		Remember: o.Remember}, nil)
	return err
}

// Remembered lists the remembered approvals this caller may see: all of
// them for an approver, its own for an agent.
func (c *Client) Remembered(ctx context.Context) ([]protocol.RememberedView, error) {
	r, err := c.Do(ctx, &protocol.Frame{Verb: protocol.VerbRemembered}, nil)
	if err != nil {
		return nil, err
	}
	var out protocol.RememberedList
	if err := decodeData(r.Data, &out); err != nil {
		return nil, errors.New("parley-keyd sent a malformed REMEMBERED reply")
	}
	return out.Remembered, nil
}

// Forget ends the remembered approval id (an approver, or the agent that
// owns it): once it returns, no grant under it is issued.
func (c *Client) Forget(ctx context.Context, id, reason string) error {
	_, err := c.Do(ctx, &protocol.Frame{Verb: protocol.VerbForget, Request: id, Reason: reason}, nil)
	return err
}
