package task

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// This file holds the collectives MPI programs reach for beyond Barrier,
// Bcast, AllReduce, Gather and Scatter. Each exchanges its data
// directly between the members that need it, the messages a hand-written
// version would send, and is a safe point while it waits (see Comm).

// decodeAs decodes p into a new []T.
func decodeAs[T any](p Payload) ([]T, error) {
	var out []T
	if err := p.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}

// decodeSame decodes p into data's own array, p holding len(data)
// elements; it fails, leaving data as it was, when p holds another number.
func decodeSame[T any](p Payload, data []T) error {
	out := data[:0:len(data)]
	if es := p.Enc.elemSize(); es == 0 || len(p.Data) != es*len(data) {
		out = nil
	}
	if err := p.Decode(&out); err != nil {
		return err
	}
	if len(out) != len(data) {
		return fmt.Errorf("result of %d elements, want %d", len(out), len(data))
	}
	if len(out) > 0 && &out[0] != &data[0] {
		copy(data, out)
	}
	return nil
}

// packParts encodes a result made of one payload per rank, for the replay
// record: the parts' encodings and lengths, then their bytes, so that
// numeric parts cost one copy.
func packParts(parts []Payload) (Payload, error) {
	n := 4 + 5*len(parts)
	for _, q := range parts {
		n += len(q.Data)
	}
	b := make([]byte, 0, n)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(parts)))
	for _, q := range parts {
		b = append(b, byte(q.Enc))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(q.Data)))
	}
	for _, q := range parts {
		b = append(b, q.Data...)
	}
	return Payload{Enc: EncBytes, Data: b}, nil
}

// unpackParts splits what packParts made back into the parts, which share
// p's bytes.
func unpackParts(p Payload) ([]Payload, error) {
	b := p.Data
	if len(b) < 4 {
		return nil, fmt.Errorf("a record of parts of %d bytes: %w", len(b), ErrDecode)
	}
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if n > MaxCommSize || len(b) < 5*n {
		return nil, fmt.Errorf("a record of %d parts in %d bytes: %w", n, len(b), ErrDecode)
	}
	head, body := b[:5*n], b[5*n:]
	parts := make([]Payload, n)
	for i := range parts {
		l := int(binary.LittleEndian.Uint32(head[5*i+1:]))
		if l > len(body) {
			return nil, fmt.Errorf("a record's part of %d bytes past its end: %w", l, ErrDecode)
		}
		parts[i] = Payload{Enc: Encoding(head[5*i]), Data: body[:l:l]}
		body = body[l:]
	}
	return parts, nil
}

