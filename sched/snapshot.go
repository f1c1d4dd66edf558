package sched

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// ErrInvalid is returned (wrapped, with the offending key and value) for a
// snapshot or job that cannot be decided on: malformed JSON, an unknown key,
// a value out of range, an inconsistent cluster.
var ErrInvalid = errors.New("invalid snapshot")

// Class is one delay class: machines whose current delay factor lies in
// (Min, Max] belong to it, and a job mapped onto it expects the
// representative delay Delta.
type Class struct {
	Delta float64 // representative delay δ_i
	Min   float64 // lower bound δ_i^min (exclusive)
	Max   float64 // upper bound δ_i^max (inclusive)
}

// DefaultClasses returns the delay classes of the paper's Table 1.
func DefaultClasses() []Class {
	return []Class{
		{Delta: 1, Min: 1, Max: 1.5},
		{Delta: 2, Min: 1.5, Max: 2.5},
		{Delta: 3, Min: 2.5, Max: 3.5},
		{Delta: 4, Min: 3.5, Max: 4.5},
	}
}

// Params are Dynamic-SED's reservation and migration parameters. Memory is
// in MiB.
type Params struct {
	// LoadReserve (load_reserv) is added to the load of a host with
	// interactive users when its availability is computed.
	LoadReserve float64
	// MemReserve (mem_reserv) is subtracted from the free memory of a host
	// with interactive users when its availability is computed.
	MemReserve float64
	// MemMin (mem_min) is the lower bound for free memory: a host at or
	// below it offers no virtual nodes and receives no migrations, and a
	// host below it makes its processes migration candidates.
	MemMin float64
	// C1Max (c¹max) is the counter limit for selecting a process on a host
	// without interactive users.
	C1Max int
	// C2Max (c²max) is the counter limit on a host with interactive users.
	C2Max int
	// DMax (d_max) bounds the delay factor of a destination host when a
	// process is moved away from interactive users.
	DMax float64
	// DeltaT (δT) is the check period. The policy itself does not use it;
	// the master runs Step once every DeltaT.
	DeltaT time.Duration
}

// DefaultParams returns the paper's parameters: δT = 3 min, c¹max = 6,
// c²max = 4, d_max = 12, load_reserv = 0.5. The paper's memory figures
// (mem_reserv = 1 MB, mem_min = 500 kB, for 1997 workstations) are scaled by
// 1024 for today's hosts: mem_reserv = 1024 MiB, mem_min = 512 MiB.
func DefaultParams() Params {
	return Params{
		LoadReserve: 0.5,
		MemReserve:  1024,
		MemMin:      512,
		C1Max:       6,
		C2Max:       4,
		DMax:        12,
		DeltaT:      3 * time.Minute,
	}
}

// Host is one machine as the master sees it at a check.
type Host struct {
	Name string
	// Alpha (α) is the speed factor: 1 for the reference machine, 4 for
	// one four times slower. It must be positive.
	Alpha float64
	// Load is the number of runnable processes on the host, the parallel
	// processes placed there included (it may be fractional, as a load
	// average is).
	Load float64
	// MemFree is the free memory in MiB; math.Inf(1) means unknown or
	// unlimited, so memory never constrains the host.
	MemFree float64
	// Users is the number of interactive users logged in.
	Users int
	// MaxUsers is how many interactive users the host tolerates before its
	// parallel processes become migration candidates.
	MaxUsers int
	// Slowdown is the slow-down threshold s: the largest delay tolerated on
	// the host. Zero means no threshold.
	Slowdown float64
}

// Delay returns the host's delay factor d = α(1 + load): the delay a new
// process placed on it would see.
func (h Host) Delay() float64 { return DelayFactor(h.Alpha, h.Load) }

// ProcessDelay returns d − α, the delay a process already running on the
// host sees (the load counts it).
func (h Host) ProcessDelay() float64 { return h.Delay() - h.Alpha }

