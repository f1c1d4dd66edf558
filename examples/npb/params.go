package npb

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Sentinel errors.
var (
	// ErrUnknownKernel: the kernel name is not one of ep, cg, mg, ft, is.
	ErrUnknownKernel = errors.New("unknown NPB kernel")
	// ErrUnknownClass: the problem class is not one of S, W, A, B, C, D.
	ErrUnknownClass = errors.New("unknown NPB class")
	// ErrBadNP: the number of tasks does not suit the kernel's
	// decomposition.
	ErrBadNP = errors.New("unsupported number of tasks")
)

// Kernels lists the kernel names in the order NPB lists them.
var Kernels = []string{"ep", "cg", "mg", "ft", "is"}

// Classes lists the supported problem classes. Every one carries the
// official NPB 3.4 reference values (see Verify).
var Classes = []string{"S", "W", "A", "B", "C", "D"}

// NormKernel returns the canonical (lower-case) kernel name.
func NormKernel(k string) (string, error) {
	k = strings.ToLower(k)
	for _, n := range Kernels {
		if n == k {
			return k, nil
		}
	}
	return "", fmt.Errorf("%q (want one of %s): %w", k, strings.Join(Kernels, ", "), ErrUnknownKernel)
}

// NormClass returns the canonical (upper-case) class name.
func NormClass(c string) (string, error) {
	c = strings.ToUpper(c)
	for _, n := range Classes {
		if n == c {
			return c, nil
		}
	}
	return "", fmt.Errorf("%q (want one of %s): %w", c, strings.Join(Classes, ", "), ErrUnknownClass)
}

func isPow2(n int) bool { return n > 0 && n&(n-1) == 0 }

func ilog2(n int) int {
	l := 0
	for 1<<l < n {
		l++
	}
	return l
}

// EPParams are the parameters of EP for one class.
type EPParams struct {
	Class  string
	M      int     // 2^M pairs of random numbers
	SX, SY float64 // reference sums
}

// EP constants shared by every class.
const (
	epMK = 16
	epNK = 1 << epMK // pairs per batch
	epNQ = 10
)

// EPParamsFor returns EP's parameters for class.
func EPParamsFor(class string) (EPParams, error) {
	switch class {
	case "S":
		return EPParams{class, 24, -3.247834652034740e+3, -6.958407078382297e+3}, nil
	case "W":
		return EPParams{class, 25, -2.863319731645753e+3, -6.320053679109499e+3}, nil
	case "A":
		return EPParams{class, 28, -4.295875165629892e+3, -1.580732573678431e+4}, nil
	case "B":
		return EPParams{class, 30, 4.033815542441498e+4, -2.660669192809235e+4}, nil
	case "C":
		return EPParams{class, 32, 4.764367927995374e+4, -8.084072988043731e+4}, nil
	case "D":
		return EPParams{class, 36, 1.982481200946593e+5, -1.020596636361769e+5}, nil
	}
	return EPParams{}, fmt.Errorf("EP class %q: %w", class, ErrUnknownClass)
}

// Batches is the number of batches of epNK pairs.
func (p EPParams) Batches() int { return 1 << (p.M - epMK) }

// Mop is the operation count, in millions.
func (p EPParams) Mop() float64 { return float64(uint64(1)<<(p.M+1)) / 1e6 }

// CGParams are the parameters of CG for one class.
type CGParams struct {
	Class  string
	NA     int
	Nonzer int
	Niter  int
	Shift  float64
	Zeta   float64 // reference
}

const (
	cgRcond = 0.1
	cgItMax = 25
	cgAmult = RandA
)

// CGParamsFor returns CG's parameters for class.
func CGParamsFor(class string) (CGParams, error) {
	switch class {
	case "S":
		return CGParams{class, 1400, 7, 15, 10, 8.5971775078648}, nil
	case "W":
		return CGParams{class, 7000, 8, 15, 12, 10.362595087124}, nil
	case "A":
		return CGParams{class, 14000, 11, 15, 20, 17.130235054029}, nil
	case "B":
		return CGParams{class, 75000, 13, 75, 60, 22.712745482631}, nil
	case "C":
		return CGParams{class, 150000, 15, 75, 110, 28.973605592845}, nil
	case "D":
		return CGParams{class, 1500000, 21, 100, 500, 52.514532105794}, nil
	}
	return CGParams{}, fmt.Errorf("CG class %q: %w", class, ErrUnknownClass)
}

