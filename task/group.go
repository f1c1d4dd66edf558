package task

import (
	"cmp"
	"fmt"
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

// GroupSize is the number of members of the group.
func (c *Ctx) GroupSize(group string) (int, error) {
	m, err := c.Members(group)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range m {
		if !t.IsZero() {
			n++
		}
	}
	return n, nil
}

// GroupTID is the TID of instance inst of the group.
func (c *Ctx) GroupTID(group string, inst int) (TID, error) {
	m, err := c.Members(group)
	if err != nil {
		return 0, err
	}
	if inst < 0 || inst >= len(m) || m[inst].IsZero() {
		return 0, fmt.Errorf("group %q instance %d: %w", group, inst, ErrNoSuchTask)
	}
	return m[inst], nil
}

// GroupInst is tid's instance number in the group.
func (c *Ctx) GroupInst(group string, tid TID) (int, error) {
	m, err := c.Members(group)
	if err != nil {
		return -1, err
	}
	for i, t := range m {
		if t == tid {
			return i, nil
		}
	}
	return -1, fmt.Errorf("group %q: %v: %w", group, tid, ErrNotInGroup)
}

// Barrier blocks until count members of the group have called Barrier for
// it; count <= 0 means every current member. The caller must be a member.
func (c *Ctx) Barrier(group string, count int) error {
	c.enter()
	defer c.leave()
	if err := c.ep.Barrier(c.ep.Context(), group, count); err != nil {
		return fmt.Errorf("barrier %q: %w", group, err)
	}
	return nil
}

// Bcast sends v with the given tag to every member of the group except the
// caller, encoding it once.
func (c *Ctx) Bcast(group string, tag int, v any) error {
	m, err := c.Members(group)
	if err != nil {
		return fmt.Errorf("bcast: %w", err)
	}
	self := c.MyTID()
	to := make([]TID, 0, len(m))
	for _, t := range m {
		if !t.IsZero() && t != self {
			to = append(to, t)
		}
	}
	if len(to) == 0 {
		return nil
	}
	if err := c.Mcast(to, tag, v); err != nil {
		return fmt.Errorf("bcast %q: %w", group, err)
	}
	return nil
}

// membersAndRoot returns the group's live members in instance order and the
// TID of instance root, checking that the caller is a member.
func (c *Ctx) membersAndRoot(group string, root int) (live []TID, rootTID TID, err error) {
	m, err := c.Members(group)
	if err != nil {
		return nil, 0, err
	}
	if root < 0 || root >= len(m) || m[root].IsZero() {
		return nil, 0, fmt.Errorf("group %q root instance %d: %w", group, root, ErrNoSuchTask)
	}
	self := c.MyTID()
	in := false
	for _, t := range m {
		if t.IsZero() {
			continue
		}
		live = append(live, t)
		in = in || t == self
	}
	if !in {
		return nil, 0, fmt.Errorf("group %q: %v: %w", group, self, ErrNotInGroup)
	}
	return live, m[root], nil
}

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

// Reduce combines data element-wise across the group's members with op
// (Sum, Product, Min, Max, or a function of your own that folds in into
// acc) and leaves the result in the data of the member with instance number
// root; the others' data is unchanged. Every member calls it with data of
// the same length and the same tag. The members' contributions are combined
// in instance order, so the result is the same on every run.
func Reduce[T any](c *Ctx, op func(acc, in []T), data []T, group string, tag, root int) error {
	live, rootTID, err := c.membersAndRoot(group, root)
	if err != nil {
		return fmt.Errorf("reduce: %w", err)
	}
	self := c.MyTID()
	if self != rootTID {
		if err := c.Send(rootTID, tag, data); err != nil {
			return fmt.Errorf("reduce %q: %w", group, err)
		}
		return nil
	}
	var acc, in []T
	for i, t := range live {
		cur := data
		if t != self {
			if _, err := c.Recv(t, tag, &in); err != nil {
				return fmt.Errorf("reduce %q: %w", group, err)
			}
			cur = in
		}
		if len(cur) != len(data) {
			return fmt.Errorf("reduce %q: member %v sent %d elements, want %d", group, t, len(cur), len(data))
		}
		if i == 0 {
			acc = append(make([]T, 0, len(cur)), cur...)
			continue
		}
		op(acc, cur)
	}
	copy(data, acc)
	return nil
}

// Gather collects every member's data at the member with instance number
// root, concatenated in instance order. The root gets the result; the others
// get nil.
func Gather[T any](c *Ctx, data []T, group string, tag, root int) ([]T, error) {
	live, rootTID, err := c.membersAndRoot(group, root)
	if err != nil {
		return nil, fmt.Errorf("gather: %w", err)
	}
	self := c.MyTID()
	if self != rootTID {
		if err := c.Send(rootTID, tag, data); err != nil {
			return nil, fmt.Errorf("gather %q: %w", group, err)
		}
		return nil, nil
	}
	var out, in []T
	for _, t := range live {
		if t == self {
			out = append(out, data...)
			continue
		}
		if _, err := c.Recv(t, tag, &in); err != nil {
			return nil, fmt.Errorf("gather %q: %w", group, err)
		}
		out = append(out, in...)
	}
	return out, nil
}

// Scatter hands out consecutive chunks of count elements of the root's data
// to the members in instance order and returns the caller's chunk. Only the
// root's data is read; it must hold count elements per member.
func Scatter[T any](c *Ctx, data []T, count int, group string, tag, root int) ([]T, error) {
	live, rootTID, err := c.membersAndRoot(group, root)
	if err != nil {
		return nil, fmt.Errorf("scatter: %w", err)
	}
	if count < 0 {
		return nil, fmt.Errorf("scatter %q: negative count %d", group, count)
	}
	self := c.MyTID()
	if self != rootTID {
		var mine []T
		if _, err := c.Recv(rootTID, tag, &mine); err != nil {
			return nil, fmt.Errorf("scatter %q: %w", group, err)
		}
		if len(mine) != count {
			return nil, fmt.Errorf("scatter %q: got %d elements, want %d", group, len(mine), count)
		}
		return mine, nil
	}
	if len(data) < count*len(live) {
		return nil, fmt.Errorf("scatter %q: %d elements for %d members of %d", group, len(data), len(live), count)
	}
	var mine []T
	for i, t := range live {
		chunk := data[i*count : (i+1)*count]
		if t == self {
			mine = append([]T(nil), chunk...)
			continue
		}
		if err := c.Send(t, tag, chunk); err != nil {
			return nil, fmt.Errorf("scatter %q: %w", group, err)
		}
	}
	return mine, nil
}
