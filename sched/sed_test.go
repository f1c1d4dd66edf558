package sched

import (
	"fmt"
	"math"
	"reflect"
	"testing"
)

// paperCluster is the paper's example: 5 machines with α = 1 and 25 with
// α = 4, idle.
func paperCluster() *Snapshot {
	s := &Snapshot{Classes: DefaultClasses(), Params: DefaultParams()}
	for i := 0; i < 5; i++ {
		s.Hosts = append(s.Hosts, Host{Name: fmt.Sprintf("fast%d", i), Alpha: 1, MemFree: math.Inf(1)})
	}
	for i := 0; i < 25; i++ {
		s.Hosts = append(s.Hosts, Host{Name: fmt.Sprintf("slow%02d", i), Alpha: 4, MemFree: math.Inf(1)})
	}
	return s
}

func TestPaperAvailabilityVector(t *testing.T) {
	got := Availability(paperCluster())
	if want := []int{5, 10, 15, 45}; !reflect.DeepEqual(got, want) {
		t.Fatalf("availability = %v, want %v", got, want)
	}
}

func TestDefaults(t *testing.T) {
	cs := DefaultClasses()
	want := []Class{{1, 1, 1.5}, {2, 1.5, 2.5}, {3, 2.5, 3.5}, {4, 3.5, 4.5}}
	if !reflect.DeepEqual(cs, want) {
		t.Fatalf("DefaultClasses = %v, want Table 1 %v", cs, want)
	}
	p := DefaultParams()
	if p.C1Max != 6 || p.C2Max != 4 || p.DMax != 12 || p.LoadReserve != 0.5 || p.DeltaT.Minutes() != 3 {
		t.Fatalf("DefaultParams = %+v, want the paper's c1max 6, c2max 4, dmax 12, load_reserv 0.5, δT 3 min", p)
	}
	if p.MemMin >= p.MemReserve || p.MemMin <= 0 {
		t.Fatalf("memory defaults %+v: want 0 < mem_min < mem_reserv as in the paper", p)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestDelayFactor(t *testing.T) {
	for _, c := range []struct{ alpha, load, want float64 }{
		{1, 0, 1},
		{4, 0, 4},
		{1, 3, 4},
		{2, 1.5, 5},
		{0.5, 1, 1},
	} {
		if got := DelayFactor(c.alpha, c.load); got != c.want {
			t.Errorf("DelayFactor(%g, %g) = %g, want %g", c.alpha, c.load, got, c.want)
		}
		h := Host{Alpha: c.alpha, Load: c.load}
		if h.Delay() != c.want || h.ProcessDelay() != c.want-c.alpha {
			t.Errorf("host α %g load %g: Delay %g ProcessDelay %g", c.alpha, c.load, h.Delay(), h.ProcessDelay())
		}
	}
}

func TestClassOf(t *testing.T) {
	cs := DefaultClasses()
	for _, c := range []struct {
		d    float64
		want int
	}{{0.5, 1}, {1, 1}, {1.5, 1}, {1.51, 2}, {2.5, 2}, {3, 3}, {4.5, 4}, {4.6, 0}, {12, 0}} {
		if got := ClassOf(cs, c.d); got != c.want {
			t.Errorf("ClassOf(%g) = %d, want %d", c.d, got, c.want)
		}
	}
}

func TestVirtualNodes(t *testing.T) {
	for _, c := range []struct {
		alpha, load, limit float64
		want               int
	}{
		{1, 0, 1.5, 1},   // α(k) ≤ 1.5
		{1, 0, 4.5, 4},   // the fast machines of the paper's example
		{4, 0, 4.5, 1},   // the slow ones
		{4, 0, 3.5, 0},   // too slow for class 3
		{1, 2, 1.5, 0},   // already loaded past the bound
		{1, 1, 2.5, 1},   // 1·(1+1) ≤ 2.5 < 1·(2+1)
		{2, 0.5, 2.5, 0}, // 2·(1+0.5) = 3 > 2.5
		{2, 0, 2.5, 1},
		{1, 0, 3, 3}, // the bound is inclusive
		{1e-9, 0, 4.5, MaxVirtualNodes},
		{1e-300, 1e300, 4.5, MaxVirtualNodes},
	} {
		if got := VirtualNodes(c.alpha, c.load, c.limit); got != c.want {
			t.Errorf("VirtualNodes(α %g, load %g, limit %g) = %d, want %d", c.alpha, c.load, c.limit, got, c.want)
		}
	}
}

func TestHostAvailability(t *testing.T) {
	p := DefaultParams()
	p.MemReserve, p.MemMin = 1, 0.5 // the paper's values, in MiB
	cs := DefaultClasses()
	for _, c := range []struct {
		name string
		h    Host
		want []int
	}{
		{"idle fast", Host{Alpha: 1, MemFree: 64}, []int{1, 2, 3, 4}},
		{"idle slow", Host{Alpha: 4, MemFree: 64}, []int{0, 0, 0, 1}},
		{"loaded", Host{Alpha: 1, Load: 2, MemFree: 64}, []int{0, 0, 1, 2}},
		// α = 2: without users 2k ≤ 2.5 gives one node; the reserve of
		// 0.5 makes it 2(k + 0.5) ≤ 2.5, none.
		{"no users α2", Host{Alpha: 2, MemFree: 64}, []int{0, 1, 1, 2}},
		{"users α2", Host{Alpha: 2, MemFree: 64, Users: 1}, []int{0, 0, 1, 1}},
		// Free memory: with users 1.4 − mem_reserv 1 = 0.4 ≤ mem_min 0.5.
		{"users, memory reserved", Host{Alpha: 1, MemFree: 1.4, Users: 2}, []int{0, 0, 0, 0}},
		{"no users, same memory", Host{Alpha: 1, MemFree: 1.4}, []int{1, 2, 3, 4}},
		{"memory at mem_min", Host{Alpha: 1, MemFree: 0.5}, []int{0, 0, 0, 0}},
		{"slow-down threshold", Host{Alpha: 1, MemFree: 64, Slowdown: 2}, []int{1, 2, 2, 2}},
		{"threshold below α", Host{Alpha: 1, MemFree: 64, Slowdown: 0.9}, []int{0, 0, 0, 0}},
	} {
		if got := HostAvailability(c.h, cs, p); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: HostAvailability(%+v) = %v, want %v", c.name, c.h, got, c.want)
		}
	}
}

func TestPlanPaperExample(t *testing.T) {
	s := paperCluster()
	for _, c := range []struct {
		job       Job
		class     int
		size      int
		edt       float64
		placement map[string]int
	}{
		// δ_i/a_i = 0.2, 0.2, 0.2, 4/45: the slowest class wins.
		{Job{MinSize: 1, MaxSize: 100}, 4, 45, 4.0 / 45, nil},
		// maxsize 10: 1/5 = 2/10 = 0.2 tie; the fastest class is chosen.
		{Job{MinSize: 1, MaxSize: 10}, 1, 5, 0.2, map[string]int{"fast0": 1, "fast1": 1, "fast2": 1, "fast3": 1, "fast4": 1}},
		// minsize 6 excludes class 1.
		{Job{MinSize: 6, MaxSize: 10}, 2, 10, 0.2, map[string]int{"fast0": 2, "fast1": 2, "fast2": 2, "fast3": 2, "fast4": 2}},
		// No class has 46 virtual nodes.
		{Job{MinSize: 46}, 0, 0, 0, map[string]int{}},
		// Zero job: minsize 1, no maxsize.
		{Job{}, 4, 45, 4.0 / 45, nil},
	} {
		m, err := Plan(s, c.job)
		if err != nil {
			t.Fatal(err)
		}
		if m.Class != c.class || m.Size != c.size || m.EDT != c.edt {
			t.Errorf("Plan(%+v) = class %d size %d edt %g, want class %d size %d edt %g", c.job, m.Class, m.Size, m.EDT, c.class, c.size, c.edt)
		}
		if c.placement != nil && !reflect.DeepEqual(m.Placement, c.placement) {
			t.Errorf("Plan(%+v) placement = %v, want %v", c.job, m.Placement, c.placement)
		}
		total := 0
		for _, n := range m.Placement {
			total += n
		}
		if total != m.Size {
			t.Errorf("Plan(%+v) places %d processes, size %d", c.job, total, m.Size)
		}
	}
}

func TestPlanFastestNodesFirst(t *testing.T) {
	s := &Snapshot{Classes: DefaultClasses(), Params: DefaultParams(), Hosts: []Host{
		{Name: "b", Alpha: 2, MemFree: math.Inf(1)},
		{Name: "a", Alpha: 1, MemFree: math.Inf(1)},
	}}
	// a offers (1,2,3,4) and b (0,1,1,2): availability (1,3,4,6).
	for _, c := range []struct {
		job       Job
		class     int
		placement map[string]int
		hosts     []Placed
	}{
		// EDT 1, 2/3, 3/4, 4/6: classes 2 and 4 tie, class 2 wins.
		{Job{}, 2, map[string]int{"a": 2, "b": 1}, nil},
		{Job{MinSize: 4}, 4, map[string]int{"a": 4, "b": 2}, nil},
		// EDT 3/4 against 4/5.
		{Job{MinSize: 4, MaxSize: 5}, 3, map[string]int{"a": 3, "b": 1}, nil},
		// Only class 4 has five nodes; of its six, the fastest five:
		// a at 1, then a and b both at 2 (a has the smaller α), a at 3,
		// then a and b both at 4 (a again).
		{Job{MinSize: 5, MaxSize: 5}, 4, map[string]int{"a": 4, "b": 1},
			[]Placed{{"b", 1, 2}, {"a", 4, 4}}},
	} {
		m, err := Plan(s, c.job)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m.Availability, []int{1, 3, 4, 6}) {
			t.Fatalf("availability %v", m.Availability)
		}
		if m.Class != c.class || !reflect.DeepEqual(m.Placement, c.placement) {
			t.Errorf("Plan(%+v) = class %d placement %v, want class %d placement %v", c.job, m.Class, m.Placement, c.class, c.placement)
		}
		if c.hosts != nil && !reflect.DeepEqual(m.Hosts, c.hosts) {
			t.Errorf("Plan(%+v) hosts = %v, want %v", c.job, m.Hosts, c.hosts)
		}
	}
}

