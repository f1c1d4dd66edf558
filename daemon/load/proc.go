package load

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Default paths read by Proc.
const (
	DefaultStatPath    = "/proc/stat"
	DefaultMeminfoPath = "/proc/meminfo"
	DefaultLoadavgPath = "/proc/loadavg"
	DefaultSelfTaskDir = "/proc/self/task"
	DefaultUtmpPath    = "/var/run/utmp"
)

// DefaultWindow is Proc's smoothing time constant for the external load.
const DefaultWindow = 10 * time.Second

// maxProcFile bounds what is read of one /proc file (/proc/stat's intr line
// grows with the interrupt count).
const maxProcFile = 4 << 20

// Proc measures the host it runs on (Linux):
//
//   - External: the host's runnable threads that do not belong to this
//     process — /proc/stat's procs_running (every runnable thread on the
//     host, the one reading included) minus the threads of this process
//     in state R (/proc/self/task/*/stat, the reading thread included) —
//     smoothed by an exponential moving average with time constant Window.
//     The two files are read a few microseconds apart, so one reading can
//     be off by the threads that changed state in between; the average
//     absorbs that. The daemon's own tasks are excluded because the daemon
//     counts them itself (Sample.Tasks) — as Dynamic-SED's processes,
//     whether or not a core is running them at that instant. A
//     multi-threaded process counts once per runnable thread, as in the
//     kernel's load average.
//   - MemFreeMiB: /proc/meminfo's MemAvailable (MemFree + Buffers + Cached
//     on kernels before 3.14, which lack it).
//   - Users: distinct user names among utmp's USER_PROCESS records; a
//     missing utmp file (containers, systems without utmp) means 0.
//   - LoadAvg1 and CPUs, for display.
//
// The zero value reads the default paths; the path fields let tests point
// Proc at fixture files. Proc is safe for concurrent use.
type Proc struct {
	StatPath    string
	MeminfoPath string
	LoadavgPath string
	SelfTaskDir string
	UtmpPath    string
	// UtmpOrder is utmp's byte order; nil means the machine's.
	UtmpOrder binary.ByteOrder
	// Window is the smoothing time constant; 0 means DefaultWindow, a
	// negative value turns smoothing off.
	Window time.Duration

	mu   sync.Mutex
	ema  float64
	last time.Time
	have bool
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Sample reads the host's figures; now stamps the sample and drives the
// smoothing.
func (p *Proc) Sample(now time.Time) (Sample, error) {
	self, err := RunningThreads(or(p.SelfTaskDir, DefaultSelfTaskDir))
	if err != nil {
		return Sample{}, err
	}
	st, err := readParsed(or(p.StatPath, DefaultStatPath), ParseStat)
	if err != nil {
		return Sample{}, err
	}
	mi, err := readParsed(or(p.MeminfoPath, DefaultMeminfoPath), ParseMeminfo)
	if err != nil {
		return Sample{}, err
	}
	la, err := readParsed(or(p.LoadavgPath, DefaultLoadavgPath), ParseLoadavg)
	if err != nil {
		return Sample{}, err
	}
	users, err := p.users()
	if err != nil {
		return Sample{}, err
	}
	raw := math.Max(0, float64(st.ProcsRunning)-float64(self))
	return Sample{
		Time:       now,
		External:   p.smooth(now, raw),
		LoadAvg1:   la,
		CPUs:       st.CPUs,
		MemFreeMiB: mi.AvailableMiB(),
		Users:      users,
		Source:     "proc",
	}, nil
}

func (p *Proc) users() (int, error) {
	path := or(p.UtmpPath, DefaultUtmpPath)
	data, err := readCappedN(path, MaxUtmpSize)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	recs, err := ParseUtmp(data, p.UtmpOrder)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	u, _ := InteractiveUsers(recs)
	return u, nil
}

// smooth folds one reading into the moving average: the weight of the new
// reading is 1 − exp(−Δt/Window). The first reading, a reading with a
// clock that went back, and Window < 0 take the reading as it is.
func (p *Proc) smooth(now time.Time, x float64) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.Window
	if w == 0 {
		w = DefaultWindow
	}
	if !p.have {
		p.ema = x
	} else {
		p.ema = Smooth(p.ema, x, now.Sub(p.last), w)
	}
	p.last, p.have = now, true
	return p.ema
}