// Mop is the operation count, in millions.
func (p CGParams) Mop() float64 {
	nz := float64(p.Nonzer * (p.Nonzer + 1))
	return 1e-6 * 2 * float64(p.Niter) * float64(p.NA) * (3 + nz + 25*(5+nz) + 3)
}

// MGParams are the parameters of MG for one class.
type MGParams struct {
	Class string
	N     int // nx = ny = nz
	Nit   int
	Rnm2  float64 // reference
}

// MGParamsFor returns MG's parameters for class.
func MGParamsFor(class string) (MGParams, error) {
	switch class {
	case "S":
		return MGParams{class, 32, 4, 0.5307707005734e-04}, nil
	case "W":
		return MGParams{class, 128, 4, 0.6467329375339e-05}, nil
	case "A":
		return MGParams{class, 256, 4, 0.2433365309069e-05}, nil
	case "B":
		return MGParams{class, 256, 20, 0.1800564401355e-05}, nil
	case "C":
		return MGParams{class, 512, 20, 0.5706732285740e-06}, nil
	case "D":
		return MGParams{class, 1024, 50, 0.1583275060440e-09}, nil
	}
	return MGParams{}, fmt.Errorf("MG class %q: %w", class, ErrUnknownClass)
}

// Levels is the number of grid levels, log2(N).
func (p MGParams) Levels() int { return ilog2(p.N) }

// Smoother returns the smoother's coefficients c[0..3]: NPB's S(a) for
// classes S, W and A, S(b) for the others.
func (p MGParams) Smoother() [4]float64 {
	switch p.Class {
	case "S", "W", "A":
		return [4]float64{-3.0 / 8.0, 1.0 / 32.0, -1.0 / 64.0, 0}
	}
	return [4]float64{-3.0 / 17.0, 1.0 / 33.0, -1.0 / 61.0, 0}
}

// Mop is the operation count, in millions.
func (p MGParams) Mop() float64 {
	return 58 * float64(p.Nit) * float64(p.N) * float64(p.N) * float64(p.N) * 1e-6
}

// FTParams are the parameters of FT for one class.
type FTParams struct {
	Class      string
	NX, NY, NZ int
	Niter      int
	Sums       []complex128 // reference checksums, one per iteration
}

const ftAlpha = 1e-6

