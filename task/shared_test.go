package task

import (
	"errors"
	"testing"
)

// mapSharer is an endpoint that shares values by key, as a daemon does
// within a job.
type mapSharer struct {
	sendRecorder
	m map[string]any
}

func (s *mapSharer) HostShare(key string, build func() (any, error)) (any, error) {
	if v, ok := s.m[key]; ok {
		return v, nil
	}
	v, err := build()
	if err == nil {
		s.m[key] = v
	}
	return v, err
}

// TestShared: through an endpoint that shares, the second call for a key
// gets the first's value without building; without one every call builds
// a private value. A value of another type under the key is an error
// (ErrDecode), and a build's error reaches the caller.
func TestShared(t *testing.T) {
	builds := 0
	build := func() (*[]int, error) {
		builds++
		return &[]int{builds}, nil
	}
	sh := NewCtx(&mapSharer{m: map[string]any{}}, nil)
	a, err := Shared(sh, "k", build)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Shared(sh, "k", build)
	if err != nil || a != b || builds != 1 {
		t.Fatalf("sharing endpoint: %p and %p (%v), %d builds; want one value built once", a, b, err, builds)
	}
	if _, err := Shared(sh, "k", func() (int, error) { return 0, nil }); !errors.Is(err, ErrDecode) {
		t.Errorf("another type under the key: %v, want ErrDecode", err)
	}
	errBuild := errors.New("no table")
	if _, err := Shared(sh, "bad", func() (int, error) { return 0, errBuild }); !errors.Is(err, errBuild) {
		t.Errorf("failed build: %v, want its error", err)
	}

	plain := NewCtx(&sendRecorder{}, nil)
	c, err := Shared(plain, "k", build)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Shared(plain, "k", build)
	if err != nil || c == d || builds != 3 {
		t.Fatalf("endpoint without sharing: %p and %p (%v), %d builds; want a private value per call", c, d, err, builds)
	}
}