// Process is one parallel process (task) under the scheduler's control.
type Process struct {
	TID  string
	Host string // name of the host it runs on
	// Class is the 1-based delay class the process was started in (its
	// expected delay). Zero means unknown and is treated as the slowest
	// class, so the process becomes a delay candidate only when its host
	// is slower than every class.
	Class int
	// Mem is the memory the process uses, in MiB.
	Mem float64
	// Counter is the selection counter carried from the previous check.
	Counter int
}

// Job is a parallel job to be mapped: it runs on at least MinSize and at most
// MaxSize processes. MinSize 0 means 1; MaxSize 0 means no upper bound.
type Job struct {
	MinSize int
	MaxSize int
}

// Snapshot is the cluster as the master sees it at one check: the policy's
// configuration, the hosts, and the parallel processes on them. Job is only
// read by the plan command. Build one in Go, or decode the JSON form with
// ParseSnapshot.
type Snapshot struct {
	Classes   []Class
	Params    Params
	Hosts     []Host
	Processes []Process
	Job       Job
}

// Clone returns a deep copy of s.
func (s *Snapshot) Clone() *Snapshot {
	c := *s
	c.Classes = append([]Class(nil), s.Classes...)
	c.Hosts = append([]Host(nil), s.Hosts...)
	c.Processes = append([]Process(nil), s.Processes...)
	return &c
}

