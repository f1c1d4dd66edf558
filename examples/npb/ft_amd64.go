package npb

// ftRadix4 is one group of stockham's radix-4 pass: for q < run, with
// a, b, c, d = x[q], x[q+q4run], x[q+2·q4run], x[q+3·q4run] and
// j = sign·i·(b-d), it sets y[q] = (a+c)+(b+d),
// y[q+run] = ((a-c)-j)·w1, y[q+2·run] = ((a+c)-(b+d))·w2 and
// y[q+3·run] = ((a-c)+j)·w3, with w = [w1r w1i w2r w2i w3r w3i].
//
//go:noescape
func ftRadix4(y, x *complex128, run, q4run int, w *[6]float64, sign float64)

// ftRadix2 is one group of stockham's radix-2 pass: for q < run, with
// a, c = x[q], x[q+halfrun], it sets y[q] = a+c and y[q+run] = (a-c)·w.
//
//go:noescape
func ftRadix2(y, x *complex128, run, halfrun int, wr, wi float64)
