package npb

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// referenceReport returns a report of kernel for class whose verification
// values are the class's reference values, as a run that matches them
// exactly would report.
func referenceReport(t *testing.T, kernel, class string) *Report {
	t.Helper()
	r := &Report{Kernel: kernel, Class: class, NP: 1}
	switch kernel {
	case "ep":
		p, err := EPParamsFor(class)
		if err != nil {
			t.Fatal(err)
		}
		r.Iterations = p.Batches()
		r.Values.SX, r.Values.SY = ptr(p.SX), ptr(p.SY)
	case "cg":
		p, err := CGParamsFor(class)
		if err != nil {
			t.Fatal(err)
		}
		r.Iterations, r.Values.Zeta = p.Niter, ptr(p.Zeta)
	case "mg":
		p, err := MGParamsFor(class)
		if err != nil {
			t.Fatal(err)
		}
		r.Iterations, r.Values.Rnm2 = p.Nit, ptr(p.Rnm2)
	case "ft":
		p, err := FTParamsFor(class)
		if err != nil {
			t.Fatal(err)
		}
		r.Iterations = p.Niter
		for _, s := range p.Sums {
			r.Values.Checksums = append(r.Values.Checksums, [2]float64{real(s), imag(s)})
		}
	case "is":
		r.Iterations = isIterations
		r.Values.PartialVerified, r.Values.FullVerified = ptr(isChecks), ptr(true)
	default:
		t.Fatalf("kernel %q", kernel)
	}
	return r
}

func ptr[T any](v T) *T { return &v }

// perturbations returns, for each verification value of r's kernel, a
// function that scales that value by f (IS has none: its checks are
// counts).
func perturbations(r *Report) map[string]func(r *Report, f float64) {
	scale := func(p **float64, f float64) { *p = ptr(**p * f) }
	switch r.Kernel {
	case "ep":
		return map[string]func(*Report, float64){
			"sx": func(r *Report, f float64) { scale(&r.Values.SX, f) },
			"sy": func(r *Report, f float64) { scale(&r.Values.SY, f) },
		}
	case "cg":
		return map[string]func(*Report, float64){"zeta": func(r *Report, f float64) { scale(&r.Values.Zeta, f) }}
	case "mg":
		return map[string]func(*Report, float64){"rnm2": func(r *Report, f float64) { scale(&r.Values.Rnm2, f) }}
	case "ft":
		m := map[string]func(*Report, float64){}
		n := len(r.Values.Checksums)
		for _, i := range []int{0, n / 2, n - 1} {
			for part := range 2 {
				m[fmt.Sprintf("checksum %d %s", i+1, []string{"re", "im"}[part])] = func(r *Report, f float64) {
					cs := append([][2]float64(nil), r.Values.Checksums...)
					cs[i][part] *= f
					r.Values.Checksums = cs
				}
			}
		}
		return m
	}
	return nil
}

// tolerance is the official relative tolerance of kernel's values.
func tolerance(kernel string) float64 {
	return map[string]float64{"ep": epEpsilon, "cg": cgEpsilon, "mg": mgEpsilon, "ft": ftEpsilon}[kernel]
}

