package task

import "fmt"

// Neighbors returns the ranks of this member's neighbours on m's
// Cartesian grid, in the order of MPI's neighbourhood collectives on a
// Cartesian communicator: for each dimension, the member one place before
// and then the one after (CartShift(d, 1)); NoRank past the edge of a
// dimension that does not wrap. It is nil when m has no topology.
func (m *Comm) Neighbors() []int {
	if len(m.Dims) == 0 {
		return nil
	}
	out := make([]int, 0, 2*len(m.Dims))
	for d := range m.Dims {
		src, dst := m.CartShift(d, 1)
		out = append(out, src, dst)
	}
	return out
}

// IneighborAlltoall starts sending send[i] to this member's i-th neighbour
// on m's Cartesian grid (Neighbors) and receiving into recv[i] what that
// neighbour sends toward this member (MPI_Ineighbor_alltoall, with a block
// of any length per neighbour): the edges of a block decomposition
// exchanged for the neighbours' ghost cells. send and recv hold one entry
// per neighbour, 2·len(m.Dims). A NoRank neighbour is skipped: nothing is
// sent to it, and recv[i] is left as it is. Every member of m calls it,
// in the same order as its other neighbourhood collectives.
//
// It returns the requests of its receives and sends (MPI's one request is
// here a list): Waitall completes them, a safe point while it waits, and
// only then is recv filled. The requests are m's, as Isend's and Irecv's
// are: they travel in checkpoints, and after a move Run re-entered
// replays IneighborAlltoall with its new recv (see Irecv). Its messages
// travel on a tag of their own, which no Irecv, AnyTag included, takes.
func IneighborAlltoall[T any](c *Ctx, m *Comm, send, recv [][]T) ([]Request, error) {
	nb := m.Neighbors()
	if nb == nil || len(send) != len(nb) || len(recv) != len(nb) {
		return nil, fmt.Errorf("ineighbor alltoall: %d blocks to send and %d to receive on a grid of %d dimensions: %w",
			len(send), len(recv), len(m.Dims), ErrNoComm)
	}
	reqs := make([]Request, 0, 2*len(nb))
	// Receives first, the neighbour after before the one before in each
	// dimension, then sends in the order of nb: where both neighbours of
	// a dimension are one member (a ring of 2, or of 1: this member), its
	// messages come in the order it sent them, the one toward its
	// neighbour before first, and that one is what comes from this
	// member's neighbour after.
	for d := 0; d < len(nb); d += 2 {
		for _, i := range [2]int{d + 1, d} {
			if nb[i] == NoRank {
				continue
			}
			r, err := m.irecv(c, nb[i], neighborTag, neighborTag, &recv[i])
			if err != nil {
				return nil, fmt.Errorf("ineighbor alltoall: %w", err)
			}
			reqs = append(reqs, r)
		}
	}
	for i, q := range nb {
		if q == NoRank {
			continue
		}
		r, err := m.isend(c, q, neighborTag, neighborTag, send[i])
		if err != nil {
			return nil, fmt.Errorf("ineighbor alltoall: %w", err)
		}
		reqs = append(reqs, r)
	}
	return reqs, nil
}
