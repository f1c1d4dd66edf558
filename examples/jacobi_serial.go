package examples

// JacobiSerial runs the same iteration as the jacobi program on the whole
// grid in one loop and returns what it prints: iterations, last change and
// sum.
func JacobiSerial(n, maxIter, k int, tol float64) (iters int, diff, sum float64) {
	row := n + 2
	u := make([]float64, (n+2)*row)
	for x := range row {
		u[x] = 1
	}
	for ; iters < maxIter; iters++ {
		if iters > 0 && iters%k == 0 && diff <= tol {
			break
		}
		u, diff = JacobiStep(u, row)
	}
	return iters, diff, JacobiSum(u[row : (n+1)*row])
}
