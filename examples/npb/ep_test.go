package npb

import (
	"math"
	"testing"
)

// epBatchPlain is EP's batch as the reference writes it: one stream, one
// draw after the other, math.Log, one counter per annulus. epBatch must
// match it bit for bit.
func epBatchPlain(k int, an uint64, q *[epNQ]float64, sx, sy *float64) {
	s := (SeedEP * Pow46(an, uint64(k))) & mask46
	for range epNK {
		x1 := 2*Randlc(&s, RandA) - 1
		x2 := 2*Randlc(&s, RandA) - 1
		t1 := x1*x1 + x2*x2
		if t1 <= 1 {
			t2 := math.Sqrt(-2 * math.Log(t1) / t1)
			t3 := x1 * t2
			t4 := x2 * t2
			q[int(max(math.Abs(t3), math.Abs(t4)))]++
			*sx += t3
			*sy += t4
		}
	}
}

func TestEPBatchBitIdentical(t *testing.T) {
	an := Pow46(RandA, 2*epNK)
	buf := new([2 * epNK]float64)
	// 8 batches, about 400,000 pairs.
	for _, k := range []int{0, 1, 2, 77, 1000, 4095, 8191, 16383} {
		var q, qr [epNQ]float64
		var sx, sy, sxr, syr float64
		epBatch(k, an, &q, &sx, &sy, buf)
		epBatchPlain(k, an, &qr, &sxr, &syr)
		if sx != sxr || sy != syr || q != qr {
			t.Errorf("batch %d: sx %v sy %v q %v, want %v %v %v", k, sx, sy, q, sxr, syr, qr)
		}
	}
}

func BenchmarkEPBatch(b *testing.B) {
	an := Pow46(RandA, 2*epNK)
	var q [epNQ]float64
	var sx, sy float64
	buf := new([2 * epNK]float64)
	b.Run("new", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			epBatch(i, an, &q, &sx, &sy, buf)
		}
	})
	b.Run("plain", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			epBatchPlain(i, an, &q, &sx, &sy)
		}
	})
}
