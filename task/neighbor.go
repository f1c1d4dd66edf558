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
// It returns one request for the whole exchange: Wait or Waitall completes
// it, a safe point while it waits, and only then is recv filled; Test
// polls it (Waitany refuses it, unless the member has no neighbours:
// then the request is complete at once). The request is m's, as Isend's and
// Irecv's are: it travels in checkpoints, and after a move Run re-entered
// replays IneighborAlltoall with its new recv (see Irecv). Its messages
// travel on a tag of their own, which no Irecv, AnyTag included, takes.
func IneighborAlltoall[T any](c *Ctx, m *Comm, send, recv [][]T) (Request, error) {
	nb := m.Neighbors()
	if nb == nil || len(send) != len(nb) || len(recv) != len(nb) {
		return 0, fmt.Errorf("ineighbor alltoall: %d blocks to send and %d to receive on a grid of %d dimensions: %w",
			len(send), len(recv), len(m.Dims), ErrNoComm)
	}
	of := make([]int, 0, 2*len(nb))
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
				return 0, fmt.Errorf("ineighbor alltoall: %w", err)
			}
			of = append(of, int(r))
		}
	}
	for i, q := range nb {
		if q == NoRank {
			continue
		}
		r, err := m.isend(c, q, neighborTag, neighborTag, send[i])
		if err != nil {
			return 0, fmt.Errorf("ineighbor alltoall: %w", err)
		}
		of = append(of, int(r))
	}
	rs := ReqState{Of: of}
	if len(of) == 0 { // no neighbours: complete at once, as an Isend is
		rs = ReqState{Send: true, Done: true, From: m.Rank}
	}
	r, err := m.start(rs)
	if err != nil {
		return 0, fmt.Errorf("ineighbor alltoall: %w", err)
	}
	return r, nil
}

// requestsOf returns the requests request r of several stands for.
func (m *Comm) requestsOf(r Request) []Request {
	s := m.req(r)
	if s == nil {
		return nil
	}
	out := make([]Request, len(s.Of))
	for i, id := range s.Of {
		out[i] = Request(id)
	}
	return out
}

// waitOf is Wait for a request of several: it waits for each of them
// (replayed as Waitall is) and marks r complete and reported.
func (m *Comm) waitOf(c *Ctx, r Request) error {
	if err := m.Waitall(c, m.requestsOf(r)...); err != nil {
		return err
	}
	if s := m.req(r); s != nil {
		s.Done, s.Waited = true, true
	}
	return nil
}

// testOf is Test for a request of several: complete once each of them is.
func (m *Comm) testOf(c *Ctx, r Request) (bool, CommStatus, error) {
	for _, q := range m.requestsOf(r) {
		done, _, err := m.Test(c, q)
		if err != nil || !done {
			return false, CommStatus{}, err
		}
	}
	if s := m.req(r); s != nil {
		s.Done, s.Waited = true, true
	}
	return true, CommStatus{}, nil
}
