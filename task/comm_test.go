package task

import "testing"

// TestCommShift: the neighbours disp ranks away on a line of members, NoRank
// past either end.
func TestCommShift(t *testing.T) {
	m := Comm{TIDs: make([]TID, 4)}
	for _, c := range []struct{ rank, disp, src, dst int }{
		{0, 1, NoRank, 1},
		{1, 1, 0, 2},
		{3, 1, 2, NoRank},
		{3, -1, NoRank, 2},
		{0, -1, 1, NoRank},
		{1, 2, NoRank, 3},
		{2, 0, 2, 2},
		{0, 5, NoRank, NoRank},
	} {
		m.Rank = c.rank
		if src, dst := m.Shift(c.disp); src != c.src || dst != c.dst {
			t.Errorf("rank %d Shift(%d) = %d, %d; want %d, %d", c.rank, c.disp, src, dst, c.src, c.dst)
		}
	}
	one := Comm{TIDs: make([]TID, 1)}
	if src, dst := one.Shift(1); src != NoRank || dst != NoRank {
		t.Errorf("a communicator of one: Shift(1) = %d, %d", src, dst)
	}
}
