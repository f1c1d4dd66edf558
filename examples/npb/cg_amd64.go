package npb

// cgSpmv sets y[j] = Σ a[k]·x[colidx[k]] over k in [rowstr[j], rowstr[j+1])
// for j < nrows, each sum in the order of k, as spmvGo does.
//
//go:noescape
func cgSpmv(y *float64, rowstr *int32, nrows int, colidx *int32, a, x *float64)

// cgSpmvAsm says whether spmv runs cgSpmv.
const cgSpmvAsm = true
