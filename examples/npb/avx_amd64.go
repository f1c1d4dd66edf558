package npb

import "golang.org/x/sys/cpu"

// useAVX says whether the hot loops that have an assembly form (MG's
// stencil rows in mg_amd64.s, FT's butterflies in ft_amd64.s) run it, on
// packed doubles with AVX. Go's compiler does not vectorise; the Go loops
// stay as the fallback, and the assembly gives bit for bit what they
// give (the same IEEE operations in the same order, no fused
// multiply-add). The Go loops convert each product to float64 before
// adding it: Go may fuse x*y+z into one rounding (it does with GOAMD64=v3),
// and a conversion forbids that, so their results do not depend on the
// build either.
var useAVX = cpu.X86.HasAVX
