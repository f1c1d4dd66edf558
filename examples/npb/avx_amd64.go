package npb

import "golang.org/x/sys/cpu"

// useAVX says whether the hot loops that have an assembly form (MG's
// stencil rows in mg_amd64.s, FT's butterflies in ft_amd64.s) run it, on
// packed doubles with AVX. Go's compiler does not vectorise; the Go loops
// stay as the fallback, and the assembly gives bit for bit what they
// give (the same IEEE operations in the same order, no fused
// multiply-add).
var useAVX = cpu.X86.HasAVX
