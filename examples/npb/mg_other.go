//go:build !amd64

package npb

func mgSum4(dst, a, b, c, d *float64, n int) {
	panic("npb: mgSum4 is amd64 assembly")
}

func mgResidRow(r, v, u, u1, u2 *float64, n int, a0, a2, a3 float64) {
	panic("npb: mgResidRow is amd64 assembly")
}

func mgPsinvRow(u, r, r1, r2 *float64, n int, c0, c1, c2 float64) {
	panic("npb: mgPsinvRow is amd64 assembly")
}

func mgInterpRow(u, x *float64, n int, a, b float64) {
	panic("npb: mgInterpRow is amd64 assembly")
}