// TestEveryClassHasReference checks that every kernel has official
// reference values for every class, and that they are sane: finite and
// non-zero, one FT checksum per iteration, IS test keys and ranks inside
// the key array.
func TestEveryClassHasReference(t *testing.T) {
	if want := []string{"S", "W", "A", "B", "C", "D"}; strings.Join(Classes, "") != strings.Join(want, "") {
		t.Fatalf("Classes = %v, want %v", Classes, want)
	}
	finite := func(x float64) bool { return x != 0 && !math.IsNaN(x) && !math.IsInf(x, 0) }
	for _, class := range Classes {
		ep, err := EPParamsFor(class)
		if err != nil || !finite(ep.SX) || !finite(ep.SY) {
			t.Errorf("EP class %s: %+v, %v", class, ep, err)
		}
		cg, err := CGParamsFor(class)
		if err != nil || !finite(cg.Zeta) {
			t.Errorf("CG class %s: %+v, %v", class, cg, err)
		}
		mg, err := MGParamsFor(class)
		if err != nil || !finite(mg.Rnm2) {
			t.Errorf("MG class %s: %+v, %v", class, mg, err)
		}
		ft, err := FTParamsFor(class)
		if err != nil || len(ft.Sums) != ft.Niter {
			t.Errorf("FT class %s: %d checksums for %d iterations, %v", class, len(ft.Sums), ft.Niter, err)
		}
		for i, s := range ft.Sums {
			if !finite(real(s)) || !finite(imag(s)) {
				t.Errorf("FT class %s: checksum %d is %v", class, i+1, s)
			}
		}
		is, err := ISParamsFor(class)
		if err != nil {
			t.Fatalf("IS class %s: %v", class, err)
		}
		for i := range 5 {
			if is.TestIndex[i] <= 0 || is.TestIndex[i] >= is.Keys() {
				t.Errorf("IS class %s: test index %d = %d outside the %d keys", class, i, is.TestIndex[i], is.Keys())
			}
			for it := 1; it <= isIterations; it++ {
				if r := is.expectedRank(i, it); r < 0 || r >= is.Keys() {
					t.Errorf("IS class %s: expected rank of test key %d at iteration %d is %d, outside the %d keys", class, i, it, r, is.Keys())
				}
			}
		}
	}
	for _, class := range []string{"E", ""} {
		if _, err := EPParamsFor(class); err == nil {
			t.Errorf("EP class %q accepted", class)
		}
	}
}

// TestVerifyAcceptsReferenceRejectsPerturbed checks Verify on every kernel
// and class: the reference values verify, and so do values within the
// official tolerance; a value perturbed past it, or NaN, does not; a
// report without its values, with another iteration count or of a class
// without reference values cannot be verified, and says why.
func TestVerifyAcceptsReferenceRejectsPerturbed(t *testing.T) {
	for _, kernel := range Kernels {
		for _, class := range Classes {
			ref := referenceReport(t, kernel, class)
			r := *ref
			Verify(&r)
			if r.Verified != Successful || r.Reason != "" {
				t.Errorf("%s class %s: the reference values give %s (%s)", kernel, class, r.Verified, r.Reason)
			}
			eps := tolerance(kernel)
			for name, perturb := range perturbations(ref) {
				for _, c := range []struct {
					f    float64
					want string
				}{
					{1 + eps/2, Successful},
					{1 - eps/2, Successful},
					{1 + 3*eps, Unsuccessful},
					{1 - 3*eps, Unsuccessful},
					{math.NaN(), Unsuccessful},
				} {
					r := *ref
					perturb(&r, c.f)
					Verify(&r)
					if r.Verified != c.want {
						t.Errorf("%s class %s: %s scaled by %v: %s (%s), want %s", kernel, class, name, c.f, r.Verified, r.Reason, c.want)
					}
					if c.want == Unsuccessful && !strings.Contains(r.Reason, "reference") {
						t.Errorf("%s class %s: %s scaled by %v: reason %q does not name the reference", kernel, class, name, c.f, r.Reason)
					}
				}
			}
			// Values missing.
			r = *ref
			r.Values = Values{}
			Verify(&r)
			if r.Verified != NotPerformed || !strings.Contains(r.Reason, "the report has no") && !strings.Contains(r.Reason, "checksums") {
				t.Errorf("%s class %s without values: %s (%s)", kernel, class, r.Verified, r.Reason)
			}
			// Another iteration count (EP's "iterations" are its batches,
			// which no option changes).
			if kernel != "ep" {
				r = *ref
				r.Iterations++
				Verify(&r)
				if r.Verified != NotPerformed || !strings.Contains(r.Reason, "reference values are for") {
					t.Errorf("%s class %s with %d iterations: %s (%s)", kernel, class, r.Iterations, r.Verified, r.Reason)
				}
			}
		}
		r := *referenceReport(t, kernel, "S")
		r.Class = "E"
		Verify(&r)
		if r.Verified != NotPerformed || !strings.Contains(r.Reason, `no reference values for class "E"`) {
			t.Errorf("%s class E: %s (%s)", kernel, r.Verified, r.Reason)
		}
	}
}

