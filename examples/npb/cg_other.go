//go:build !amd64

package npb

// cgSpmvAsm is false: spmv runs in Go (its assembly is amd64's).
const cgSpmvAsm = false

func cgSpmv(y *float64, rowstr *int32, nrows int, colidx *int32, a, x *float64) {
	panic("cgSpmv: no assembly on this architecture")
}
