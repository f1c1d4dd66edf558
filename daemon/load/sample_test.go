package load

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/dpvm/dpvm/sched"
)

func fullSample() Sample {
	return Sample{
		Time:         time.Date(2025, 11, 22, 10, 30, 0, 123, time.UTC),
		Tasks:        2,
		External:     1.5,
		EmulatedLoad: 1,
		LoadAvg1:     2.25,
		CPUs:         8,
		MemFreeMiB:   3000,
		Users:        1,
		TaskMem:      []TaskMem{{TID: "t1", MiB: MiB(3 << 20)}, {TID: "t2", MiB: 0.5}},
		Source:       "proc+injected",
		Emulated:     true,
	}
}

func TestSampleLoadAndSchedHost(t *testing.T) {
	s := fullSample()
	if s.Load() != 3.5 {
		t.Errorf("load %g, want 3.5", s.Load())
	}
	if s.TaskMem[0].MiB != 3 {
		t.Errorf("MiB(3 MiB) = %g", s.TaskMem[0].MiB)
	}
	h := s.SchedHost("h1", 2, 1, 4.5)
	want := sched.Host{Name: "h1", Alpha: 2, Load: 3.5, MemFree: 3000, Users: 1, MaxUsers: 1, Slowdown: 4.5}
	if h != want {
		t.Errorf("SchedHost = %+v, want %+v", h, want)
	}
	// The scheduler accepts it, with the daemon's two tasks listed on it.
	snap := &sched.Snapshot{
		Classes: sched.DefaultClasses(), Params: sched.DefaultParams(), Hosts: []sched.Host{h},
		Processes: []sched.Process{{TID: "t1", Host: "h1", Class: 1, Mem: s.TaskMem[0].MiB}, {TID: "t2", Host: "h1", Class: 1, Mem: s.TaskMem[1].MiB}},
	}
	if err := snap.Validate(); err != nil {
		t.Errorf("scheduler refuses the host: %v", err)
	}
}

func TestSampleEncodings(t *testing.T) {
	s := fullSample()
	j, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var fromJSON Sample
	if err := json.Unmarshal(j, &fromJSON); err != nil {
		t.Fatal(err)
	}
	m, err := msgpack.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var fromMsgpack Sample
	if err := msgpack.Unmarshal(m, &fromMsgpack); err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]Sample{"json": fromJSON, "msgpack": fromMsgpack} {
		if !equalSample(got, s) {
			t.Errorf("%s round trip:\n got %+v\nwant %+v", name, got, s)
		}
	}
	o := Overlay{Mode: Add, Users: ptr(1), Load: ptr(2.0), For: time.Minute}
	var back Overlay
	b, err := msgpack.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := msgpack.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, o) {
		t.Errorf("overlay msgpack round trip: %+v, %v", back, err)
	}
}

func TestSampleValidate(t *testing.T) {
	if err := fullSample().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(*Sample){
		"negative tasks":         func(s *Sample) { s.Tasks = -1 },
		"too many tasks":         func(s *Sample) { s.Tasks = MaxTasks + 1 },
		"NaN external":           func(s *Sample) { s.External = math.NaN() },
		"negative external":      func(s *Sample) { s.External = -0.1 },
		"infinite external":      func(s *Sample) { s.External = math.Inf(1) },
		"emulated above total":   func(s *Sample) { s.EmulatedLoad = s.External + 1 },
		"negative load average":  func(s *Sample) { s.LoadAvg1 = -1 },
		"negative cpus":          func(s *Sample) { s.CPUs = -1 },
		"infinite memory":        func(s *Sample) { s.MemFreeMiB = math.Inf(1) },
		"negative memory":        func(s *Sample) { s.MemFreeMiB = -1 },
		"negative users":         func(s *Sample) { s.Users = -1 },
		"too many users":         func(s *Sample) { s.Users = MaxUsers + 1 },
		"task without tid":       func(s *Sample) { s.TaskMem[0].TID = "" },
		"task with NaN memory":   func(s *Sample) { s.TaskMem[1].MiB = math.NaN() },
		"too many task entries":  func(s *Sample) { s.TaskMem = make([]TaskMem, maxTaskMem+1) },
		"task with -ve memory":   func(s *Sample) { s.TaskMem[1].MiB = -2 },
		"load beyond the bounds": func(s *Sample) { s.External, s.EmulatedLoad = 2*MaxLoad, 0 },
	} {
		s := fullSample()
		f(&s)
		if err := s.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err %v, want ErrInvalid", name, err)
		}
	}
}

func TestStatic(t *testing.T) {
	now := time.Unix(42, 0)
	s, err := Static{External: 0.5, MemFreeMiB: 2048, Users: 1}.Sample(now)
	if err != nil {
		t.Fatal(err)
	}
	want := Sample{Time: now, External: 0.5, EmulatedLoad: 0.5, MemFreeMiB: 2048, Users: 1, Source: "static", Emulated: true}
	if !equalSample(s, want) {
		t.Errorf("got %+v, want %+v", s, want)
	}
	if _, err := (Static{External: -1}).Sample(now); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative static load: %v", err)
	}
}