// TestVerifyIS checks IS's verdicts: every partial check and the full
// verification must pass.
func TestVerifyIS(t *testing.T) {
	for _, class := range Classes {
		for _, c := range []struct {
			partial int
			full    bool
			want    string
			reason  string
		}{
			{isChecks, true, Successful, ""},
			{isChecks - 1, true, Unsuccessful, "49 of the 50 partial checks"},
			{0, true, Unsuccessful, "0 of the 50 partial checks"},
			{isChecks, false, Unsuccessful, "out of order"},
		} {
			r := referenceReport(t, "is", class)
			r.Values.PartialVerified, r.Values.FullVerified = ptr(c.partial), ptr(c.full)
			Verify(r)
			if r.Verified != c.want || !strings.Contains(r.Reason, c.reason) {
				t.Errorf("IS class %s, %d partial, full %t: %s (%s), want %s (%s)", class, c.partial, c.full, r.Verified, r.Reason, c.want, c.reason)
			}
		}
	}
}

// TestISExpectedRank checks the partial verification's expected ranks
// against values worked out by hand from NPB 3.4's is.c (each class
// shifts the reference ranks by the iteration in its own way).
func TestISExpectedRank(t *testing.T) {
	cases := []struct {
		class string
		i, it int
		want  int
	}{
		{"S", 0, 1, 1}, {"S", 2, 10, 356}, {"S", 3, 1, 64916}, {"S", 4, 10, 65453},
		{"W", 0, 1, 1248}, {"W", 1, 10, 11706}, {"W", 2, 1, 1039986}, {"W", 4, 10, 1048008},
		{"A", 0, 1, 104}, {"A", 2, 10, 123937}, {"A", 3, 1, 8288932}, {"A", 4, 10, 8388255},
		{"B", 0, 1, 33422936}, {"B", 1, 10, 10254}, {"B", 2, 1, 59150}, {"B", 3, 10, 33135271}, {"B", 4, 10, 109},
		{"C", 0, 1, 61148}, {"C", 2, 10, 266300}, {"C", 3, 1, 133997594}, {"C", 4, 10, 133525885},
		{"D", 0, 1, 2}, {"D", 1, 10, 36538739}, {"D", 2, 1, 1978098518}, {"D", 4, 10, 2147425327},
	}
	for _, c := range cases {
		p, err := ISParamsFor(c.class)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.expectedRank(c.i, c.it); got != c.want {
			t.Errorf("IS class %s: expected rank of test key %d at iteration %d = %d, want %d", c.class, c.i, c.it, got, c.want)
		}
	}
}

// TestIterationsOverride runs MG class S with two iterations instead of
// four: the run completes and cannot be verified, and says why.
func TestIterationsOverride(t *testing.T) {
	rep := runRanks(t, "mg", "S", 2, func(w worker, cm comm) (*Report, error) {
		w.place().Iters = 2
		return w.run(cm, &hooks{now: time.Now})
	})
	if rep == nil || rep.Iterations != 2 || rep.Verified != NotPerformed || !strings.Contains(rep.Reason, "reference values are for 4 iterations, the run did 2") {
		t.Fatalf("report %+v", rep)
	}
	for _, c := range []struct {
		kernel string
		n      int
	}{{"ep", 2}, {"is", 2}, {"cg", -1}, {"mg", maxIterations + 1}} {
		if err := checkIterations(c.kernel, c.n); err == nil {
			t.Errorf("%s: %d iterations accepted", c.kernel, c.n)
		}
	}
	if err := checkIterations("ft", 3); err != nil {
		t.Errorf("FT, 3 iterations: %v", err)
	}
}
