package npb

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestISRankBuckets checks the bucket-by-bucket ranking against a plain
// count and running sum, on random segments ordered by bucket as the
// scatter leaves them, and that a key out of bucket order or outside the
// range is an error.
func TestISRankBuckets(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct{ nkeys, width, nseg, n int }{
		{1 << 10, 8, 1, 4000}, {1 << 12, 64, 3, 20000}, {256, 256, 2, 10}, {512, 32, 4, 0},
	} {
		minKey := rng.IntN(1000)
		segs := make([][]int32, c.nseg)
		for i := range segs {
			seg := make([]int32, rng.IntN(c.n+1))
			for j := range seg {
				seg[j] = int32(minKey + rng.IntN(c.nkeys))
			}
			// Order by bucket only, keys within a bucket left as drawn.
			slices.SortStableFunc(seg, func(a, b int32) int {
				return (int(a)-minKey)/c.width - (int(b)-minKey)/c.width
			})
			segs[i] = seg
		}
		below := int32(rng.IntN(100))
		want := make([]int32, c.nkeys)
		for _, seg := range segs {
			for _, k := range seg {
				want[int(k)-minKey]++
			}
		}
		run := below
		for i, n := range want {
			run += n
			want[i] = run
		}
		got := make([]int32, c.nkeys)
		for i := range got {
			got[i] = -7 // the ranking must overwrite every count
		}
		if err := isRankBuckets(got, segs, minKey, c.width, below); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%+v: counts differ from the plain count", c)
		}
	}
	counts := make([]int32, 64)
	for _, segs := range [][][]int32{
		{{0, 1, 20, 3}},     // 3 after a key of a later bucket
		{{0, 1}, {5, 64}},   // 64 is past the range
		{{10, 12}, {-1, 2}}, // -1 is before it
	} {
		if err := isRankBuckets(counts, segs, 0, 8, 0); err == nil {
			t.Errorf("%v: accepted", segs)
		}
	}
}

// TestISLogBuckets checks the bucket count for every class with a
// reference and every np the kernel accepts: a bucket at least per task,
// at most NPB's count, and whole key values per bucket.
func TestISLogBuckets(t *testing.T) {
	for _, class := range []string{"S", "W", "A", "B", "C"} {
		p, err := ISParamsFor(class)
		if err != nil {
			t.Fatal(err)
		}
		for np := 1; np <= 1<<p.LogBuckets; np *= 2 {
			lb := isLogBuckets(p, np)
			if lb > p.LogBuckets || 1<<lb < np || lb > p.LogMaxKey {
				t.Errorf("class %s np %d: 2^%d buckets", class, np, lb)
			}
		}
	}
}

// TestISVerifiesAcrossNP runs IS class S on 1 to 8 ranks (each with its own
// number of buckets) and checks that every run verifies.
func TestISVerifiesAcrossNP(t *testing.T) {
	for _, np := range []int{1, 2, 4, 8} {
		r := runLocal(t, "is", "S", np)
		if r.Verified != Successful || r.Values.FullVerified == nil || !*r.Values.FullVerified {
			t.Fatalf("np %d: %+v", np, r)
		}
	}
}

// TestISCountsWrapAtClassD checks what IS class D relies on: with 2^31 keys
// a task's cumulative counts (int32) can pass 2^31-1 and wrap, yet a count
// less the keys below the task's range (what the full verification takes as
// a position) stays exact, and so does every count below 2^31 (the ranks
// the partial checks compare).
func TestISCountsWrapAtClassD(t *testing.T) {
	const width, nkeys = 8, 64
	below := int32(1<<31 - 100) // the keys of the tasks before this one
	seg := make([]int32, 0, 300)
	for k := range nkeys {
		for range 1 + k%7 {
			seg = append(seg, int32(k))
		}
	}
	counts := make([]int32, nkeys)
	if err := isRankBuckets(counts, [][]int32{seg}, 0, width, below); err != nil {
		t.Fatal(err)
	}
	wrapped, n := false, 0
	for v := range nkeys {
		n += 1 + v%7
		if got := counts[v] - below; int(got) != n {
			t.Fatalf("count of keys <= %d less those below: %d, want %d", v, got, n)
		}
		if total := int64(below) + int64(n); total < 1<<31 && int64(counts[v]) != total {
			t.Fatalf("count of keys <= %d: %d, want %d", v, counts[v], total)
		} else if total >= 1<<31 {
			wrapped = true
		}
	}
	if !wrapped {
		t.Fatal("the counts never passed 2^31-1: the test does not test the wrap")
	}
}
