package task

import (
	"cmp"
	"context"
	"fmt"
	"slices"
)

// VMWide begins the name of a group shared by the whole virtual machine.
// Any other group name is scoped to the caller's job: the tasks of one job
// share it, and another job (another run of the same program, say) using
// the same name has a group of its own. Name a group VMWide+"name" only
// for tasks of different jobs that must meet.
const VMWide = "vm:"

// Join adds the calling task to the named group and returns its instance
// number: the lowest one free, starting at 0. Groups exist while they have
// members.
func (c *Ctx) Join(group string) (int, error) {
	c.enter()
	defer c.leave()
	inst, err := c.ep.Join(c.ep.Context(), group)
	if err != nil {
		return -1, fmt.Errorf("join group %q: %w", group, err)
	}
	return inst, nil
}

// Leave removes the calling task from the group; its instance number becomes
// free. A task leaves all its groups when it exits.
func (c *Ctx) Leave(group string) error {
	c.enter()
	defer c.leave()
	if err := c.ep.Leave(c.ep.Context(), group); err != nil {
		return fmt.Errorf("leave group %q: %w", group, err)
	}
	return nil
}

// Members lists the group's members indexed by instance number; a free
// instance holds the zero TID.
func (c *Ctx) Members(group string) ([]TID, error) {
	c.enter()
	defer c.leave()
	m, err := c.ep.Members(c.ep.Context(), group)
	if err != nil {
		return nil, fmt.Errorf("group %q: %w", group, err)
	}
	return m, nil
}

// Barrier blocks until count members of the group have called Barrier for
// it; count <= 0 means every current member (counted when the first of
// them arrives). The caller must be a member.
//
// With Safe() the wait is a safe point: while the barrier has not
// completed, the task can be moved or checkpointed. Its arrival is then
// first withdrawn from the barrier (atomically at the group's server: the
// barrier either completes with the caller, which then passes, or not
// without it), so that a checkpoint never holds a task inside a barrier
// the others have passed and a resumed task arrives again, counted once.
// Like SafePoint, the call then returns ErrSuspended, which Run must
// return unchanged; on re-entry Run calls Barrier again, so wait with
// Safe where Run's fields say the task is about to enter the barrier.
// Inside a critical section, or while a receive request is outstanding on
// a communicator (see Comm.Irecv), the wait is no safe point. Barrier
// takes no other option.
func (c *Ctx) Barrier(group string, count int, opts ...Option) error {
	var o Option
	if err := o.merge("barrier", opts, optSafe); err != nil {
		return err
	}
	sb, ok := c.ep.(SafeBarrierer)
	if !o.safe() || !ok || !c.mayStop() {
		c.enter()
		defer c.leave()
		if err := c.ep.Barrier(c.ep.Context(), group, count); err != nil {
			return fmt.Errorf("barrier %q: %w", group, err)
		}
		return nil
	}
	for {
		c.enter()
		passed, err := sb.BarrierSafe(c.ep.Context(), group, count)
		c.leave()
		if err != nil {
			return fmt.Errorf("barrier %q: %w", group, err)
		}
		if passed {
			return nil
		}
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
}

// SafeBarrierer is implemented by endpoints whose group barrier can be a
// safe point (the daemon's).
type SafeBarrierer interface {
	// BarrierSafe is a blocking Barrier that also returns, with passed ==
	// false and no error, when the runtime wants the task at a safe
	// point; the task's arrival has then been withdrawn and the barrier
	// has not completed with it.
	BarrierSafe(ctx context.Context, group string, count int) (passed bool, err error)
}

// GroupComm makes out a communicator of the group's members, ranked in
// instance order, so that the communicator's collectives (Bcast, Reduce,
// Gather, …) serve the group (pvm_bcast, pvm_reduce, pvm_gather,
// pvm_scatter). Every member calls it: it first waits, as Barrier(group,
// count) does, until count members have called it (count <= 0: every
// current member), then reads the members, which must not change while
// their calls run. out, a field of the task's struct, gets an ID of its
// own, so that its messages never mix with another communicator's. It
// returns at once when out is already set (Run re-entered after a move).
// Its wait in the barrier is a safe point, as Barrier's with Safe(): a
// task moved or checkpointed there has not been counted and calls
// GroupComm again on re-entry. Past the barrier the members make the rest
// together, as one step, with no safe point.
func (c *Ctx) GroupComm(group string, count int, out *Comm) error {
	if len(out.TIDs) > 0 {
		c.track(out)
		return nil
	}
	if err := c.Barrier(group, count, Safe()); err != nil {
		return collErr("group communicator", err)
	}
	c.enter()
	defer c.leave()
	m, err := c.Members(group)
	if err != nil {
		return fmt.Errorf("group communicator: %w", err)
	}
	self := c.MyTID()
	setup := Comm{Rank: -1, ID: groupSetupID}
	for _, t := range m {
		if t.IsZero() {
			continue
		}
		if t == self {
			setup.Rank = len(setup.TIDs)
		}
		setup.TIDs = append(setup.TIDs, t)
	}
	if setup.Rank < 0 {
		return fmt.Errorf("group communicator %q: %v: %w", group, self, ErrNotInGroup)
	}
	// The members agree on an ID above every one any of them holds, over
	// a communicator of the reserved ID that lives for this call only.
	hi := c.highestCommID(&Comm{}, out)
	all, err := Allgather(c, &setup, []int64{int64(hi)})
	c.comms = slices.DeleteFunc(c.comms, func(x *Comm) bool { return x == &setup })
	if err != nil {
		return fmt.Errorf("group communicator %q: %w", group, err)
	}
	id := int(slices.Max(all)) + 1
	if id >= groupSetupID {
		return fmt.Errorf("group communicator %q: more than %d communicators in use", group, groupSetupID-1)
	}
	*out = Comm{Rank: setup.Rank, TIDs: setup.TIDs, ID: id}
	c.track(out)
	return nil
}

// groupSetupID is the communicator ID GroupComm's members agree on an ID
// over; no lasting communicator has it.
const groupSetupID = maxCommID

// Number is the element type of the built-in reductions.
type Number interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr |
		~float32 | ~float64
}

// Sum is a reduction: acc[i] += in[i].
func Sum[T Number | ~complex64 | ~complex128](acc, in []T) {
	for i := range acc {
		acc[i] += in[i]
	}
}

// Product is a reduction: acc[i] *= in[i].
func Product[T Number | ~complex64 | ~complex128](acc, in []T) {
	for i := range acc {
		acc[i] *= in[i]
	}
}

// Min is a reduction: acc[i] = min(acc[i], in[i]).
func Min[T cmp.Ordered](acc, in []T) {
	for i := range acc {
		acc[i] = min(acc[i], in[i])
	}
}

// Max is a reduction: acc[i] = max(acc[i], in[i]).
func Max[T cmp.Ordered](acc, in []T) {
	for i := range acc {
		acc[i] = max(acc[i], in[i])
	}
}
