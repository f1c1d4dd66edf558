//go:build !amd64

package npb

// useAVX is false: the hot loops run in Go (their assembly is amd64's).
const useAVX = false