// Host returns the host named name and whether it exists.
func (s *Snapshot) Host(name string) (Host, bool) {
	for _, h := range s.Hosts {
		if h.Name == name {
			return h, true
		}
	}
	return Host{}, false
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Validate reports the first problem that makes s unusable: classes not
// ordered, a parameter out of range, a host with a non-positive α, a
// duplicate name, a process on an unknown host, a host whose load is smaller
// than the number of processes listed on it, and so on. The error wraps
// ErrInvalid and names the offending item.
func (s *Snapshot) Validate() error {
	if err := validateClasses(s.Classes); err != nil {
		return err
	}
	if err := s.Params.Validate(); err != nil {
		return err
	}
	if err := s.Job.validate(); err != nil {
		return err
	}
	if len(s.Hosts) == 0 {
		return invalid("no hosts")
	}
	index := make(map[string]int, len(s.Hosts))
	for i, h := range s.Hosts {
		if err := h.validate(); err != nil {
			return err
		}
		if _, dup := index[h.Name]; dup {
			return invalid("host %q listed twice", h.Name)
		}
		index[h.Name] = i
	}
	count := make([]int, len(s.Hosts))
	tids := make(map[string]bool, len(s.Processes))
	for _, p := range s.Processes {
		if p.TID == "" {
			return invalid("process on host %q has an empty tid", p.Host)
		}
		if tids[p.TID] {
			return invalid("process %q listed twice", p.TID)
		}
		tids[p.TID] = true
		i, ok := index[p.Host]
		if !ok {
			return invalid("process %q: unknown host %q", p.TID, p.Host)
		}
		count[i]++
		if p.Class < 0 || p.Class > len(s.Classes) {
			return invalid("process %q: class %d out of range 1..%d", p.TID, p.Class, len(s.Classes))
		}
		if !finite(p.Mem) || p.Mem < 0 {
			return invalid("process %q: mem_mib must be a non-negative number, got %g", p.TID, p.Mem)
		}
		if p.Counter < 0 {
			return invalid("process %q: counter must be non-negative, got %d", p.TID, p.Counter)
		}
	}
	for i, h := range s.Hosts {
		if float64(count[i]) > h.Load {
			return invalid("host %q: load %g is smaller than its %d listed processes (load counts them)", h.Name, h.Load, count[i])
		}
	}
	return nil
}

func validateClasses(cs []Class) error {
	if len(cs) == 0 {
		return invalid("no delay classes")
	}
	for i, c := range cs {
		n := i + 1
		if !finite(c.Delta) || !finite(c.Min) || !finite(c.Max) {
			return invalid("class %d: delta, min and max must be finite numbers", n)
		}
		if c.Min < 0 || c.Max <= c.Min {
			return invalid("class %d: need 0 <= min < max, got min %g max %g", n, c.Min, c.Max)
		}
		if c.Delta <= 0 || c.Delta < c.Min || c.Delta > c.Max {
			return invalid("class %d: delta %g must be positive and lie in [min %g, max %g]", n, c.Delta, c.Min, c.Max)
		}
		if i > 0 {
			p := cs[i-1]
			if c.Min < p.Max || c.Delta <= p.Delta {
				return invalid("classes not ordered: class %d (min %g, delta %g) must start at or above class %d's max %g and have a larger delta", n, c.Min, c.Delta, i, p.Max)
			}
		}
	}
	return nil
}

// Validate reports a parameter out of range, wrapping ErrInvalid.
func (p Params) Validate() error {
	switch {
	case !finite(p.LoadReserve) || p.LoadReserve < 0:
		return invalid("params: load_reserve must be a non-negative number, got %g", p.LoadReserve)
	case !finite(p.MemReserve) || p.MemReserve < 0:
		return invalid("params: mem_reserve_mib must be a non-negative number, got %g", p.MemReserve)
	case !finite(p.MemMin) || p.MemMin < 0:
		return invalid("params: mem_min_mib must be a non-negative number, got %g", p.MemMin)
	case p.C1Max < 1:
		return invalid("params: c1max must be at least 1, got %d", p.C1Max)
	case p.C2Max < 1:
		return invalid("params: c2max must be at least 1, got %d", p.C2Max)
	case !finite(p.DMax) || p.DMax <= 0:
		return invalid("params: dmax must be positive, got %g", p.DMax)
	case p.DeltaT <= 0:
		return invalid("params: delta_t must be positive, got %v", p.DeltaT)
	}
	return nil
}

func (h Host) validate() error {
	switch {
	case h.Name == "":
		return invalid("host with an empty name")
	case !finite(h.Alpha) || h.Alpha <= 0:
		return invalid("host %q: alpha must be positive, got %g", h.Name, h.Alpha)
	case !finite(h.Load) || h.Load < 0:
		return invalid("host %q: load must be non-negative, got %g", h.Name, h.Load)
	case math.IsNaN(h.MemFree) || h.MemFree < 0:
		return invalid("host %q: mem_free_mib must be non-negative, got %g", h.Name, h.MemFree)
	case h.Users < 0:
		return invalid("host %q: users must be non-negative, got %d", h.Name, h.Users)
	case h.MaxUsers < 0:
		return invalid("host %q: max_users must be non-negative, got %d", h.Name, h.MaxUsers)
	case !finite(h.Slowdown) || h.Slowdown < 0:
		return invalid("host %q: slowdown must be non-negative (0 = none), got %g", h.Name, h.Slowdown)
	}
	return nil
}

func (j Job) validate() error {
	if j.MinSize < 0 {
		return invalid("job: minsize must be at least 1, got %d", j.MinSize)
	}
	if j.MaxSize < 0 || (j.MaxSize > 0 && j.MaxSize < j.minSize()) {
		return invalid("job: maxsize %d must be at least minsize %d", j.MaxSize, j.minSize())
	}
	return nil
}

func (j Job) minSize() int {
	if j.MinSize == 0 {
		return 1
	}
	return j.MinSize
}

// The JSON form. Pointers tell an omitted key (default) from an explicit
// value (checked).
type wireSnapshot struct {
	Classes   []wireClass   `json:"classes"`
	Params    *wireParams   `json:"params"`
	Hosts     []wireHost    `json:"hosts"`
	Job       *wireJob      `json:"job"`
	Processes []wireProcess `json:"processes"`
}

type wireClass struct {
	Delta *float64 `json:"delta"`
	Min   *float64 `json:"min"`
	Max   *float64 `json:"max"`
}

type wireParams struct {
	LoadReserve *float64        `json:"load_reserve"`
	MemReserve  *float64        `json:"mem_reserve_mib"`
	MemMin      *float64        `json:"mem_min_mib"`
	C1Max       *int            `json:"c1max"`
	C2Max       *int            `json:"c2max"`
	DMax        *float64        `json:"dmax"`
	DeltaT      json.RawMessage `json:"delta_t"`
}

type wireHost struct {
	Name     *string  `json:"name"`
	Alpha    *float64 `json:"alpha"`
	Load     *float64 `json:"load"`
	MemFree  *float64 `json:"mem_free_mib"`
	Users    *int     `json:"users"`
	MaxUsers *int     `json:"max_users"`
	Slowdown *float64 `json:"slowdown"`
}

type wireJob struct {
	MinSize *int `json:"minsize"`
	MaxSize *int `json:"maxsize"`
}

type wireProcess struct {
	TID     *string  `json:"tid"`
	Host    *string  `json:"host"`
	Class   *int     `json:"class"`
	Mem     *float64 `json:"mem_mib"`
	Counter *int     `json:"counter"`
}

// ParseSnapshot decodes the JSON form of a snapshot, applies the defaults for
// omitted keys and validates the result:
//
//	{"classes":[{"delta":1,"min":1,"max":1.5}, …],
//	 "params":{"load_reserve":0.5,"mem_reserve_mib":1024,"mem_min_mib":512,
//	           "c1max":6,"c2max":4,"dmax":12,"delta_t":"3m"},
//	 "hosts":[{"name":"h1","alpha":1,"load":0,"mem_free_mib":64,"users":0,
//	           "max_users":0,"slowdown":4.5}, …],
//	 "job":{"minsize":1,"maxsize":100},
//	 "processes":[{"tid":"p1","host":"h1","class":1,"mem_mib":8,"counter":5}, …]}
//
// Defaults: classes from DefaultClasses, each parameter from DefaultParams
// (delta_t is a Go duration string or a number of seconds), alpha 1, load 0,
// mem_free_mib unlimited, users 0, max_users 0, slowdown none, minsize 1,
// maxsize unbounded, a process's class the slowest, mem_mib 0, counter 0. A
// class's min defaults to the previous class's max (0 for the first). Host
// names and tids are required; unknown keys are refused so that a misspelt
// key does not silently take its default. Errors wrap ErrInvalid.
func ParseSnapshot(data []byte) (*Snapshot, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var w wireSnapshot
	if err := dec.Decode(&w); err != nil {
		return nil, jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, invalid("unexpected data after the JSON object")
	}
	s, err := w.snapshot()
	if err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

// jsonError rewrites encoding/json's errors into one line that names the key
// and leaves out Go's internal type names.
func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return invalid("empty input: expected a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("malformed JSON: unexpected end of input")
	case errors.As(err, &syn):
		return invalid("malformed JSON at byte %d: %s", syn.Offset, strings.TrimPrefix(syn.Error(), "json: "))
	case errors.As(err, &typ):
		key := typ.Field
		if key == "" {
			return invalid("expected a JSON object, got %s", typ.Value)
		}
		return invalid("key %q: expected %s, got %s", key, jsonKind(typ.Type.Kind().String()), typ.Value)
	}
	return invalid("%s", strings.TrimPrefix(err.Error(), "json: "))
}

func jsonKind(k string) string {
	switch k {
	case "int", "int64":
		return "an integer"
	case "float64":
		return "a number"
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "struct", "ptr":
		return "an object"
	}
	return k
}

func (w *wireSnapshot) snapshot() (*Snapshot, error) {
	s := &Snapshot{Classes: DefaultClasses(), Params: DefaultParams()}
	if w.Classes != nil {
		s.Classes = make([]Class, len(w.Classes))
		prevMax := 0.0
		for i, wc := range w.Classes {
			if wc.Delta == nil || wc.Max == nil {
				return nil, invalid("class %d: delta and max are required", i+1)
			}
			c := Class{Delta: *wc.Delta, Min: prevMax, Max: *wc.Max}
			if wc.Min != nil {
				c.Min = *wc.Min
			}
			s.Classes[i] = c
			prevMax = c.Max
		}
	}
	if p := w.Params; p != nil {
		setF(&s.Params.LoadReserve, p.LoadReserve)
		setF(&s.Params.MemReserve, p.MemReserve)
		setF(&s.Params.MemMin, p.MemMin)
		setI(&s.Params.C1Max, p.C1Max)
		setI(&s.Params.C2Max, p.C2Max)
		setF(&s.Params.DMax, p.DMax)
		if len(p.DeltaT) > 0 && string(p.DeltaT) != "null" {
			d, err := parseDeltaT(p.DeltaT)
			if err != nil {
				return nil, err
			}
			s.Params.DeltaT = d
		}
	}
	if j := w.Job; j != nil {
		if j.MinSize != nil {
			if *j.MinSize < 1 {
				return nil, invalid("job: minsize must be at least 1, got %d", *j.MinSize)
			}
			s.Job.MinSize = *j.MinSize
		}
		if j.MaxSize != nil {
			if *j.MaxSize < 1 {
				return nil, invalid("job: maxsize must be at least 1, got %d", *j.MaxSize)
			}
			s.Job.MaxSize = *j.MaxSize
		}
	}
	s.Hosts = make([]Host, len(w.Hosts))
	for i, wh := range w.Hosts {
		if wh.Name == nil || *wh.Name == "" {
			return nil, invalid("host %d: name is required", i+1)
		}
		h := Host{Name: *wh.Name, Alpha: 1, MemFree: math.Inf(1)}
		setF(&h.Alpha, wh.Alpha)
		setF(&h.Load, wh.Load)
		setF(&h.MemFree, wh.MemFree)
		setI(&h.Users, wh.Users)
		setI(&h.MaxUsers, wh.MaxUsers)
		setF(&h.Slowdown, wh.Slowdown)
		s.Hosts[i] = h
	}
	s.Processes = make([]Process, len(w.Processes))
	for i, wp := range w.Processes {
		if wp.TID == nil || *wp.TID == "" {
			return nil, invalid("process %d: tid is required", i+1)
		}
		if wp.Host == nil {
			return nil, invalid("process %q: host is required", *wp.TID)
		}
		p := Process{TID: *wp.TID, Host: *wp.Host}
		if wp.Class != nil {
			if *wp.Class < 1 || *wp.Class > len(s.Classes) {
				return nil, invalid("process %q: class %d out of range 1..%d", p.TID, *wp.Class, len(s.Classes))
			}
			p.Class = *wp.Class
		}
		setF(&p.Mem, wp.Mem)
		setI(&p.Counter, wp.Counter)
		s.Processes[i] = p
	}
	return s, nil
}

func parseDeltaT(raw json.RawMessage) (time.Duration, error) {
	var str string
	if err := json.Unmarshal(raw, &str); err == nil {
		d, err := time.ParseDuration(str)
		if err != nil {
			return 0, invalid("params: delta_t %q is not a duration (like \"3m\" or \"100ms\")", str)
		}
		return d, nil
	}
	var secs float64
	if err := json.Unmarshal(raw, &secs); err != nil {
		return 0, invalid("params: delta_t must be a duration string or a number of seconds")
	}
	if !(secs > 0) || secs > math.MaxInt64/float64(time.Second) {
		return 0, invalid("params: delta_t must be positive, got %g s", secs)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

func setF(dst *float64, v *float64) {
	if v != nil {
		*dst = *v
	}
}

func setI(dst *int, v *int) {
	if v != nil {
		*dst = *v
	}
}
