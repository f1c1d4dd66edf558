//go:build !linux

package ckpt

const hugeMin = 4 << 20

// adviseHuge does nothing where huge pages cannot be asked for.
func adviseHuge(b []byte) {}
