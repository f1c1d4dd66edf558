package npb

import (
	"fmt"
	"math"
	"math/cmplx"
)

// The official suite's tolerances: the largest relative error of a
// verification value from its reference that still verifies (NPB 3.4's
// ep.f90, cg.f90, mg.f90 and ft.f90; IS's checks are exact).
const (
	epEpsilon = 1e-8
	cgEpsilon = 1e-10
	mgEpsilon = 1e-8
	ftEpsilon = 1e-12
)

// isChecks is the number of partial checks a verified IS run passes: five
// test keys at each of the timed iterations.
const isChecks = 5 * isIterations

// Verify checks r's verification values against the official NPB 3.4
// reference values of its kernel and class, with the official suite's
// tolerances, and sets r.Verified and r.Reason: Successful; Unsuccessful,
// with the first value outside its tolerance; or NotPerformed, with what
// made the check impossible (no reference values for the run's class or
// iteration count, or a value missing from the report). A NaN never
// verifies.
func Verify(r *Report) {
	r.Verified, r.Reason = check(r)
}

func check(r *Report) (verdict, reason string) {
	v := r.Values
	switch r.Kernel {
	case "ep":
		p, err := EPParamsFor(r.Class)
		if err != nil {
			return noReference(r)
		}
		if v.SX == nil || v.SY == nil {
			return NotPerformed, "the report has no sx and sy"
		}
		if why := relCheck("sx", *v.SX, p.SX, epEpsilon); why != "" {
			return Unsuccessful, why
		}
		if why := relCheck("sy", *v.SY, p.SY, epEpsilon); why != "" {
			return Unsuccessful, why
		}
	case "cg":
		p, err := CGParamsFor(r.Class)
		if err != nil {
			return noReference(r)
		}
		if r.Iterations != p.Niter {
			return wrongIterations(r, p.Niter)
		}
		if v.Zeta == nil {
			return NotPerformed, "the report has no zeta"
		}
		if why := relCheck("zeta", *v.Zeta, p.Zeta, cgEpsilon); why != "" {
			return Unsuccessful, why
		}
	case "mg":
		p, err := MGParamsFor(r.Class)
		if err != nil {
			return noReference(r)
		}
		if r.Iterations != p.Nit {
			return wrongIterations(r, p.Nit)
		}
		if v.Rnm2 == nil {
			return NotPerformed, "the report has no L2 norm"
		}
		if why := relCheck("L2 norm", *v.Rnm2, p.Rnm2, mgEpsilon); why != "" {
			return Unsuccessful, why
		}
	case "ft":
		p, err := FTParamsFor(r.Class)
		if err != nil {
			return noReference(r)
		}
		if r.Iterations != p.Niter {
			return wrongIterations(r, p.Niter)
		}
		if len(v.Checksums) != len(p.Sums) {
			return NotPerformed, fmt.Sprintf("the report has %d checksums, class %s's reference %d", len(v.Checksums), r.Class, len(p.Sums))
		}
		for i, c := range v.Checksums {
			got, ref := complex(c[0], c[1]), p.Sums[i]
			if e := cmplx.Abs((got - ref) / ref); !(e <= ftEpsilon) {
				return Unsuccessful, fmt.Sprintf("checksum %d = (%.12e, %.12e), reference (%.12e, %.12e): relative error %.1e above %.0e",
					i+1, real(got), imag(got), real(ref), imag(ref), e, ftEpsilon)
			}
		}
	case "is":
		if _, err := ISParamsFor(r.Class); err != nil {
			return noReference(r)
		}
		if r.Iterations != isIterations {
			return wrongIterations(r, isIterations)
		}
		if v.PartialVerified == nil || v.FullVerified == nil {
			return NotPerformed, "the report has no partial and full verification"
		}
		if *v.PartialVerified != isChecks {
			return Unsuccessful, fmt.Sprintf("%d of the %d partial checks (test key ranks against the reference) passed", *v.PartialVerified, isChecks)
		}
		if !*v.FullVerified {
			return Unsuccessful, "the full verification found keys out of order"
		}
	default:
		return NotPerformed, fmt.Sprintf("unknown kernel %q", r.Kernel)
	}
	return Successful, ""
}

// relCheck returns why got is not within a relative error eps of the
// reference ref ("" when it is; a NaN is not).
func relCheck(name string, got, ref, eps float64) string {
	if e := math.Abs((got - ref) / ref); !(e <= eps) {
		return fmt.Sprintf("%s = %.15e, reference %.15e: relative error %.1e above %.0e", name, got, ref, e, eps)
	}
	return ""
}

func noReference(r *Report) (string, string) {
	return NotPerformed, fmt.Sprintf("no reference values for class %q", r.Class)
}

func wrongIterations(r *Report, want int) (string, string) {
	return NotPerformed, fmt.Sprintf("class %s's reference values are for %d iterations, the run did %d", r.Class, want, r.Iterations)
}