// Smooth is one step of Proc's moving average: given the previous average
// prev, taken dt ago, and a new reading x, the new average. A window ≤ 0 or
// a clock that went back (dt < 0) takes the reading as it is.
func Smooth(prev, x float64, dt, window time.Duration) float64 {
	if window <= 0 || dt < 0 {
		return x
	}
	return prev + (1-math.Exp(-float64(dt)/float64(window)))*(x-prev)
}

// RunningThreads counts the threads in state R (running or runnable) under
// a /proc/PID/task directory, skipping threads that exit while it reads.
func RunningThreads(dir string) (int, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("load: %w", err)
	}
	n := 0
	for _, e := range ents {
		path := filepath.Join(dir, e.Name(), "stat")
		data, err := readCapped(path)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNoProcess) {
			continue
		}
		if err != nil {
			return 0, err
		}
		state, err := ParseTaskState(data)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
		if state == 'R' {
			n++
		}
	}
	return n, nil
}

// errNoProcess stands for ESRCH, which reading a vanished thread's stat can
// return instead of ENOENT.
var errNoProcess = errors.New("no such process")

func readCapped(path string) ([]byte, error) { return readCappedN(path, maxProcFile) }

func readCappedN(path string, limit int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		if errors.Is(err, syscall.ESRCH) {
			err = errNoProcess
		}
		return nil, fmt.Errorf("load: read %s: %w", path, err)
	}
	if len(data) > limit {
		return nil, fmt.Errorf("%w: %s: larger than %d bytes", ErrMalformed, path, limit)
	}
	return data, nil
}

// StatInfo is what dpvm reads from /proc/stat.
type StatInfo struct {
	ProcsRunning int // runnable threads on the host
	ProcsBlocked int // threads blocked on I/O
	CPUs         int // "cpuN" lines
}

// ParseStat reads procs_running, procs_blocked and the processor count
// from /proc/stat's contents. procs_running is required.
func ParseStat(data []byte) (StatInfo, error) {
	var st StatInfo
	haveRunning := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), maxProcFile)
	line := 0
	for sc.Scan() {
		line++
		f := bytes.Fields(sc.Bytes())
		if len(f) == 0 {
			continue
		}
		key := string(f[0])
		switch {
		case key == "procs_running" || key == "procs_blocked":
			if len(f) != 2 {
				return StatInfo{}, fmt.Errorf("%w: stat line %d: want %q", ErrMalformed, line, key+" N")
			}
			v, err := strconv.ParseUint(string(f[1]), 10, 32)
			if err != nil || v > MaxTasks {
				return StatInfo{}, fmt.Errorf("%w: stat line %d: %s %q", ErrMalformed, line, key, f[1])
			}
			if key == "procs_running" {
				st.ProcsRunning, haveRunning = int(v), true
			} else {
				st.ProcsBlocked = int(v)
			}
		case len(key) > 3 && key[:3] == "cpu" && isDigits(key[3:]):
			if st.CPUs < MaxTasks {
				st.CPUs++
			}
		}
	}
	if err := sc.Err(); err != nil {
		return StatInfo{}, fmt.Errorf("%w: stat line %d: %v", ErrMalformed, line+1, err)
	}
	if !haveRunning {
		return StatInfo{}, fmt.Errorf("%w: stat: no procs_running line", ErrMalformed)
	}
	return st, nil
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// MemInfo is what dpvm reads from /proc/meminfo, in KiB.
type MemInfo struct {
	TotalKiB, FreeKiB, AvailableKiB, BuffersKiB, CachedKiB uint64
	HasAvailable                                           bool
}

