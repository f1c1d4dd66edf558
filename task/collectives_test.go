package task

import (
	"fmt"
	"slices"
	"sync"
	"testing"
)

// digits folds in after acc as decimal digits: it is not commutative, so a
// result built with it shows the order the contributions were combined in.
func digits(acc, in []int64) {
	for i := range acc {
		acc[i] = acc[i]*10 + in[i]
	}
}

// serialFold is the reference reduction of inputs[lo:hi] with op, in rank
// order.
func serialFold(op func(acc, in []int64), inputs [][]int64, lo, hi int) []int64 {
	acc := slices.Clone(inputs[lo])
	for r := lo + 1; r < hi; r++ {
		op(acc, inputs[r])
	}
	return acc
}

// TestCollectivesAgainstSerial: at np = 1..5, each collective on a
// communicator gives every member what a serial computation over all the
// members' inputs gives, with no checkpoint and with every member
// checkpointed and restarted at every second wait or every third (replaying the
// collectives it had completed).
func TestCollectivesAgainstSerial(t *testing.T) {
	for n := 1; n <= 5; n++ {
		// in is rank r's input of length l for a numbered collective.
		in := func(r, l, k int) []int64 {
			out := make([]int64, l)
			for i := range out {
				out[i] = int64(k*1000 + r*10 + i%10 + 1)
			}
			return out
		}
		inputs := func(l, k int) [][]int64 {
			out := make([][]int64, n)
			for r := range n {
				out[r] = in(r, l, k)
			}
			return out
		}
		counts := make([]int, n) // unequal chunks, rank 0's empty
		total := 0
		for r := range n {
			counts[r] = r
			total += r
		}
		for _, every := range []int{0, 2, 3} {
			t.Run(fmt.Sprintf("np%d/every%d", n, every), func(t *testing.T) {
				runScript(t, n, every, func(c *Ctx, s *scriptTask) error {
					m := &s.C
					r := m.Rank
					check := func(what string, got, want any) error {
						if fmt.Sprint(got) != fmt.Sprint(want) { // nil and empty chunks alike
							return fmt.Errorf("%s: rank %d got %v, want %v", what, r, got, want)
						}
						return nil
					}
					var errs []error

					all, err := Allgather(c, m, in(r, 2, 1))
					if err != nil {
						return err
					}
					errs = append(errs, check("allgather", all, slices.Concat(inputs(2, 1)...)))

					// AllReduce in rank order (two members exchange
					// their data, more go through rank 0), and on
					// float64s, which it reads in place.
					ar := in(r, 3, 11)
					if err := AllReduce(c, m, digits, ar); err != nil {
						return err
					}
					errs = append(errs, check("allreduce", ar, serialFold(digits, inputs(3, 11), 0, n)))
					fs := []float64{float64(r) + 0.25, 2}
					if err := AllReduce(c, m, Sum[float64], fs); err != nil {
						return err
					}
					errs = append(errs, check("allreduce float64", fs, []float64{float64(n*(n-1))/2 + 0.25*float64(n), 2 * float64(n)}))

					allv, err := Allgatherv(c, m, in(r, r+1, 2))
					if err != nil {
						return err
					}
					wantv := make([][]int64, n)
					for q := range n {
						wantv[q] = in(q, q+1, 2)
					}
					errs = append(errs, check("allgatherv", allv, wantv))

					// Alltoall: chunk q of rank r's data goes to rank q.
					a2a := make([]int64, 2*n)
					for i := range a2a {
						a2a[i] = int64(r*100 + i)
					}
					got, err := Alltoall(c, m, a2a)
					if err != nil {
						return err
					}
					want := make([]int64, 0, 2*n)
					for q := range n {
						want = append(want, int64(q*100+2*r), int64(q*100+2*r+1))
					}
					errs = append(errs, check("alltoall", got, want))

					send := make([][]int64, n)
					for q := range n {
						send[q] = in(r*10+q, q+r, 3)
					}
					gotv, err := Alltoallv(c, m, send)
					if err != nil {
						return err
					}
					wantv = make([][]int64, n)
					for q := range n {
						wantv[q] = in(q*10+r, q+r, 3)
					}
					errs = append(errs, check("alltoallv", gotv, wantv))

					for _, root := range []int{0, n - 1, n / 2} {
						data := in(r, 3, 4)
						if err := Reduce(c, m, digits, data, root); err != nil {
							return err
						}
						want := in(r, 3, 4)
						if r == root {
							want = serialFold(digits, inputs(3, 4), 0, n)
						}
						errs = append(errs, check(fmt.Sprintf("reduce to %d", root), data, want))
					}

					data := in(r, 3, 5)
					if err := Scan(c, m, digits, data); err != nil {
						return err
					}
					errs = append(errs, check("scan", data, serialFold(digits, inputs(3, 5), 0, r+1)))

					data = in(r, 3, 6)
					if err := Exscan(c, m, Sum[int64], data); err != nil {
						return err
					}
					want = in(r, 3, 6)
					if r > 0 {
						want = serialFold(Sum[int64], inputs(3, 6), 0, r)
					}
					errs = append(errs, check("exscan", data, want))

					full := serialFold(digits, inputs(2*n, 7), 0, n)
					rs, err := ReduceScatter(c, m, digits, in(r, 2*n, 7), nil)
					if err != nil {
						return err
					}
					errs = append(errs, check("reduce-scatter", rs, full[2*r:2*r+2]))

					full = serialFold(digits, inputs(total, 8), 0, n)
					rs, err = ReduceScatter(c, m, digits, in(r, total, 8), counts)
					if err != nil {
						return err
					}
					off := r * (r - 1) / 2
					errs = append(errs, check("reduce-scatter v", rs, full[off:off+r]))

					root := n / 2
					var src []int64
					if r == root {
						src = in(99, total, 9)
					}
					sc, err := Scatterv(c, m, src, counts, root)
					if err != nil {
						return err
					}
					errs = append(errs, check("scatterv", sc, in(99, total, 9)[off:off+r]))

					gv, err := Gatherv(c, m, in(r, r, 10), n-1)
					if err != nil {
						return err
					}
					wantv = nil
					if r == n-1 {
						wantv = make([][]int64, n)
						for q := range n {
							wantv[q] = in(q, q, 10)
						}
					}
					errs = append(errs, check("gatherv", gv, wantv))

					f := []float64{float64(r) + 0.5}
					if err := Scan(c, m, Max[float64], f); err != nil {
						return err
					}
					errs = append(errs, check("scan max float64", f, []float64{float64(r) + 0.5}))
					for _, e := range errs {
						if e != nil {
							return e
						}
					}
					return nil
				})
			})
		}
	}
}

