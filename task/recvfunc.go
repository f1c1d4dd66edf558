package task

import (
	"context"
	"fmt"
)

// FuncReceiver is implemented by endpoints that can receive by a predicate
// over a message's status (the daemon's does). RecvFunc is Endpoint.Recv
// taking only a message that match accepts as well; RecvFuncSafe is
// Endpoint.RecvSafe so. match runs while the mailbox is locked: it must be
// quick and must not call the task's Ctx.
type FuncReceiver interface {
	RecvFunc(ctx context.Context, from TID, tag int, match func(Status) bool, wait bool) (Message, bool, error)
	RecvFuncSafe(ctx context.Context, from TID, tag int, match func(Status) bool) (Message, bool, error)
}

// RecvFunc is Recv taking the oldest message that matches from and tag and
// that match accepts (pvm_recvf): match sees each candidate's status
// (source, tag, size, encoding) and must be quick, touch nothing that other
// goroutines write, and not call c. A nil match is Recv.
func (c *Ctx) RecvFunc(from TID, tag int, match func(Status) bool, v any) (Status, error) {
	fr, ok := c.ep.(FuncReceiver)
	if !ok {
		if match != nil {
			return Status{}, fmt.Errorf("recv by predicate: this runtime cannot")
		}
		return c.Recv(from, tag, v)
	}
	c.enter()
	m, _, err := fr.RecvFunc(c.ep.Context(), from, tag, match, true)
	c.leave()
	if err != nil {
		return Status{}, fmt.Errorf("recv from %v tag %d by predicate: %w", from, tag, err)
	}
	return m.Status(), decodeInto(&m, v)
}
