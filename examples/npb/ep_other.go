//go:build !amd64

package npb

import (
	"math"
	"unsafe"
)

// epGauss sets t2[i] = sqrt(-2·log(t1)/t1) with t1 = x1·x1 + x2·x2 for the
// pairs (x1, x2) = (x[2i], x[2i+1]), i < pairs. pairs must be even: x holds
// 2·pairs values and t2 pairs values. (On amd64 it is assembly.)
func epGauss(x *float64, t2 *float64, pairs int) {
	xs := unsafe.Slice(x, 2*pairs)
	ts := unsafe.Slice(t2, pairs)
	for i := range ts {
		x1, x2 := xs[2*i], xs[2*i+1]
		t1 := float64(x1*x1) + float64(x2*x2)
		ts[i] = math.Sqrt(-2 * math.Log(t1) / t1)
	}
}
