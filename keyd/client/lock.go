package client

import (
	"context"

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
