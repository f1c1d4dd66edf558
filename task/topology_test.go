package task

import (
	"fmt"
	"slices"
	"testing"
)

// TestDimsCreate: grids as square as the factors allow, largest first.
func TestDimsCreate(t *testing.T) {
	for _, c := range []struct {
		n, d int
		want []int
	}{
		{1, 2, []int{1, 1}}, {2, 2, []int{2, 1}}, {4, 2, []int{2, 2}}, {5, 2, []int{5, 1}},
		{6, 2, []int{3, 2}}, {12, 2, []int{4, 3}}, {8, 3, []int{2, 2, 2}}, {7, 1, []int{7}},
		{36, 2, []int{6, 6}}, {24, 3, []int{4, 3, 2}},
	} {
		got, err := DimsCreate(c.n, c.d)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("DimsCreate(%d, %d) = %v, %v; want %v", c.n, c.d, got, err, c.want)
		}
	}
	if _, err := DimsCreate(0, 2); err == nil {
		t.Error("DimsCreate(0, 2) accepted")
	}
}

// TestCartCoords: coordinates and ranks are inverse on a 3×4 grid
// periodic in its first dimension, and shifts wrap there and stop at the
// edges of the second.
func TestCartCoords(t *testing.T) {
	m := Comm{TIDs: make([]TID, 12), Dims: []int{3, 4}, Periods: []bool{true, false}}
	for r := range 12 {
		xy := m.Coords(r)
		if want := []int{r / 4, r % 4}; !slices.Equal(xy, want) {
			t.Errorf("Coords(%d) = %v, want %v", r, xy, want)
		}
		if back := m.CartRank(xy); back != r {
			t.Errorf("CartRank(%v) = %d, want %d", xy, back, r)
		}
	}
	for _, c := range []struct {
		coords []int
		rank   int
	}{{[]int{-1, 0}, 8}, {[]int{3, 1}, 1}, {[]int{0, -1}, NoRank}, {[]int{0, 4}, NoRank}, {[]int{0}, NoRank}} {
		if got := m.CartRank(c.coords); got != c.rank {
			t.Errorf("CartRank(%v) = %d, want %d", c.coords, got, c.rank)
		}
	}
	for _, c := range []struct{ rank, dim, disp, src, dst int }{
		{0, 0, 1, 8, 4}, {8, 0, 1, 4, 0}, {5, 0, 2, 9, 1},
		{0, 1, 1, NoRank, 1}, {3, 1, 1, 2, NoRank}, {5, 1, -1, 6, 4}, {5, 2, 1, NoRank, NoRank},
	} {
		m.Rank = c.rank
		if src, dst := m.CartShift(c.dim, c.disp); src != c.src || dst != c.dst {
			t.Errorf("rank %d CartShift(%d, %d) = %d, %d; want %d, %d", c.rank, c.dim, c.disp, src, dst, c.src, c.dst)
		}
	}
	plain := Comm{TIDs: make([]TID, 3)}
	if plain.Coords(0) != nil || plain.CartRank([]int{0}) != NoRank {
		t.Error("a communicator with no topology has coordinates")
	}
}

// TestSplitDupCart: at np = 1..5, with and without checkpoints, Split
// groups members by color and ranks them by key, Dup makes a communicator
// whose messages do not mix with its parent's, a member passing NoColor
// gets none, and a 2-D grid's shifts and row and column communicators
// give what the grid's coordinates say.
func TestSplitDupCart(t *testing.T) {
	for n := 1; n <= 5; n++ {
		for _, every := range []int{0, 2, 3} {
			t.Run(fmt.Sprintf("np%d/every%d", n, every), func(t *testing.T) {
				runScript(t, n, every, func(c *Ctx, s *scriptTask) error { return splitDupCart(c, s, n) })
			})
		}
	}
}

// splitDupCart runs the test's phases, one per Step, each ending in a
// SafePoint: a phase writes each communicator field once, as Split asks.
func splitDupCart(c *Ctx, s *scriptTask, n int) error {
	for ; s.Step < 5; s.Step++ {
		if err := splitPhase(c, s, n); err != nil {
			return err
		}
		if err := c.SafePoint(); err != nil {
			return err
		}
	}
	return nil
}

func splitPhase(c *Ctx, s *scriptTask, n int) error {
	m := &s.C
	r := m.Rank
	switch s.Step {
	case 0:
		return splitParity(c, s, n)
	case 1:
		return dupNoMix(c, s, n)
	case 2: // NoColor: rank 0 stays out.
		color := 0
		if r == 0 {
			color = NoColor
		}
		if err := m.Split(c, color, r, &s.D); err != nil {
			return err
		}
		if (r == 0) != (s.D.Size() == 0) || (r > 0 && s.D.Size() != n-1) {
			return fmt.Errorf("rank %d: split with rank 0 out: %d members", r, s.D.Size())
		}
		return nil
	case 3: // a 2-D grid, periodic in its first dimension; its columns
		dims, err := DimsCreate(n, 2)
		if err != nil {
			return err
		}
		if err := m.CartCreate(c, dims, []bool{true, false}, &s.D); err != nil {
			return err
		}
		if err := gridShifts(c, &s.D, r); err != nil {
			return err
		}
		return gridSub(c, &s.D, &s.E, 0, r)
	default: // its rows
		return gridSub(c, &s.D, &s.E, 1, r)
	}
}

