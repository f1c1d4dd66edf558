package task

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
)

// NoColor is the color of a member that takes part in Split without
// joining any of the new communicators (MPI_UNDEFINED).
const NoColor = -1

// Split makes out a new communicator of the members that pass the same
// color, ranked by key and then by their rank in m (MPI_Comm_split). Every
// member of m calls it. A member passing NoColor gets an empty out. out
// must be another field of the task's struct than m: it is part of the
// task's state, and its messages never mix with m's or any other
// communicator's of the same members. Between two safe points, give each
// new communicator a field of its own: when Run re-enters and the Split
// is replayed, it finds out as the checkpoint left it. It is a safe point
// while it waits.
func (m *Comm) Split(c *Ctx, color, key int, out *Comm) error {
	if err := m.check("split"); err != nil {
		return err
	}
	if color < NoColor {
		return fmt.Errorf("split: color %d", color)
	}
	if out == m {
		return fmt.Errorf("split: the new communicator must be another than m")
	}
	all, err := Allgather(c, m, []int64{int64(color), int64(key), int64(c.highestCommID(m, out))})
	if err != nil {
		return collErr("split", err)
	}
	id := 0
	type member struct{ key, rank int }
	var mine []member
	for r := range m.Size() {
		col, k, hi := int(all[3*r]), int(all[3*r+1]), int(all[3*r+2])
		id = max(id, hi+1)
		if col == color && color != NoColor {
			mine = append(mine, member{k, r})
		}
	}
	if id >= groupSetupID {
		return fmt.Errorf("split: more than %d communicators in use", groupSetupID-1)
	}
	if color == NoColor {
		*out = Comm{}
		return nil
	}
	slices.SortStableFunc(mine, func(a, b member) int { return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.rank, b.rank)) })
	nc := Comm{ID: id}
	for i, x := range mine {
		nc.TIDs = append(nc.TIDs, m.TIDs[x.rank])
		if x.rank == m.Rank {
			nc.Rank = i
		}
	}
	// Replayed after a checkpoint, out may already be this communicator,
	// with the state of its own calls since: keep it.
	if out.ID != nc.ID || out.Rank != nc.Rank || !slices.Equal(out.TIDs, nc.TIDs) {
		*out = nc
	}
	c.track(out)
	return nil
}

// Dup makes out a communicator of the same members, ranks and topology as
// m whose messages never mix with m's (MPI_Comm_dup). Every member of m
// calls it. It is a safe point while it waits.
func (m *Comm) Dup(c *Ctx, out *Comm) error {
	if err := m.Split(c, 0, m.Rank, out); err != nil {
		return err
	}
	out.Dims, out.Periods = slices.Clone(m.Dims), slices.Clone(m.Periods)
	return nil
}

// highestCommID is the highest ID among m and the communicators the task
// holds: those it has used in this run of Run and those in its struct's
// fields (structs, pointers, slices and arrays of them, a few levels
// deep), but for out, which the new one replaces: a program that splits
// into the same field step after step reuses the IDs.
func (c *Ctx) highestCommID(m, out *Comm) int {
	hi := m.ID
	see := func(x *Comm) {
		if x != out {
			hi = max(hi, x.ID)
		}
	}
	for _, x := range c.comms {
		see(x)
	}
	if c.task != nil {
		walkComms(reflect.ValueOf(c.task), 6, see)
	}
	return hi
}

var commType = reflect.TypeFor[Comm]()

// walkComms calls f for every Comm reachable from v through exported
// struct fields, pointers, slices and arrays, depth levels deep at most.
func walkComms(v reflect.Value, depth int, f func(*Comm)) {
	if depth == 0 || !v.IsValid() {
		return
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			walkComms(v.Elem(), depth-1, f)
		}
	case reflect.Struct:
		if v.Type() == commType {
			if v.CanAddr() {
				f(v.Addr().Interface().(*Comm))
			} else {
				x := v.Interface().(Comm)
				f(&x)
			}
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				walkComms(v.Field(i), depth-1, f)
			}
		}
	case reflect.Slice, reflect.Array:
		if k := v.Type().Elem().Kind(); k != reflect.Struct && k != reflect.Pointer {
			return
		}
		for i := range v.Len() {
			walkComms(v.Index(i), depth-1, f)
		}
	}
}

// DimsCreate splits n members into a grid of ndims dimensions as nearly
// equal as n's factors allow, the largest first (MPI_Dims_create with no
// dimension fixed).
func DimsCreate(n, ndims int) ([]int, error) {
	if n < 1 || ndims < 1 {
		return nil, fmt.Errorf("dims for %d members in %d dimensions", n, ndims)
	}
	dims := make([]int, ndims)
	for i := range dims {
		dims[i] = 1
	}
	var primes []int
	for p, x := 2, n; x > 1; {
		if p*p > x {
			primes = append(primes, x)
			break
		}
		if x%p == 0 {
			primes = append(primes, p)
			x /= p
		} else {
			p++
		}
	}
	for i := len(primes) - 1; i >= 0; i-- { // the largest factors first, each to the smallest dimension
		j := 0
		for k := range dims {
			if dims[k] < dims[j] {
				j = k
			}
		}
		dims[j] *= primes[i]
	}
	slices.SortFunc(dims, func(a, b int) int { return cmp.Compare(b, a) })
	return dims, nil
}

