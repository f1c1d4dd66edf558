//go:build !amd64

package npb

func ftRadix4(y, x *complex128, run, q4run int, w *[6]float64, sign float64) {
	panic("npb: ftRadix4 is amd64 assembly")
}

func ftRadix2(y, x *complex128, run, halfrun int, wr, wi float64) {
	panic("npb: ftRadix2 is amd64 assembly")
}
