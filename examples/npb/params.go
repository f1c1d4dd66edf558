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
	// ErrUnknownClass: the problem class is not one of S, W, A, B, C.
	ErrUnknownClass = errors.New("unknown NPB class")
	// ErrBadNP: the number of tasks does not suit the kernel's
	// decomposition.
	ErrBadNP = errors.New("unsupported number of tasks")
)

// Kernels lists the kernel names in the order NPB lists them.
var Kernels = []string{"ep", "cg", "mg", "ft", "is"}

// Classes lists the supported problem classes.
var Classes = []string{"S", "W", "A", "B", "C"}

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
	SX, SY float64 // reference sums; 0 when the class has none
	HasRef bool
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
		return EPParams{class, 24, -3.247834652034740e+3, -6.958407078382297e+3, true}, nil
	case "W":
		return EPParams{class, 25, -2.863319731645753e+3, -6.320053679109499e+3, true}, nil
	case "A":
		return EPParams{class, 28, -4.295875165629892e+3, -1.580732573678431e+4, true}, nil
	case "B":
		return EPParams{Class: class, M: 30}, nil
	case "C":
		return EPParams{Class: class, M: 32}, nil
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
	Zeta   float64 // reference; 0 when the class has none
	HasRef bool
}

const (
	cgRcond  = 0.1
	cgItMax  = 25
	cgAmult  = RandA
	cgEpsRef = 1e-10
)

// CGParamsFor returns CG's parameters for class.
func CGParamsFor(class string) (CGParams, error) {
	switch class {
	case "S":
		return CGParams{class, 1400, 7, 15, 10, 8.5971775078648, true}, nil
	case "W":
		return CGParams{class, 7000, 8, 15, 12, 10.362595087124, true}, nil
	case "A":
		return CGParams{class, 14000, 11, 15, 20, 17.130235054029, true}, nil
	case "B":
		return CGParams{Class: class, NA: 75000, Nonzer: 13, Niter: 75, Shift: 60}, nil
	case "C":
		return CGParams{Class: class, NA: 150000, Nonzer: 15, Niter: 75, Shift: 110}, nil
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
	Class  string
	N      int // nx = ny = nz
	Nit    int
	Rnm2   float64 // reference; 0 when the class has none
	HasRef bool
}

// MGParamsFor returns MG's parameters for class.
func MGParamsFor(class string) (MGParams, error) {
	switch class {
	case "S":
		return MGParams{class, 32, 4, 0.5307707005734e-04, true}, nil
	case "W":
		return MGParams{class, 128, 4, 0.6467329375339e-05, true}, nil
	case "A":
		return MGParams{class, 256, 4, 0.2433365309069e-05, true}, nil
	case "B":
		return MGParams{Class: class, N: 256, Nit: 20}, nil
	case "C":
		return MGParams{Class: class, N: 512, Nit: 20}, nil
	}
	return MGParams{}, fmt.Errorf("MG class %q: %w", class, ErrUnknownClass)
}

// Levels is the number of grid levels, log2(N).
func (p MGParams) Levels() int { return ilog2(p.N) }

// Smoother returns the smoother's coefficients c[0..3].
func (p MGParams) Smoother() [4]float64 {
	if p.Class == "B" || p.Class == "C" {
		return [4]float64{-3.0 / 17.0, 1.0 / 33.0, -1.0 / 61.0, 0}
	}
	return [4]float64{-3.0 / 8.0, 1.0 / 32.0, -1.0 / 64.0, 0}
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
	Sums       []complex128 // reference checksums; nil when the class has none
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
		return FTParams{Class: class, NX: 512, NY: 256, NZ: 256, Niter: 20}, nil
	case "C":
		return FTParams{Class: class, NX: 512, NY: 512, NZ: 512, Niter: 20}, nil
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
	// and expected ranks; they are set only when HasRef.
	TestIndex [5]int
	TestRank  [5]int
	HasRef    bool
}

const isIterations = 10

// ISParamsFor returns IS's parameters for class.
func ISParamsFor(class string) (ISParams, error) {
	switch class {
	case "S":
		return ISParams{class, 16, 11, 9,
			[5]int{48427, 17148, 23627, 62548, 4431},
			[5]int{0, 18, 346, 64917, 65463}, true}, nil
	case "W":
		return ISParams{class, 20, 16, 10,
			[5]int{357773, 934767, 875723, 898999, 404505},
			[5]int{1249, 11698, 1039987, 1043896, 1048018}, true}, nil
	case "A":
		return ISParams{class, 23, 19, 10,
			[5]int{2112377, 662041, 5336171, 3642833, 4250760},
			[5]int{104, 17523, 123928, 8288932, 8388264}, true}, nil
	case "B":
		return ISParams{Class: class, LogKeys: 25, LogMaxKey: 21, LogBuckets: 10}, nil
	case "C":
		return ISParams{Class: class, LogKeys: 27, LogMaxKey: 23, LogBuckets: 10}, nil
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
// at the given iteration.
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
	}
	return r
}