// AvailableMiB is the memory available to new work in MiB: MemAvailable,
// or MemFree + Buffers + Cached where the kernel does not report it.
func (m MemInfo) AvailableMiB() float64 {
	if m.HasAvailable {
		return float64(m.AvailableKiB) / 1024
	}
	return (float64(m.FreeKiB) + float64(m.BuffersKiB) + float64(m.CachedKiB)) / 1024
}

// ParseMeminfo reads /proc/meminfo's contents. MemAvailable or MemFree is
// required; the keys dpvm uses must be "Key: N kB"; other lines are
// ignored.
func ParseMeminfo(data []byte) (MemInfo, error) {
	var m MemInfo
	haveFree := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4<<10), maxProcFile)
	line := 0
	for sc.Scan() {
		line++
		f := bytes.Fields(sc.Bytes())
		if len(f) == 0 {
			continue
		}
		var dst *uint64
		switch string(f[0]) {
		case "MemTotal:":
			dst = &m.TotalKiB
		case "MemFree:":
			dst, haveFree = &m.FreeKiB, true
		case "MemAvailable:":
			dst, m.HasAvailable = &m.AvailableKiB, true
		case "Buffers:":
			dst = &m.BuffersKiB
		case "Cached:":
			dst = &m.CachedKiB
		default:
			continue
		}
		if len(f) != 3 || string(f[2]) != "kB" {
			return MemInfo{}, fmt.Errorf("%w: meminfo line %d: want %q", ErrMalformed, line, string(f[0])+" N kB")
		}
		v, err := strconv.ParseUint(string(f[1]), 10, 64)
		if err != nil || v > MaxMemMiB*1024 {
			return MemInfo{}, fmt.Errorf("%w: meminfo line %d: %s %q", ErrMalformed, line, f[0], f[1])
		}
		*dst = v
	}
	if err := sc.Err(); err != nil {
		return MemInfo{}, fmt.Errorf("%w: meminfo line %d: %v", ErrMalformed, line+1, err)
	}
	if !m.HasAvailable && !haveFree {
		return MemInfo{}, fmt.Errorf("%w: meminfo: neither MemAvailable nor MemFree", ErrMalformed)
	}
	return m, nil
}

// ParseLoadavg returns the one-minute load average, the first field of
// /proc/loadavg.
func ParseLoadavg(data []byte) (float64, error) {
	f := bytes.Fields(data)
	if len(f) == 0 {
		return 0, fmt.Errorf("%w: loadavg: empty", ErrMalformed)
	}
	v, err := strconv.ParseFloat(string(f[0]), 64)
	if err != nil || !inRange(v, MaxLoad) {
		return 0, fmt.Errorf("%w: loadavg: first field %q", ErrMalformed, f[0])
	}
	return v, nil
}

// ParseTaskState returns the state letter of a /proc/PID/task/TID/stat
// line ("TID (comm) S …"); comm may hold spaces and parentheses, so the
// state follows the last ')'.
func ParseTaskState(data []byte) (byte, error) {
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) || data[i+1] != ' ' {
		return 0, fmt.Errorf("%w: task stat: no state after the command name", ErrMalformed)
	}
	s := data[i+2]
	if s < 'A' || s > 'z' || (s > 'Z' && s < 'a') {
		return 0, fmt.Errorf("%w: task stat: state %q is not a letter", ErrMalformed, s)
	}
	return s, nil
}

// readParsed reads a procfs file (capped) and parses it, naming the file in
// a parse error.
func readParsed[T any](path string, parse func([]byte) (T, error)) (T, error) {
	var zero T
	data, err := readCapped(path)
	if err != nil {
		return zero, err
	}
	v, err := parse(data)
	if err != nil {
		return zero, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}
