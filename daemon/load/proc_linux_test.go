package load

import (
	"testing"
	"time"
)

// TestProcLive samples the machine the test runs on: the figures must be
// plausible, whatever the machine's load.
func TestProcLive(t *testing.T) {
	var p Proc
	now := time.Now()
	s, err := p.Sample(now)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.MemFreeMiB <= 0 || s.CPUs < 1 || s.Source != "proc" || s.Emulated {
		t.Errorf("implausible sample %+v", s)
	}
	if _, err := p.Sample(now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkProcSample measures the cost of one sample of this machine.
func BenchmarkProcSample(b *testing.B) {
	var p Proc
	now := time.Unix(0, 0)
	for b.Loop() {
		now = now.Add(time.Second)
		if _, err := p.Sample(now); err != nil {
			b.Fatal(err)
		}
	}
}
