package npb

// The NPB pseudo-random number generator: the multiplicative congruential
// generator x_{k+1} = a·x_k mod 2^46 with a = 5^13, returning 2^-46·x_{k+1}.
// This is the integer form of the official generator (randi8), which gives
// results bit-identical to the double-precision randlc/vranlc: every
// intermediate of the reference is an exact integer, and here the product is
// taken modulo 2^64 and masked to 46 bits.

const (
	// RandA is the generator's multiplier, 5^13.
	RandA uint64 = 1220703125
	// SeedEP is EP's seed.
	SeedEP uint64 = 271828183
	// Seed is the seed of CG, MG, FT and IS.
	Seed uint64 = 314159265

	mask46 = 1<<46 - 1
	r46    = 0x1p-46
)

// Randlc advances *x by one step with multiplier a and returns the new
// value scaled to (0, 1).
func Randlc(x *uint64, a uint64) float64 {
	*x = (*x * a) & mask46
	return float64(*x) * r46
}

// Vranlc fills y with the next len(y) values of the stream of *x and
// multiplier a: y[0] is the value after one step, not *x itself. *x ends as
// the last state.
func Vranlc(x *uint64, a uint64, y []float64) {
	s := *x
	for i := range y {
		s = (s * a) & mask46
		y[i] = float64(s) * r46
	}
	*x = s
}

// Pow46 returns a^n mod 2^46: the multiplier that advances the stream by n
// steps at once.
func Pow46(a uint64, n uint64) uint64 {
	r := uint64(1)
	b := a & mask46
	for n > 0 {
		if n&1 == 1 {
			r = (r * b) & mask46
		}
		b = (b * b) & mask46
		n >>= 1
	}
	return r
}

// Skip returns the state of the stream x0 after n steps.
func Skip(x0 uint64, n uint64) uint64 {
	return (x0 * Pow46(RandA, n)) & mask46
}
