package load

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

func ptr[T any](v T) *T { return &v }

// measured is a source with fixed, real (not emulated) figures.
type measured struct{ s Sample }

func (m measured) Sample(now time.Time) (Sample, error) {
	s := m.s
	s.Time = now
	return s, nil
}

type failing struct{}

func (failing) Sample(time.Time) (Sample, error) { return Sample{}, errors.New("broken") }

func TestInjectedReplaceAndExpiry(t *testing.T) {
	base := measured{Sample{External: 0.5, MemFreeMiB: 8192, Users: 0, Source: "proc"}}
	in := NewInjected(base)
	t0 := time.Unix(5000, 0)
	if err := in.Set(t0, Overlay{Users: ptr(2), Load: ptr(3.0), For: time.Minute}); err != nil {
		t.Fatal(err)
	}
	s, err := in.Sample(t0.Add(30 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	want := Sample{Time: t0.Add(30 * time.Second), External: 3, EmulatedLoad: 2.5, MemFreeMiB: 8192, Users: 2, Source: "proc+injected", Emulated: true}
	if !equalSample(s, want) {
		t.Errorf("active:\n got %+v\nwant %+v", s, want)
	}
	if o, until, ok := in.Active(t0.Add(59 * time.Second)); !ok || !until.Equal(t0.Add(time.Minute)) || *o.Users != 2 {
		t.Errorf("Active before expiry: %v %v %v", o, until, ok)
	}
	// At the expiry instant the overlay is gone for good.
	s, _ = in.Sample(t0.Add(time.Minute))
	if !equalSample(s, Sample{Time: t0.Add(time.Minute), External: 0.5, MemFreeMiB: 8192, Source: "proc"}) {
		t.Errorf("after expiry: %+v", s)
	}
	if _, _, ok := in.Active(t0); ok {
		t.Error("an expired overlay came back for an earlier time")
	}
	if in.Clear(t0) {
		t.Error("Clear reported an overlay after expiry")
	}
}

func TestInjectedAddAndClear(t *testing.T) {
	base := measured{Sample{External: 1, EmulatedLoad: 0, MemFreeMiB: 2048, Users: 1, Source: "proc"}}
	in := NewInjected(base)
	t0 := time.Unix(0, 0)
	if err := in.Set(t0, Overlay{Mode: Add, Users: ptr(1), Load: ptr(2.5), MemFreeMiB: ptr(-4096.0)}); err != nil {
		t.Fatal(err)
	}
	s, _ := in.Sample(t0.Add(time.Hour * 1000)) // no duration: never expires
	want := Sample{Time: t0.Add(time.Hour * 1000), External: 3.5, EmulatedLoad: 2.5, MemFreeMiB: 0, Users: 2, Source: "proc+injected", Emulated: true}
	if !equalSample(s, want) {
		t.Errorf("add:\n got %+v\nwant %+v", s, want)
	}
	// A later Set replaces the overlay; lowering the load below the real
	// one emulates nothing.
	if err := in.Set(t0, Overlay{Mode: Add, Load: ptr(-5.0), Users: ptr(-3)}); err != nil {
		t.Fatal(err)
	}
	s, _ = in.Sample(t0)
	if s.External != 0 || s.EmulatedLoad != 0 || s.Users != 0 || s.MemFreeMiB != 2048 {
		t.Errorf("negative add: %+v", s)
	}
	if !in.Clear(t0) {
		t.Error("Clear: no overlay reported")
	}
	s, _ = in.Sample(t0)
	if s.Source != "proc" || s.Emulated || s.External != 1 {
		t.Errorf("after Clear: %+v", s)
	}
	if _, err := NewInjected(failing{}).Sample(t0); err == nil {
		t.Error("base error lost")
	}
}

func TestInjectedOverEmulatedBase(t *testing.T) {
	// Over a static base the whole load is emulated.
	in := NewInjected(Static{External: 1, MemFreeMiB: 1024})
	if err := in.Set(time.Unix(0, 0), Overlay{Load: ptr(4.0)}); err != nil {
		t.Fatal(err)
	}
	s, err := in.Sample(time.Unix(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if s.External != 4 || s.EmulatedLoad != 4 || s.Source != "static+injected" || !s.Emulated {
		t.Errorf("got %+v", s)
	}
}

func TestInjectedKeepsItsCopy(t *testing.T) {
	in := NewInjected(measured{Sample{Source: "proc"}})
	users := 3
	o := Overlay{Users: &users}
	if err := in.Set(time.Unix(0, 0), o); err != nil {
		t.Fatal(err)
	}
	users = 9
	got, _, _ := in.Active(time.Unix(0, 0))
	*got.Users = 11
	if s, _ := in.Sample(time.Unix(0, 0)); s.Users != 3 {
		t.Errorf("users %d: the overlay shares memory with its callers", s.Users)
	}
}

func TestOverlayValidate(t *testing.T) {
	for name, o := range map[string]Overlay{
		"nothing":            {For: time.Second},
		"unknown mode":       {Mode: 7, Users: ptr(1)},
		"negative duration":  {Users: ptr(1), For: -time.Second},
		"negative users":     {Users: ptr(-1)},
		"negative load":      {Load: ptr(-0.5)},
		"NaN load":           {Load: ptr(math.NaN())},
		"infinite load":      {Mode: Add, Load: ptr(math.Inf(1))},
		"negative memory":    {MemFreeMiB: ptr(-1.0)},
		"too many users":     {Users: ptr(MaxUsers + 1)},
		"too much memory":    {Mode: Add, MemFreeMiB: ptr(2.0 * MaxMemMiB)},
		"add far below zero": {Mode: Add, Users: ptr(-MaxUsers - 1)},
	} {
		err := o.Validate()
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", name, err)
		}
		if err := NewInjected(Static{}).Set(time.Unix(0, 0), o); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Set accepted it (%v)", name, err)
		}
	}
	if s := (Overlay{Mode: Add, Users: ptr(2), Load: ptr(1.5), MemFreeMiB: ptr(-100.0), For: time.Minute}).String(); s != "add users=2 load=1.5 mem_free_mib=-100 for 1m0s" {
		t.Errorf("String = %q", s)
	}
	for _, m := range []Mode{Replace, Add} {
		if got, err := ParseMode(m.String()); err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m, got, err)
		}
	}
	if _, err := ParseMode("multiply"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseMode(multiply): %v", err)
	}
	if !strings.Contains(Mode(9).String(), "9") {
		t.Errorf("Mode(9) = %q", Mode(9).String())
	}
}

// TestInjectedConcurrent sets, clears and samples from several goroutines
// (run with -race): every sample is either the base's or one of the
// overlays applied to it, never a mixture.
func TestInjectedConcurrent(t *testing.T) {
	in := NewInjected(measured{Sample{External: 1, MemFreeMiB: 100, Source: "proc"}})
	now := time.Unix(0, 0)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				switch (g + i) % 3 {
				case 0:
					v := float64(g + 2)
					if err := in.Set(now, Overlay{Users: ptr(g + 2), Load: &v}); err != nil {
						t.Error(err)
						return
					}
				case 1:
					in.Clear(now)
				default:
					s, err := in.Sample(now)
					if err != nil {
						t.Error(err)
						return
					}
					if s.Emulated {
						if s.External != float64(s.Users) || s.Users < 2 || s.Users > 5 {
							t.Errorf("mixed sample %+v", s)
						}
					} else if s.External != 1 || s.Users != 0 {
						t.Errorf("base sample changed: %+v", s)
					}
				}
			}
		}()
	}
	wg.Wait()
}