// FTParamsFor returns FT's parameters for class.
func FTParamsFor(class string) (FTParams, error) {
	switch class {
	case "S":
		return FTParams{class, 64, 64, 64, 6, []complex128{
			complex(5.546087004964e+02, 4.845363331978e+02),
			complex(5.546385409189e+02, 4.865304269511e+02),
			complex(5.546148406171e+02, 4.883910722336e+02),
			complex(5.545423607415e+02, 4.901273169046e+02),
			complex(5.544255039624e+02, 4.917475857993e+02),
			complex(5.542683411902e+02, 4.932597244941e+02),
		}}, nil
	case "W":
		return FTParams{class, 128, 128, 32, 6, []complex128{
			complex(5.673612178944e+02, 5.293246849175e+02),
			complex(5.631436885271e+02, 5.282149986629e+02),
			complex(5.594024089970e+02, 5.270996558037e+02),
			complex(5.560698047020e+02, 5.260027904925e+02),
			complex(5.530898991250e+02, 5.249400845633e+02),
			complex(5.504159734538e+02, 5.239212247086e+02),
		}}, nil
	case "A":
		return FTParams{class, 256, 256, 128, 6, []complex128{
			complex(5.046735008193e+02, 5.114047905510e+02),
			complex(5.059412319734e+02, 5.098809666433e+02),
			complex(5.069376896287e+02, 5.098144042213e+02),
			complex(5.077892868474e+02, 5.101336130759e+02),
			complex(5.085233095391e+02, 5.104914655194e+02),
			complex(5.091487099959e+02, 5.107917842803e+02),
		}}, nil
	case "B":
		return FTParams{class, 512, 256, 256, 20, []complex128{
			complex(5.177643571579e+02, 5.077803458597e+02),
			complex(5.154521291263e+02, 5.088249431599e+02),
			complex(5.146409228649e+02, 5.096208912659e+02),
			complex(5.142378756213e+02, 5.101023387619e+02),
			complex(5.139626667737e+02, 5.103976610617e+02),
			complex(5.137423460082e+02, 5.105948019802e+02),
			complex(5.135547056878e+02, 5.107404165783e+02),
			complex(5.133910925466e+02, 5.108576573661e+02),
			complex(5.132470705390e+02, 5.109577278523e+02),
			complex(5.131197729984e+02, 5.110460304483e+02),
			complex(5.130070319283e+02, 5.111252433800e+02),
			complex(5.129070537032e+02, 5.111968077718e+02),
			complex(5.128182883502e+02, 5.112616233064e+02),
			complex(5.127393733383e+02, 5.113203605551e+02),
			complex(5.126691062020e+02, 5.113735928093e+02),
			complex(5.126064276004e+02, 5.114218460548e+02),
			complex(5.125504076570e+02, 5.114656139760e+02),
			complex(5.125002331720e+02, 5.115053595966e+02),
			complex(5.124551951846e+02, 5.115415130407e+02),
			complex(5.124146770029e+02, 5.115744692211e+02),
		}}, nil
	case "C":
		return FTParams{class, 512, 512, 512, 20, []complex128{
			complex(5.195078707457e+02, 5.149019699238e+02),
			complex(5.155422171134e+02, 5.127578201997e+02),
			complex(5.144678022222e+02, 5.122251847514e+02),
			complex(5.140150594328e+02, 5.121090289018e+02),
			complex(5.137550426810e+02, 5.121143685824e+02),
			complex(5.135811056728e+02, 5.121496764568e+02),
			complex(5.134569343165e+02, 5.121870921893e+02),
			complex(5.133651975661e+02, 5.122193250322e+02),
			complex(5.132955192805e+02, 5.122454735794e+02),
			complex(5.132410471738e+02, 5.122663649603e+02),
			complex(5.131971141679e+02, 5.122830879827e+02),
			complex(5.131605205716e+02, 5.122965869718e+02),
			complex(5.131290734194e+02, 5.123075927445e+02),
			complex(5.131012720314e+02, 5.123166486553e+02),
			complex(5.130760908195e+02, 5.123241541685e+02),
			complex(5.130528295923e+02, 5.123304037599e+02),
			complex(5.130310107773e+02, 5.123356167976e+02),
			complex(5.130103090133e+02, 5.123399592211e+02),
			complex(5.129905029333e+02, 5.123435588985e+02),
			complex(5.129714421109e+02, 5.123465164008e+02),
		}}, nil
	case "D":
		return FTParams{class, 2048, 1024, 1024, 25, []complex128{
			complex(5.122230065252e+02, 5.118534037109e+02),
			complex(5.120463975765e+02, 5.117061181082e+02),
			complex(5.119865766760e+02, 5.117096364601e+02),
			complex(5.119518799488e+02, 5.117373863950e+02),
			complex(5.119269088223e+02, 5.117680347632e+02),
			complex(5.119082416858e+02, 5.117967875532e+02),
			complex(5.118943814638e+02, 5.118225281841e+02),
			complex(5.118842385057e+02, 5.118451629348e+02),
			complex(5.118769435632e+02, 5.118649119387e+02),
			complex(5.118718203448e+02, 5.118820803844e+02),
			complex(5.118683569061e+02, 5.118969781011e+02),
			complex(5.118661708593e+02, 5.119098918835e+02),
			complex(5.118649768950e+02, 5.119210777066e+02),
			complex(5.118645605626e+02, 5.119307604484e+02),
			complex(5.118647586618e+02, 5.119391362671e+02),
			complex(5.118654451572e+02, 5.119463757241e+02),
			complex(5.118665212451e+02, 5.119526269238e+02),
			complex(5.118679083821e+02, 5.119580184108e+02),
			complex(5.118695433664e+02, 5.119626617538e+02),
			complex(5.118713748264e+02, 5.119666538138e+02),
			complex(5.118733606701e+02, 5.119700787219e+02),
			complex(5.118754661974e+02, 5.119730095953e+02),
			complex(5.118776626738e+02, 5.119755100241e+02),
			complex(5.118799262314e+02, 5.119776353561e+02),
			complex(5.118822370068e+02, 5.119794338060e+02),
		}}, nil
	}
	return FTParams{}, fmt.Errorf("FT class %q: %w", class, ErrUnknownClass)
}