func TestPlanReservesForUsers(t *testing.T) {
	p := DefaultParams()
	s := &Snapshot{Classes: DefaultClasses(), Params: p, Hosts: []Host{
		{Name: "u", Alpha: 1, Load: 1, MemFree: 8192, Users: 1},
		{Name: "v", Alpha: 1, Load: 1, MemFree: 8192},
	}}
	// u: 1·(k + 1.5) ≤ bound; v: 1·(k + 1) ≤ bound.
	m, err := Plan(s, Job{MinSize: 1, MaxSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 2, 4, 6}; !reflect.DeepEqual(m.Availability, want) {
		t.Fatalf("availability %v, want %v", m.Availability, want)
	}
	// Class 2 offers v's single node and u's: EDT 2/2 beats 3/2 and 4/2.
	if m.Class != 2 || m.Size != 2 || m.Placement["u"] != 1 || m.Placement["v"] != 1 {
		t.Fatalf("plan %+v", m)
	}
}

func TestPlanRejectsBadJob(t *testing.T) {
	s := paperCluster()
	for _, j := range []Job{{MinSize: -1}, {MinSize: 5, MaxSize: 4}, {MaxSize: -2}} {
		if _, err := Plan(s, j); err == nil {
			t.Errorf("Plan(%+v) accepted", j)
		}
	}
}
