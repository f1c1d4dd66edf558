package daemon

import (
	"fmt"
	"slices"
	"testing"

	"github.com/dpvm/dpvm/task"
)

// inPlaceChunk is message i of TestSendInPlaceLocalAndRemote: size int32s
// that say which message they are.
func inPlaceChunk(i, size int) []int32 {
	s := make([]int32, size)
	for j := range s {
		s[j] = int32(i<<16 | j)
	}
	return s
}

// TestSendInPlaceLocalAndRemote: []int32 slices a root on h1 sends in
// place to a receiver on h1 arrive as the root's own memory, once each
// and in order. To a receiver on h2, over a network that loses frames,
// they arrive as copies made at the send: the root clears each slice as
// soon as Send with task.InPlace returns (which it must not do with a receiver on
// its own host), and the receiver, whose messages the outbox resends,
// still gets the values sent.
func TestSendInPlaceLocalAndRemote(t *testing.T) {
	vm := startMemVM(t, 2, &faults{seed: 7, drop: 300}, Config{})
	m := vm.Master()
	const msgs, size = 20, 1000
	for _, host := range []string{"h1", "h2"} {
		t.Run(host, func(t *testing.T) {
			type arrival struct {
				first *int32
				err   error
			}
			arrived := make(chan arrival, msgs)
			rx := fn(t, func(c *task.Ctx, _ int) error {
				for i := range msgs {
					msg, err := c.Recv(c.Parent(), 1, nil)
					if err != nil {
						return err
					}
					s, err := msg.Int32s()
					var first *int32
					if err == nil && len(s) > 0 {
						first = &s[0]
					}
					if want := inPlaceChunk(i, size); err == nil && !slices.Equal(s, want) {
						err = fmt.Errorf("%d int32s %v…, want %v…", len(s), s[:min(3, len(s))], want[:3])
					}
					arrived <- arrival{first, err}
				}
				return nil
			})
			local := host == "h1"
			runRoot(t, m, func(c *task.Ctx, _ int) error {
				tids, err := c.Spawn(rx, 1, task.OnHost(host))
				if err != nil {
					return err
				}
				sent := make([]*int32, msgs)
				for i := range msgs {
					s := inPlaceChunk(i, size)
					if err := c.Send(tids[0], 1, s, task.InPlace()); err != nil {
						return err
					}
					sent[i] = &s[0]
					if !local {
						clear(s)
					}
				}
				for i := range msgs {
					a := <-arrived
					if a.err != nil {
						return fmt.Errorf("message %d: %w", i, a.err)
					}
					if (a.first == sent[i]) != local {
						return fmt.Errorf("message %d to %s: received as the sender's memory: %v, want %v", i, host, a.first == sent[i], local)
					}
				}
				return nil
			})
		})
	}
}