// CartCreate makes out a communicator of m's first d0·d1·… members laid out
// on a Cartesian grid of extents dims (row-major: the last dimension
// varies fastest), wrapping in the dimensions periods says; nil periods
// wrap none (MPI_Cart_create, ranks kept). A 0 in dims is filled in as
// MPI_Dims_create does, from m's size and the extents given: {0, 0} lays
// all of m out on a 2-D grid as square as its size allows (DimsCreate).
// Every member of m calls it; a member past the grid gets an empty out. It
// is a safe point while it waits.
func (m *Comm) CartCreate(c *Ctx, dims []int, periods []bool, out *Comm) error {
	if err := m.check("cart create"); err != nil {
		return err
	}
	if periods == nil {
		periods = make([]bool, len(dims))
	}
	if len(periods) != len(dims) || len(dims) == 0 {
		return fmt.Errorf("cart create: %d dimensions, %d periods", len(dims), len(periods))
	}
	dims, err := fillDims(m.Size(), dims)
	if err != nil {
		return fmt.Errorf("cart create: %w", err)
	}
	n := 1
	for _, d := range dims {
		if d < 1 || n*d > m.Size() {
			return fmt.Errorf("cart create: a grid of %v for %d members", dims, m.Size())
		}
		n *= d
	}
	color := 0
	if m.Rank >= n {
		color = NoColor
	}
	if err := m.Split(c, color, m.Rank, out); err != nil {
		return fmt.Errorf("cart create: %w", err)
	}
	if color == 0 {
		out.Dims, out.Periods = slices.Clone(dims), slices.Clone(periods)
	}
	return nil
}

// fillDims returns dims with its zeros filled in as MPI_Dims_create does
// for n members: the extents given fixed, the others as nearly equal as
// the members left allow, the largest first.
func fillDims(n int, dims []int) ([]int, error) {
	fixed, free := 1, 0
	for _, d := range dims {
		switch {
		case d < 0:
			return nil, fmt.Errorf("a grid of %v", dims)
		case d == 0:
			free++
		default:
			fixed *= d
		}
	}
	if free == 0 {
		return dims, nil
	}
	if fixed > n || n%fixed != 0 {
		return nil, fmt.Errorf("a grid of %v for %d members: %d does not divide %d", dims, n, fixed, n)
	}
	fill, err := DimsCreate(n/fixed, free)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(dims)
	for i := range out {
		if out[i] == 0 {
			out[i], fill = fill[0], fill[1:]
		}
	}
	return out, nil
}

// Coords returns the grid coordinates of the member of rank r
// (MPI_Cart_coords), or nil when m has no topology or r is not a rank.
func (m *Comm) Coords(r int) []int {
	if len(m.Dims) == 0 || r < 0 || r >= len(m.TIDs) {
		return nil
	}
	out := make([]int, len(m.Dims))
	for i := len(m.Dims) - 1; i >= 0; i-- {
		out[i] = r % m.Dims[i]
		r /= m.Dims[i]
	}
	return out
}

// CartRank returns the rank of the member at coords (MPI_Cart_rank): a
// coordinate outside its dimension wraps where the dimension is periodic
// and gives NoRank where it is not. It is NoRank, too, when m has no
// topology or coords has the wrong number of dimensions.
func (m *Comm) CartRank(coords []int) int {
	if len(m.Dims) == 0 || len(coords) != len(m.Dims) {
		return NoRank
	}
	r := 0
	for i, x := range coords {
		d := m.Dims[i]
		if x < 0 || x >= d {
			if !m.Periods[i] {
				return NoRank
			}
			x = ((x % d) + d) % d
		}
		r = r*d + x
	}
	return r
}

// CartShift returns the ranks disp places before and after this member's
// along dimension dim (MPI_Cart_shift): a SendRecv to dst from src moves
// data disp places up that dimension. Past the edge of a dimension that
// does not wrap, a rank is NoRank; both are NoRank when m has no such
// dimension.
func (m *Comm) CartShift(dim, disp int) (src, dst int) {
	me := m.Coords(m.Rank)
	if me == nil || dim < 0 || dim >= len(m.Dims) {
		return NoRank, NoRank
	}
	at := func(d int) int {
		x := slices.Clone(me)
		x[dim] += d
		return m.CartRank(x)
	}
	return at(-disp), at(disp)
}

// CartSub makes out the communicator of the members of m's grid that share
// this member's coordinates in the dimensions remain says to drop, with
// the grid of the dimensions kept (MPI_Cart_sub): the rows of a 2-D grid
// with remain {false, true}, its columns with {true, false}. Every member
// of m calls it. It is a safe point while it waits.
func (m *Comm) CartSub(c *Ctx, remain []bool, out *Comm) error {
	if len(m.Dims) == 0 || len(remain) != len(m.Dims) {
		return fmt.Errorf("cart sub: %d flags for a grid of %d dimensions: %w", len(remain), len(m.Dims), ErrNoComm)
	}
	me := m.Coords(m.Rank)
	color, key := 0, 0
	var dims []int
	var periods []bool
	for i, keep := range remain {
		if keep {
			key = key*m.Dims[i] + me[i]
			dims, periods = append(dims, m.Dims[i]), append(periods, m.Periods[i])
		} else {
			color = color*m.Dims[i] + me[i]
		}
	}
	if err := m.Split(c, color, key, out); err != nil {
		return fmt.Errorf("cart sub: %w", err)
	}
	if len(dims) == 0 { // every dimension dropped: a communicator of one
		dims, periods = []int{1}, []bool{false}
	}
	out.Dims, out.Periods = dims, periods
	return nil
}
