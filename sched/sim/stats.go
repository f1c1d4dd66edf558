package sim

import "math"

// tQuantile975 holds the 0.975 quantile of Student's t distribution for 1 to
// 30 degrees of freedom.
var tQuantile975 = [...]float64{
	12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
	2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
}

// tCrit is the two-sided 95% critical value of Student's t with df degrees
// of freedom.
func tCrit(df int) float64 {
	if df < 1 {
		return math.Inf(1)
	}
	if df <= len(tQuantile975) {
		return tQuantile975[df-1]
	}
	// Cornish-Fisher expansion around the normal quantile.
	z := 1.959964
	d := float64(df)
	return z + (z*z*z+z)/(4*d) + (5*z*z*z*z*z+16*z*z*z+3*z)/(96*d*d)
}

// BatchMeans summarises per-batch means: their grand mean and the half-width
// of its 95% confidence interval.
func BatchMeans(batches []float64) (mean, ci95 float64) {
	n := len(batches)
	if n == 0 {
		return math.NaN(), math.NaN()
	}
	for _, b := range batches {
		mean += b
	}
	mean /= float64(n)
	if n < 2 {
		return mean, math.Inf(1)
	}
	var ss float64
	for _, b := range batches {
		ss += (b - mean) * (b - mean)
	}
	sd := math.Sqrt(ss / float64(n-1))
	return mean, tCrit(n-1) * sd / math.Sqrt(float64(n))
}
