package npb

// epGauss sets t2[i] = sqrt(-2·log(t1)/t1) with t1 = x1·x1 + x2·x2 for the
// pairs (x1, x2) = (x[2i], x[2i+1]), i < pairs, bit-identical to the same
// expression with math.Log. pairs must be even: x holds 2·pairs values and
// t2 pairs values. It is written in assembly (ep_amd64.s) to work on two
// pairs at once with packed doubles, which Go's compiler does not do.
//
//go:noescape
func epGauss(x *float64, t2 *float64, pairs int)
