package ckpt

import "syscall"

// hugeMin is the size from which a freshly allocated numeric block is
// advised to use huge pages.
const hugeMin = 4 << 20

// adviseHuge asks the kernel to back b with huge pages before it is first
// touched: a fresh page costs a fault, and on virtual machines faults are
// slow enough (0.3–2 GB/s) to dominate reading a large checkpoint.
func adviseHuge(b []byte) {
	const page = 4096
	if len(b) < hugeMin {
		return
	}
	// Advise the whole pages inside b.
	off := 0
	if r := uintptrOf(b) % page; r != 0 {
		off = int(page - r)
	}
	n := (len(b) - off) / page * page
	if n > 0 {
		_ = syscall.Madvise(b[off:off+n], syscall.MADV_HUGEPAGE)
	}
}