// TestCollectivesBadArguments: chunks that do not add up, a wrong number
// of counts or chunks, and a root outside the communicator are refused
// with an error before anything is sent.
func TestCollectivesBadArguments(t *testing.T) {
	runScript(t, 2, 0, func(c *Ctx, s *scriptTask) error {
		m := &s.C
		for what, err := range map[string]error{
			"alltoall of 3 for 2": func() error { _, err := Alltoall(c, m, []int64{1, 2, 3}); return err }(),
			"alltoallv of 1":      func() error { _, err := Alltoallv(c, m, [][]int64{{1}}); return err }(),
			"reduce-scatter 3/2":  func() error { _, err := ReduceScatter(c, m, Sum[int64], []int64{1, 2, 3}, nil); return err }(),
			"counts of 1":         func() error { _, err := ReduceScatter(c, m, Sum[int64], []int64{1}, []int{1}); return err }(),
			"reduce to rank 5":    Reduce(c, m, Sum[int64], []int64{1}, 5),
			"gatherv to rank -3":  func() error { _, err := Gatherv(c, m, []int64{1}, -3); return err }(),
		} {
			if err == nil {
				return fmt.Errorf("%s: accepted", what)
			}
		}
		return nil
	})
}

// TestBarrierWaitsForAll: no member leaves a Barrier before every member
// has entered it, at np = 1..4 (two members tell each other, more go
// through rank 0), round after round, with and without checkpoints.
func TestBarrierWaitsForAll(t *testing.T) {
	const rounds = 5
	for n := 1; n <= 4; n++ {
		for _, every := range []int{0, 2} {
			// entered[k][r] is set when rank r enters round k's barrier.
			var mu sync.Mutex
			entered := make([][]bool, rounds)
			for k := range entered {
				entered[k] = make([]bool, n)
			}
			runScript(t, n, every, func(c *Ctx, s *scriptTask) error {
				m := &s.C
				for k := range rounds {
					mu.Lock()
					entered[k][m.Rank] = true
					mu.Unlock()
					if err := m.Barrier(c); err != nil {
						return err
					}
					mu.Lock()
					all := !slices.Contains(entered[k], false)
					mu.Unlock()
					if !all {
						return fmt.Errorf("rank %d left barrier %d before every member entered it: %v", m.Rank, k, entered[k])
					}
				}
				return nil
			})
		}
	}
}