// splitParity: Split by parity, ranked from the highest parent rank down.
func splitParity(c *Ctx, s *scriptTask, n int) error {
	m := &s.C
	r := m.Rank
	if err := m.Split(c, r%2, -r, &s.D); err != nil {
		return err
	}
	var want []TID
	for q := n - 1; q >= 0; q-- {
		if q%2 == r%2 {
			want = append(want, m.TIDs[q])
		}
	}
	if !slices.Equal(s.D.TIDs, want) || s.D.TIDs[s.D.Rank] != m.TIDs[r] || s.D.ID == m.ID {
		return fmt.Errorf("rank %d split: %v rank %d id %d, want %v", r, s.D.TIDs, s.D.Rank, s.D.ID, want)
	}
	sum := []int64{int64(r)}
	if err := AllReduce(c, &s.D, Sum[int64], sum); err != nil {
		return err
	}
	wantSum := int64(0)
	for q := r % 2; q < n; q += 2 {
		wantSum += int64(q)
	}
	if sum[0] != wantSum {
		return fmt.Errorf("rank %d: sum over its half %d, want %d", r, sum[0], wantSum)
	}
	return nil
}

// dupNoMix: a message on a Dup and one on its parent, same tag, do not
// mix.
func dupNoMix(c *Ctx, s *scriptTask, n int) error {
	m := &s.C
	r := m.Rank
	if err := m.Dup(c, &s.E); err != nil {
		return err
	}
	if s.E.ID == m.ID || s.E.ID == s.D.ID || !slices.Equal(s.E.TIDs, m.TIDs) || s.E.Rank != r {
		return fmt.Errorf("rank %d dup: id %d (parent %d, split %d), %v rank %d", r, s.E.ID, m.ID, s.D.ID, s.E.TIDs, s.E.Rank)
	}
	next, prev := (r+1)%n, (r-1+n)%n
	if _, err := m.Isend(c, next, 7, "parent"); err != nil {
		return err
	}
	if _, err := s.E.Isend(c, next, 7, "dup"); err != nil {
		return err
	}
	var onDup, onParent string
	rd, err := s.E.Irecv(c, prev, 7, &onDup)
	if err != nil {
		return err
	}
	rp, err := m.Irecv(c, prev, 7, &onParent)
	if err != nil {
		return err
	}
	if _, err := s.E.Wait(c, rd); err != nil {
		return err
	}
	if _, err := m.Wait(c, rp); err != nil {
		return err
	}
	if onDup != "dup" || onParent != "parent" {
		return fmt.Errorf("rank %d: on the dup %q, on the parent %q", r, onDup, onParent)
	}
	return nil
}

// gridShifts: a SendRecv along each dimension's shift brings the rank of
// the neighbour the coordinates say, or nothing past an edge.
func gridShifts(c *Ctx, g *Comm, r int) error {
	me := g.Coords(g.Rank)
	for dim := range 2 {
		src, dst := g.CartShift(dim, 1)
		got := -5
		if err := g.SendRecv(c, dst, g.Rank, src, &got); err != nil {
			return err
		}
		if (src == NoRank && got != -5) || (src != NoRank && got != src) {
			return fmt.Errorf("rank %d %v: shift along %d got %d from %d", r, me, dim, got, src)
		}
	}
	return nil
}

// gridSub: the sub-communicator keeping dimension keep has the members
// that share the other coordinate, ranked along keep.
func gridSub(c *Ctx, g, sub *Comm, keep, r int) error {
	me := g.Coords(g.Rank)
	remain := []bool{keep == 0, keep == 1}
	if err := g.CartSub(c, remain, sub); err != nil {
		return err
	}
	if sub.Size() != g.Dims[keep] || !slices.Equal(sub.Dims, []int{g.Dims[keep]}) || sub.Rank != me[keep] {
		return fmt.Errorf("rank %d %v: sub %v: %d members, dims %v, rank %d", r, me, remain, sub.Size(), sub.Dims, sub.Rank)
	}
	got := []int64{int64(g.Rank)}
	if err := AllReduce(c, sub, Sum[int64], got); err != nil {
		return err
	}
	want := int64(0)
	for q := range g.Size() {
		if xy := g.Coords(q); xy[1-keep] == me[1-keep] {
			want += int64(q)
		}
	}
	if got[0] != want {
		return fmt.Errorf("rank %d %v: sum over sub %v %d, want %d", r, me, remain, got[0], want)
	}
	return nil
}

// TestSplitReusesIDs: a Dup into the same field step after step gets the
// same ID each time (the communicator it replaces does not count), and
// works each time, with and without checkpoints.
func TestSplitReusesIDs(t *testing.T) {
	for _, every := range []int{0, 2} {
		runScript(t, 3, every, func(c *Ctx, s *scriptTask) error {
			for ; s.Step < 40; s.Step++ {
				if err := s.C.Dup(c, &s.D); err != nil {
					return err
				}
				if s.D.ID != 1 {
					return fmt.Errorf("step %d: dup ID %d, want 1", s.Step, s.D.ID)
				}
				v := []int64{int64(s.Step + s.D.Rank)}
				if err := AllReduce(c, &s.D, Sum[int64], v); err != nil {
					return err
				}
				if v[0] != int64(3*s.Step+3) {
					return fmt.Errorf("step %d: sum %d", s.Step, v[0])
				}
				if err := c.SafePoint(); err != nil {
					return err
				}
			}
			return nil
		})
	}
}
