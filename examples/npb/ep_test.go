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
		t1 := float64(x1*x1) + float64(x2*x2)
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
	sc := new(epScratch)
	// 8 batches, about 400,000 pairs.
	for _, k := range []int{0, 1, 2, 77, 1000, 4095, 8191, 16383} {
		var q, qr [epNQ]float64
		var sx, sy, sxr, syr float64
		epBatch(k, an, &q, &sx, &sy, sc)
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
	sc := new(epScratch)
	b.Run("new", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			epBatch(i, an, &q, &sx, &sy, sc)
		}
	})
	b.Run("plain", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			epBatchPlain(i, an, &q, &sx, &sy)
		}
	})
}

// TestEPGauss holds epGauss to the scalar expression with math.Log, bit for
// bit, on random pairs inside the unit circle over many magnitudes, on the
// pairs at its edges, and on an odd count padded to an even one.
func TestEPGauss(t *testing.T) {
	xs := []float64{1, 0, 0, 1, -1, 0, 0.5, 0.5, math.Sqrt2 / 2, 0, 0x1p-45, 0x1p-45, 0x1p-45, 0, 0.6, 0.8}
	s := uint64(SeedEP)
	for len(xs) < 2*100000 {
		scale := math.Ldexp(1, -int(Randlc(&s, RandA)*40))
		x1 := (2*Randlc(&s, RandA) - 1) * scale
		x2 := (2*Randlc(&s, RandA) - 1) * scale
		if t := float64(x1*x1) + float64(x2*x2); t <= 1 && t > 0 {
			xs = append(xs, x1, x2)
		}
	}
	xs = append(xs[:len(xs)-2], 0.25, 0.75) // an odd count below
	pairs := len(xs)/2 - 1
	x := append(xs[:2*pairs:2*pairs], 3, 4) // padding pair outside the circle
	t2 := make([]float64, pairs+1)
	epGauss(&x[0], &t2[0], pairs+1)
	for i := range pairs {
		x1, x2 := x[2*i], x[2*i+1]
		t1 := float64(x1*x1) + float64(x2*x2)
		want := math.Sqrt(-2 * math.Log(t1) / t1)
		if math.Float64bits(t2[i]) != math.Float64bits(want) {
			t.Fatalf("pair %d (%v, %v): %v, want %v", i, x1, x2, t2[i], want)
		}
	}
}