// decodeParts decodes one payload per rank.
func decodeParts[T any](parts []Payload) ([][]T, error) {
	out := make([][]T, len(parts))
	for r, q := range parts {
		v, err := decodeAs[T](q)
		if err != nil {
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
		out[r] = v
	}
	return out, nil
}

// exchange runs one collective in which send (if not nil) sends this
// member's part and one message is received from every rank in from; it
// returns what was received, by rank, with mine in the caller's place
// (from the record when replayed).
func (m *Comm) exchange(c *Ctx, send func() error, from []int, mine Payload) ([]Payload, error) {
	var parts []Payload
	res, replayed, err := m.collective(c, send, from, func(got []Payload) (Payload, error) {
		parts = slices.Clone(got)
		parts[m.Rank] = mine
		return Payload{}, nil
	})
	if err != nil {
		return nil, err
	}
	if replayed {
		return unpackParts(res)
	}
	// collective recorded a placeholder: the parts replace it.
	m.next--
	m.Done = m.Done[:len(m.Done)-min(1, len(m.Done))]
	m.recordParts(parts)
	return parts, nil
}

// Allgatherv gives every member every member's data, by rank
// (MPI_Allgatherv): the chunks may differ in length. It is a safe point
// while it waits.
func Allgatherv[T any](c *Ctx, m *Comm, data []T) ([][]T, error) {
	if err := m.check("allgather"); err != nil {
		return nil, err
	}
	p, err := Encode(data)
	if err != nil {
		return nil, fmt.Errorf("allgather: %w", err)
	}
	others := m.others(m.Rank)
	parts, err := m.exchange(c, func() error { return c.sendComm(m, p, others...) }, others, p)
	if err != nil {
		return nil, collErr("allgather", err)
	}
	out, err := decodeParts[T](parts)
	if err != nil {
		return nil, fmt.Errorf("allgather: %w", err)
	}
	return out, nil
}

// Allgather gives every member the members' data concatenated in rank
// order (MPI_Allgather). Every member passes data of the same length. It
// is a safe point while it waits.
func Allgather[T any](c *Ctx, m *Comm, data []T) ([]T, error) {
	if err := m.check("allgather"); err != nil {
		return nil, err
	}
	p, err := Encode(data)
	if err != nil {
		return nil, fmt.Errorf("allgather: %w", err)
	}
	others := m.others(m.Rank)
	parts, err := m.exchange(c, func() error { return c.sendComm(m, p, others...) }, others, p)
	if err != nil {
		return nil, collErr("allgather", err)
	}
	k := len(data)
	out := make([]T, k*len(parts))
	for r, q := range parts { // this member's too: replayed, it is the record's
		if err := decodeSame(q, out[r*k:(r+1)*k]); err != nil {
			return nil, fmt.Errorf("allgather: rank %d: %w", r, err)
		}
	}
	return out, nil
}

// Alltoallv sends send[r] to the member of rank r and returns, by rank,
// what each member sent this one (MPI_Alltoallv); send has one chunk per
// member, of any lengths. It is a safe point while it waits.
func Alltoallv[T any](c *Ctx, m *Comm, send [][]T) ([][]T, error) {
	parts, err := alltoallParts(c, m, send)
	if err != nil {
		return nil, err
	}
	out, err := decodeParts[T](parts)
	if err != nil {
		return nil, fmt.Errorf("alltoall: %w", err)
	}
	return out, nil
}

// alltoallParts is Alltoallv returning what it received undecoded.
func alltoallParts[T any](c *Ctx, m *Comm, send [][]T) ([]Payload, error) {
	if err := m.check("alltoall"); err != nil {
		return nil, err
	}
	if len(send) != m.Size() {
		return nil, fmt.Errorf("alltoall: %d chunks for %d members", len(send), m.Size())
	}
	ps := make([]Payload, len(send))
	for r := range send {
		var err error
		if ps[r], err = Encode(send[r]); err != nil {
			return nil, fmt.Errorf("alltoall: %w", err)
		}
	}
	others := m.others(m.Rank)
	parts, err := m.exchange(c, func() error {
		for _, r := range others {
			if err := c.sendComm(m, ps[r], r); err != nil {
				return err
			}
		}
		return nil
	}, others, ps[m.Rank])
	if err != nil {
		return nil, collErr("alltoall", err)
	}
	return parts, nil
}

// Alltoall sends the r-th of Size equal chunks of data to the member of
// rank r and returns the chunks received, concatenated in rank order
// (MPI_Alltoall). It is a safe point while it waits.
func Alltoall[T any](c *Ctx, m *Comm, data []T) ([]T, error) {
	if err := m.check("alltoall"); err != nil {
		return nil, err
	}
	n := m.Size()
	if len(data)%n != 0 {
		return nil, fmt.Errorf("alltoall: %d elements for %d members", len(data), n)
	}
	k := len(data) / n
	send := make([][]T, n)
	for r := range n {
		send[r] = data[r*k : (r+1)*k]
	}
	parts, err := alltoallParts(c, m, send)
	if err != nil {
		return nil, err
	}
	out := make([]T, len(data))
	for r, q := range parts {
		if err := decodeSame(q, out[r*k:(r+1)*k]); err != nil {
			return nil, fmt.Errorf("alltoall: rank %d: %w", r, err)
		}
	}
	return out, nil
}

// fold combines got[r] for each rank r in order into acc, which holds the
// first contribution already, with op.
func fold[T any](op func(acc, in []T), acc []T, got []Payload, ranks []int) error {
	var in []T
	for _, r := range ranks {
		in = in[:0]
		if err := got[r].Decode(&in); err != nil {
			return err
		}
		if len(in) != len(acc) {
			return fmt.Errorf("rank %d sent %d elements, want %d", r, len(in), len(acc))
		}
		op(acc, in)
	}
	return nil
}

// Reduce combines data element-wise across the members with op, in
// rank order, and leaves the result in root's data (MPI_Reduce); the
// others' data is left as it was. Every member passes data of the same
// length. It is a safe point while it waits.
func Reduce[T any](c *Ctx, m *Comm, op func(acc, in []T), data []T, root int) error {
	if err := m.check("reduce", root); err != nil {
		return err
	}
	if root == NoRank {
		return fmt.Errorf("reduce: no root")
	}
	if m.Rank != root {
		p, err := Encode(data)
		if err != nil {
			return fmt.Errorf("reduce: %w", err)
		}
		_, _, err = m.collective(c, func() error { return c.sendComm(m, p, root) }, nil,
			func([]Payload) (Payload, error) { return Payload{}, nil })
		return collErr("reduce", err)
	}
	var mine Payload
	if root != 0 {
		var err error
		if mine, err = Encode(data); err != nil {
			return fmt.Errorf("reduce: %w", err)
		}
	}
	res, replayed, err := m.collective(c, nil, m.others(root), func(got []Payload) (Payload, error) {
		var acc []T
		if root == 0 {
			acc = append(make([]T, 0, len(data)), data...)
		} else {
			got[root] = mine
			if err := got[0].Decode(&acc); err != nil {
				return Payload{}, err
			}
			if len(acc) != len(data) {
				return Payload{}, fmt.Errorf("rank 0 sent %d elements, want %d", len(acc), len(data))
			}
		}
		ranks := make([]int, 0, len(got))
		for r := 1; r < len(got); r++ {
			ranks = append(ranks, r)
		}
		if err := fold(op, acc, got, ranks); err != nil {
			return Payload{}, err
		}
		copy(data, acc)
		return inPlace(acc) // acc is the record's alone from here
	})
	if err != nil {
		return collErr("reduce", err)
	}
	if replayed {
		if err := decodeSame(res, data); err != nil {
			return fmt.Errorf("reduce: %w", err)
		}
	}
	return nil
}

// scan is Scan (exclusive false) and Exscan (exclusive true): the chain
// passes each member the combination of the ranks below it.
func scan[T any](c *Ctx, m *Comm, op func(acc, in []T), data []T, exclusive bool, what string) error {
	if err := m.check(what); err != nil {
		return err
	}
	r, n := m.Rank, m.Size()
	var from []int
	if r > 0 {
		from = []int{r - 1}
	}
	res, replayed, err := m.collective(c, nil, from, func(got []Payload) (Payload, error) {
		// below is the combination of ranks 0..r-1; acc adds this one.
		var below []T
		if r > 0 {
			if err := got[r-1].Decode(&below); err != nil {
				return Payload{}, err
			}
			if len(below) != len(data) {
				return Payload{}, fmt.Errorf("rank %d sent %d elements, want %d", r-1, len(below), len(data))
			}
		}
		acc := data
		switch {
		case r > 0 && exclusive:
			acc = slices.Clone(below)
			op(acc, data)
		case r > 0:
			acc = below // below is this call's own: fold into it
			op(acc, data)
		}
		var sent Payload
		if r+1 < n {
			var err error
			if sent, err = Encode(acc); err != nil {
				return Payload{}, err
			}
			if err := c.sendComm(m, sent, r+1); err != nil {
				return Payload{}, err
			}
		}
		switch {
		case !exclusive:
			copy(data, acc)
			if r > 0 {
				return inPlace(acc) // acc is the record's alone from here
			}
		case r > 0:
			copy(data, below)
			return inPlace(below)
		}
		if sent.Data != nil && !exclusive {
			return sent, nil // the same values
		}
		return Encode(data)
	})
	if err != nil {
		return collErr(what, err)
	}
	if replayed {
		if err := decodeSame(res, data); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

// Scan leaves in each member's data the element-wise combination with op
// of the data of ranks 0 up to its own, in rank order (MPI_Scan, an
// inclusive prefix reduction). Every member passes data of the same
// length. It is a safe point while it waits.
func Scan[T any](c *Ctx, m *Comm, op func(acc, in []T), data []T) error {
	return scan(c, m, op, data, false, "scan")
}

// Exscan leaves in each member's data the combination of the data of the
// ranks below it (MPI_Exscan, an exclusive prefix reduction); rank 0's
// data, which MPI leaves undefined, is left as it was. It is a safe point
// while it waits.
func Exscan[T any](c *Ctx, m *Comm, op func(acc, in []T), data []T) error {
	return scan(c, m, op, data, true, "exscan")
}

// ReduceScatter combines data element-wise across the members with op, in
// rank order, and returns to the member of rank r its counts[r] elements
// of the result, those after the chunks of the ranks below
// (MPI_Reduce_scatter); nil counts means equal chunks
// (MPI_Reduce_scatter_block). Every member passes the same counts, which
// sum to len(data). It is a safe point while it waits.
func ReduceScatter[T any](c *Ctx, m *Comm, op func(acc, in []T), data []T, counts []int) ([]T, error) {
	if err := m.check("reduce-scatter"); err != nil {
		return nil, err
	}
	n := m.Size()
	offs, err := chunkOffsets(len(data), n, counts)
	if err != nil {
		return nil, fmt.Errorf("reduce-scatter: %w", err)
	}
	r := m.Rank
	others := m.others(r)
	res, _, err := m.collective(c, func() error {
		for _, q := range others {
			p, err := Encode(data[offs[q]:offs[q+1]])
			if err != nil {
				return err
			}
			if err := c.sendComm(m, p, q); err != nil {
				return err
			}
		}
		return nil
	}, others, func(got []Payload) (Payload, error) {
		mine := data[offs[r]:offs[r+1]]
		var acc []T
		if r == 0 {
			acc = slices.Clone(mine)
		} else {
			if err := got[0].Decode(&acc); err != nil {
				return Payload{}, err
			}
			if len(acc) != len(mine) {
				return Payload{}, fmt.Errorf("rank 0 sent %d elements, want %d", len(acc), len(mine))
			}
		}
		var in []T
		for q := 1; q < n; q++ {
			if q == r {
				op(acc, mine)
				continue
			}
			in = in[:0]
			if err := got[q].Decode(&in); err != nil {
				return Payload{}, err
			}
			if len(in) != len(acc) {
				return Payload{}, fmt.Errorf("rank %d sent %d elements, want %d", q, len(in), len(acc))
			}
			op(acc, in)
		}
		return inPlace(acc) // acc is the record's alone from here
	})
	if err != nil {
		return nil, collErr("reduce-scatter", err)
	}
	out, err := decodeAs[T](res)
	if err != nil {
		return nil, fmt.Errorf("reduce-scatter: %w", err)
	}
	return out, nil
}

// chunkOffsets returns where each of n chunks of a slice of length l
// begins, and l at the end: counts gives their lengths, nil equal ones.
func chunkOffsets(l, n int, counts []int) ([]int, error) {
	offs := make([]int, n+1)
	if counts == nil {
		if l%n != 0 {
			return nil, fmt.Errorf("%d elements for %d members", l, n)
		}
		for r := range n + 1 {
			offs[r] = r * (l / n)
		}
		return offs, nil
	}
	if len(counts) != n {
		return nil, fmt.Errorf("%d counts for %d members", len(counts), n)
	}
	for r, k := range counts {
		if k < 0 {
			return nil, fmt.Errorf("count %d for rank %d", k, r)
		}
		offs[r+1] = offs[r] + k
	}
	if offs[n] != l {
		return nil, fmt.Errorf("counts add up to %d, data has %d elements", offs[n], l)
	}
	return offs, nil
}

// Scatterv hands the members consecutive chunks of root's data, counts[r]
// elements to the member of rank r, in rank order, and returns the
// caller's chunk (MPI_Scatterv). Only root's data and counts are read;
// nil counts means equal chunks. It is a safe point while it waits.
func Scatterv[T any](c *Ctx, m *Comm, data []T, counts []int, root int) ([]T, error) {
	if err := m.check("scatter", root); err != nil {
		return nil, err
	}
	if root == NoRank {
		return nil, fmt.Errorf("scatter: no root")
	}
	var p Payload
	var err error
	if m.Rank == root {
		offs, err := chunkOffsets(len(data), m.Size(), counts)
		if err != nil {
			return nil, fmt.Errorf("scatter: %w", err)
		}
		p, _, err = m.collective(c, nil, nil, func([]Payload) (Payload, error) {
			for _, r := range m.others(root) {
				chunk, err := Encode(data[offs[r]:offs[r+1]])
				if err != nil {
					return Payload{}, err
				}
				if err := c.sendComm(m, chunk, r); err != nil {
					return Payload{}, err
				}
			}
			return Encode(data[offs[root]:offs[root+1]])
		})
		if err != nil {
			return nil, collErr("scatter", err)
		}
	} else {
		p, _, err = m.collective(c, nil, []int{root}, func(got []Payload) (Payload, error) { return got[root], nil })
		if err != nil {
			return nil, collErr("scatter", err)
		}
	}
	out, err := decodeAs[T](p)
	if err != nil {
		return nil, fmt.Errorf("scatter: %w", err)
	}
	return out, nil
}

// Gatherv collects every member's data at root, by rank (MPI_Gatherv): the
// chunks may differ in length. Root gets them, the others nil. It is a
// safe point while it waits.
func Gatherv[T any](c *Ctx, m *Comm, data []T, root int) ([][]T, error) {
	if err := m.check("gather", root); err != nil {
		return nil, err
	}
	if root == NoRank {
		return nil, fmt.Errorf("gather: no root")
	}
	p, err := Encode(data)
	if err != nil {
		return nil, fmt.Errorf("gather: %w", err)
	}
	if m.Rank != root {
		_, _, err = m.collective(c, func() error { return c.sendComm(m, p, root) }, nil,
			func([]Payload) (Payload, error) { return Payload{}, nil })
		return nil, collErr("gather", err)
	}
	parts, err := m.exchange(c, nil, m.others(root), p)
	if err != nil {
		return nil, collErr("gather", err)
	}
	out, err := decodeParts[T](parts)
	if err != nil {
		return nil, fmt.Errorf("gather: %w", err)
	}
	return out, nil
}
