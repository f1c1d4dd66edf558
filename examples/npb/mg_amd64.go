package npb

// mgSum4 sets dst[i] = ((a[i] + b[i]) + c[i]) + d[i] for i < n.
//
//go:noescape
func mgSum4(dst, a, b, c, d *float64, n int)

// mgResidRow sets, for 1 ≤ j < n-1,
// r[j] = ((v[j] - a0·u[j]) - a2·((u2[j] + u1[j-1]) + u1[j+1])) - a3·(u2[j-1] + u2[j+1]).
// r may be v.
//
//go:noescape
func mgResidRow(r, v, u, u1, u2 *float64, n int, a0, a2, a3 float64)

// mgPsinvRow sets, for 1 ≤ j < n-1,
// u[j] = ((u[j] + c0·r[j]) + c1·((r[j-1] + r[j+1]) + r1[j])) + c2·((r2[j] + r1[j-1]) + r1[j+1]).
//
//go:noescape
func mgPsinvRow(u, r, r1, r2 *float64, n int, c0, c1, c2 float64)

// mgInterpRow adds to a fine row from a coarse one: for i < n,
// u[2i] += a·x[i] and u[2i+1] += b·(x[i+1] + x[i]).
//
//go:noescape
func mgInterpRow(u, x *float64, n int, a, b float64)
