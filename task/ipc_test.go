package task

import (
	"slices"
	"strings"
	"testing"
)

// TestRecvOptions receives by predicate at a safe point (checkpointed
// there and resumed from the fields), takes a raw message, receives by
// predicate without waiting, and checks that Mcast skips the caller.
func TestRecvOptions(t *testing.T) {
	out, w := runScript(t, 2, 2, func(c *Ctx, s *scriptTask) error {
		if s.C.Rank == 1 {
			if s.Step == 0 {
				for _, tag := range []int{1, 2, 3, 5, 6} {
					if err := c.Send(s.C.TID(0), tag, []int64{int64(tag)}); err != nil {
						return err
					}
				}
				if err := c.Send(s.C.TID(0), 4, []float64{1.5}); err != nil {
					return err
				}
				s.Step = 1
			}
			var v int
			m, err := c.Recv(s.C.TID(0), 8, &v, Safe())
			if err != nil {
				return err
			}
			s.Ints = append(s.Ints, int64(v), int64(m.Tag))
			return nil
		}
		// Newest first, by predicate, each wait a safe point.
		for s.Step < 3 {
			want := 3 - s.Step
			var v []int64
			m, err := c.Recv(AnyTask, AnyTag, &v, Safe(), Match(func(st Status) bool { return st.Tag == want }))
			if err != nil {
				return err
			}
			if m.Tag != want || m.From != s.C.TID(1) || !slices.Equal(v, []int64{int64(want)}) {
				t.Errorf("Recv by predicate for tag %d: message %+v, body %v", want, m.Status(), v)
			}
			s.Ints = append(s.Ints, v...)
			s.Step++
		}
		// The raw message: its body undecoded, decodable later.
		m, err := c.Recv(s.C.TID(1), 4, nil)
		if err != nil {
			return err
		}
		var f []float64
		if m.Enc != EncFloat64s || m.Len() != 8 || m.Decode(&f) != nil || !slices.Equal(f, []float64{1.5}) {
			t.Errorf("raw message %+v decodes to %v", m.Status(), f)
		}
		// A non-blocking receive by predicate passes over tag 5.
		var v []int64
		if m, ok, err := c.TryRecv(AnyTask, AnyTag, &v, Match(func(st Status) bool { return st.Tag == 6 })); err != nil || !ok || m.Tag != 6 || v[0] != 6 {
			t.Errorf("TryRecv by predicate = %+v %v %v %v", m.Status(), ok, err, v)
		}
		if _, ok, err := c.TryRecv(AnyTask, AnyTag, nil, Match(func(st Status) bool { return st.Tag == 7 })); ok || err != nil {
			t.Errorf("TryRecv for a tag never sent = %v %v", ok, err)
		}
		if st, ok := c.Probe(AnyTask, AnyTag); !ok || st.Tag != 5 {
			t.Errorf("Probe after the predicates = %+v %v, want tag 5 left", st, ok)
		}
		// Mcast never delivers to the caller, even when listed.
		if err := c.Mcast([]TID{c.MyTID(), s.C.TID(1)}, 8, 42); err != nil {
			return err
		}
		if st, ok := c.Probe(c.MyTID(), 8); ok {
			t.Errorf("Mcast delivered to its caller: %+v", st)
		}
		return nil
	})
	if n := w.eps[0].ckpts.Load(); n == 0 {
		t.Error("rank 0 was never checkpointed while it waited by predicate")
	}
	if got := out[0].Ints; !slices.Equal(got, []int64{3, 2, 1}) {
		t.Errorf("rank 0 received %v by predicate, want [3 2 1]", got)
	}
	if got := out[1].Ints; !slices.Equal(got, []int64{42, 8}) {
		t.Errorf("rank 1 got %v from the Mcast, want [42 8]", got)
	}
}

// TestOptionsRefused checks that each call names an option it does not
// take, and sends nothing.
func TestOptionsRefused(t *testing.T) {
	w := newWorld(2, 0)
	c := NewCtx(w.eps[0], nil)
	to := w.eps[1].self
	match := Match(func(Status) bool { return true })
	for _, tc := range []struct {
		name, want string
		call       func() error
	}{
		{"send with Match", "Match", func() error { return c.Send(to, 1, 1, match) }},
		{"send Safe and InPlace", "both Safe and InPlace", func() error { return c.Send(to, 1, []byte{1}, Safe(), InPlace()) }},
		{"recv InPlace", "InPlace", func() error { _, err := c.Recv(to, 1, nil, InPlace()); return err }},
		{"tryrecv Safe", "Safe", func() error { _, _, err := c.TryRecv(to, 1, nil, Safe()); return err }},
		{"tryrecv Timeout", "Timeout", func() error { _, _, err := c.TryRecv(to, 1, nil, Timeout(1)); return err }},
	} {
		err := tc.call()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
	if _, ok := w.eps[1].Probe(AnyTask, AnyTag); ok {
		t.Errorf("a refused send was delivered")
	}
}

// TestBcastSlicePointer: a pointer to a numeric slice, which Bcast sends
// as the slice itself (raw), reaches every member whole, into slices of
// any length.
func TestBcastSlicePointer(t *testing.T) {
	out, _ := runScript(t, 3, 0, func(c *Ctx, s *scriptTask) error {
		got := []float64{9}
		if s.C.Rank == 1 {
			got = []float64{1.5, 2.5, 3.5}
		}
		if err := s.C.Bcast(c, &got, 1); err != nil {
			return err
		}
		s.Got = got
		return nil
	})
	for r, s := range out {
		if !slices.Equal(s.Got, []float64{1.5, 2.5, 3.5}) {
			t.Errorf("rank %d got %v", r, s.Got)
		}
	}
	if p, err := Encode(sliceOf(&[]int32{1, 2})); err != nil || p.Enc != EncInt32s {
		t.Errorf("a pointer to []int32 encodes as %v, %v; want raw int32s", p.Enc, err)
	}
}