// Mop is the operation count, in millions.
func (p FTParams) Mop() float64 {
	n := float64(p.NX) * float64(p.NY) * float64(p.NZ)
	ln := math.Log(n)
	return 1e-6 * n * (14.8157 + 7.19641*ln + (5.23518+7.21113*ln)*float64(p.Niter))
}

// ISParams are the parameters of IS for one class.
type ISParams struct {
	Class      string
	LogKeys    int // log2 of the number of keys
	LogMaxKey  int
	LogBuckets int
	// TestIndex and TestRank are the partial verification's key indices
	// and reference ranks (before expectedRank's shift per iteration).
	TestIndex [5]int
	TestRank  [5]int
}

const isIterations = 10

// ISParamsFor returns IS's parameters for class.
func ISParamsFor(class string) (ISParams, error) {
	switch class {
	case "S":
		return ISParams{class, 16, 11, 9,
			[5]int{48427, 17148, 23627, 62548, 4431},
			[5]int{0, 18, 346, 64917, 65463}}, nil
	case "W":
		return ISParams{class, 20, 16, 10,
			[5]int{357773, 934767, 875723, 898999, 404505},
			[5]int{1249, 11698, 1039987, 1043896, 1048018}}, nil
	case "A":
		return ISParams{class, 23, 19, 10,
			[5]int{2112377, 662041, 5336171, 3642833, 4250760},
			[5]int{104, 17523, 123928, 8288932, 8388264}}, nil
	case "B":
		return ISParams{class, 25, 21, 10,
			[5]int{41869, 812306, 5102857, 18232239, 26860214},
			[5]int{33422937, 10244, 59149, 33135281, 99}}, nil
	case "C":
		return ISParams{class, 27, 23, 10,
			[5]int{44172927, 72999161, 74326391, 129606274, 21736814},
			[5]int{61147, 882988, 266290, 133997595, 133525895}}, nil
	case "D":
		// 2^31 keys: a task's cumulative counts (int32) reach 2^31 at
		// the largest key of the last task's range and wrap, but every
		// use of them (a rank, a position in the sorted block) is below
		// 2^31, and int32 arithmetic is modular, so they come out right.
		return ISParams{class, 31, 27, 10,
			[5]int{1317351170, 995930646, 1157283250, 1503301535, 1453734525},
			[5]int{1, 36538729, 1978098519, 2145192618, 2147425337}}, nil
	}
	return ISParams{}, fmt.Errorf("IS class %q: %w", class, ErrUnknownClass)
}

// Keys is the total number of keys.
func (p ISParams) Keys() int { return 1 << p.LogKeys }

// MaxKey is the exclusive upper bound of the keys.
func (p ISParams) MaxKey() int { return 1 << p.LogMaxKey }

// Mop is the operation count, in millions.
func (p ISParams) Mop() float64 { return 1e-6 * float64(p.Keys()) * isIterations }

// expectedRank is the rank the partial verification expects for test key i
// at the given iteration: the reference rank shifted by the iteration, as
// NPB 3.4's is.c shifts it for each class.
func (p ISParams) expectedRank(i, it int) int {
	r := p.TestRank[i]
	switch p.Class {
	case "S":
		if i <= 2 {
			return r + it
		}
		return r - it
	case "W":
		if i < 2 {
			return r + it - 2
		}
		return r - it
	case "A":
		if i <= 2 {
			return r + it - 1
		}
		return r - it + 1
	case "B":
		if i == 1 || i == 2 || i == 4 {
			return r + it
		}
		return r - it
	case "C":
		if i <= 2 {
			return r + it
		}
		return r - it
	case "D":
		if i < 2 {
			return r + it
		}
		return r - it
	}
	return r
}
