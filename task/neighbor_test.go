package task

import (
	"fmt"
	"slices"
	"testing"
)

// TestNeighbors: the neighbours of a member of a 3×4 grid wrapping in its
// first dimension, in MPI's order, and none without a topology.
func TestNeighbors(t *testing.T) {
	m := Comm{Rank: 4, TIDs: make([]TID, 12), Dims: []int{3, 4}, Periods: []bool{true, false}}
	if got, want := m.Neighbors(), []int{0, 8, NoRank, 5}; !slices.Equal(got, want) {
		t.Errorf("Neighbors() = %v, want %v", got, want)
	}
	if got := (&Comm{TIDs: make([]TID, 3)}).Neighbors(); got != nil {
		t.Errorf("Neighbors() without a topology = %v", got)
	}
}

// TestCartCreateFillsDims: zeros in dims are filled in as MPI_Dims_create
// does, around the extents given; nil periods wrap none; extents that do
// not divide the size are refused.
func TestCartCreateFillsDims(t *testing.T) {
	for _, c := range []struct {
		n          int
		dims, want []int
	}{
		{6, []int{0, 0}, []int{3, 2}}, {6, []int{0, 3}, []int{2, 3}}, {12, []int{2, 0, 0}, []int{2, 3, 2}},
		{5, []int{0}, []int{5}}, {4, []int{2, 2}, []int{2, 2}},
	} {
		runScript(t, c.n, 0, func(ctx *Ctx, s *scriptTask) error {
			if err := s.C.CartCreate(ctx, slices.Clone(c.dims), nil, &s.D); err != nil {
				return err
			}
			if !slices.Equal(s.D.Dims, c.want) || !slices.Equal(s.D.Periods, make([]bool, len(c.want))) {
				return fmt.Errorf("dims %v on %d: got %v %v, want %v", c.dims, c.n, s.D.Dims, s.D.Periods, c.want)
			}
			return nil
		})
	}
	runScript(t, 6, 0, func(ctx *Ctx, s *scriptTask) error {
		if err := s.C.CartCreate(ctx, []int{4, 0}, nil, &s.D); err == nil {
			return fmt.Errorf("dims {4, 0} on 6 accepted: %v", s.D.Dims)
		}
		return nil
	})
}

// TestIneighborAlltoall: on grids of 1 to 6 members in one and two
// dimensions, wrapping or not (rings of 1 and 2 included, where both
// neighbours are one member), each member receives from each neighbour
// what it sent toward this member, and nothing from past an edge, round
// after round, with checkpoints in the waits or none; its one request is
// waited for with others (after a Test every other round) and refused by
// Waitany; a receive with AnyTag started first never takes a
// neighbourhood message.
func TestIneighborAlltoall(t *testing.T) {
	const rounds = 4
	type grid struct {
		dims    []int
		periods []bool
	}
	for n := 1; n <= 6; n++ {
		for _, g := range []grid{{[]int{0}, []bool{true}}, {[]int{0}, []bool{false}}, {[]int{0, 0}, nil}, {[]int{0, 0}, []bool{true, true}}, {[]int{0, 0}, []bool{false, true}}} {
			for _, every := range []int{0, 2, 3} {
				t.Run(fmt.Sprintf("np%d/%v%v/every%d", n, g.dims, g.periods, every), func(t *testing.T) {
					runScript(t, n, every, func(c *Ctx, s *scriptTask) error {
						if s.D.Size() == 0 {
							if err := s.C.CartCreate(c, slices.Clone(g.dims), g.periods, &s.D); err != nil {
								return err
							}
						}
						m, nb := &s.D, s.D.Neighbors()
						for ; s.Step < rounds; s.Step++ {
							if err := c.SafePoint(); err != nil {
								return err
							}
							var anyMsg []float64
							ra, err := m.Irecv(c, AnyRank, AnyTag, &anyMsg)
							if err != nil {
								return err
							}
							send, recv := make([][]float64, len(nb)), make([][]float64, len(nb))
							for i := range send {
								send[i] = []float64{float64(m.Rank), float64(i), float64(s.Step)}
							}
							rn, err := IneighborAlltoall(c, m, send, recv)
							if err != nil {
								return err
							}
							if _, err := m.Isend(c, m.Rank, 5, []float64{-1, float64(s.Step)}); err != nil {
								return err
							}
							if _, _, err := m.Waitany(c, rn); err == nil && slices.ContainsFunc(nb, func(q int) bool { return q != NoRank }) {
								return fmt.Errorf("Waitany took a neighbourhood request")
							}
							if s.Step%2 == 1 { // poll, then wait
								if _, _, err := m.Test(c, rn); err != nil {
									return err
								}
							}
							if err := m.Waitall(c, rn, ra); err != nil {
								return err
							}
							if done, _, err := m.Test(c, rn); err != nil || !done {
								return fmt.Errorf("Test after Wait: %v, %v", done, err)
							}
							if !slices.Equal(anyMsg, []float64{-1, float64(s.Step)}) {
								return fmt.Errorf("rank %d round %d: the AnyTag receive got %v", m.Rank, s.Step, anyMsg)
							}
							for i, q := range nb {
								var want []float64
								if q != NoRank {
									want = []float64{float64(q), float64(i ^ 1), float64(s.Step)} // q's block toward this member
								}
								if !slices.Equal(recv[i], want) {
									return fmt.Errorf("rank %d round %d: from neighbour %d (rank %d) got %v, want %v", m.Rank, s.Step, i, q, recv[i], want)
								}
							}
						}
						return nil
					})
				})
			}
		}
	}
}

// TestIneighborAlltoallRefused: without a topology, or with the wrong
// number of blocks, it fails and starts nothing.
func TestIneighborAlltoallRefused(t *testing.T) {
	runScript(t, 2, 0, func(c *Ctx, s *scriptTask) error {
		if _, err := IneighborAlltoall(c, &s.C, [][]float64{nil, nil}, [][]float64{nil, nil}); err == nil {
			return fmt.Errorf("accepted on a communicator without a topology")
		}
		if err := s.C.CartCreate(c, []int{0}, nil, &s.D); err != nil {
			return err
		}
		if _, err := IneighborAlltoall(c, &s.D, [][]float64{nil}, [][]float64{nil, nil}); err == nil {
			return fmt.Errorf("accepted one block to send for two neighbours")
		}
		if len(s.D.Reqs) != 0 {
			return fmt.Errorf("requests started: %+v", s.D.Reqs)
		}
		return nil
	})
}
