package bench

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/dpvm/dpvm/task"
)

// The peer comparison (`dpvm bench peers`, daemon/bench/peers) measures dpvm
// exactly as its C programs measure PVM 3.4 and Open MPI: the same sizes,
// repetition bounds, time caps and stream length, scaled alike, and on one
// daemon the same spawn and collective protocols as pvm_bench.c.

// Bounds of the peer protocol at scale 1 (daemon/bench/peers/csrc).
var (
	peerReps      = map[int]int{8: 4000, 1 << 10: 4000, 64 << 10: 600, 1 << 20: 120}
	peerSpawns    = []int{1, 8, 32}
	peerSpawnReps = []int{10, 5, 3}
)

const (
	peerRateMax    = 400_000 // messages of the 8 B stream, at most
	peerCollIters  = 300     // timed iterations per collective, at most
	peerGroupSize  = 8       // tasks in the collectives' group, root included
	peerSpawnLimit = 20 * time.Second
)

// ModePeerQUIC is the mode argument of PeerMeasure for raw quic-go; its line
// is named SystemQUIC.
const ModePeerQUIC = ModeQUIC

// Systems of the lines PeerMeasure prints (the "system" field the peer
// harness reads).
const (
	SystemLocal  = "dpvm-local"
	SystemRemote = "dpvm-remote"
	SystemQUIC   = "quic-go"
)

// PeerSpawn is the median time to spawn Tasks tasks and hear a hello from
// each.
type PeerSpawn struct {
	Tasks int     `json:"tasks"`
	US    float64 `json:"us"`
	Reps  int     `json:"reps"`
}

// PeerLine is one run in the peer harness's JSON line format: the latency
// table, message rate and collectives of two tasks, and on one daemon the
// spawn times and the collectives of a group of 8. Raw quic-go's line has mode "remote", the
// mode of the systems it is compared with.
type PeerLine struct {
	System       string       `json:"system"`
	Mode         string       `json:"mode"`
	Results      []SizeResult `json:"results"`
	RateMsgsPerS float64      `json:"rate_msgs_per_s"`
	RateMsgs     int          `json:"rate_msgs"`
	Spawn        []PeerSpawn  `json:"spawn,omitempty"`
	GroupSize    int          `json:"group_size,omitempty"`
	BarrierUS    float64      `json:"barrier_us,omitempty"`
	BcastUS      float64      `json:"bcast_us,omitempty"`
	ReduceUS     float64      `json:"reduce_us,omitempty"`
	CollIters    []int        `json:"coll_iters,omitempty"`
	// CollNP and Coll are the collectives of two tasks (peercoll.go).
	CollNP int        `json:"coll_np,omitempty"`
	Coll   []PeerColl `json:"coll,omitempty"`
}

// checkScale accepts the harness's scales, (0, 10].
func checkScale(scale float64) error {
	if !(scale > 0 && scale <= 10) || math.IsNaN(scale) {
		return fmt.Errorf("%w: scale %v is outside (0, 10]", ErrOptions, scale)
	}
	return nil
}

// PeerMeasure measures dpvm the way the peer harness measures its peers, at
// scale (repetitions and time caps multiplied by it, as run.sh --scale):
// mode ModeLocal (two tasks on one daemon and their collectives, plus
// spawn of 1, 8 and 32 tasks and the barrier, broadcast and reduction of a
// group of 8), ModeRemote (two daemons over QUIC, and the collectives of a
// task on each) or ModePeerQUIC (raw quic-go).
func PeerMeasure(ctx context.Context, mode string, scale float64) (*PeerLine, error) {
	if err := checkScale(scale); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	switch mode {
	case ModePeerQUIC:
		q, err := StartQUIC(ctx)
		if err != nil {
			return nil, err
		}
		l := &PeerLine{System: SystemQUIC, Mode: ModeRemote}
		err = peerP2P(ctx, q, l, scale)
		if cerr := q.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("bench peers quic: %w", err)
		}
		return l, nil
	case ModeLocal, ModeRemote:
	default:
		return nil, fmt.Errorf("%w: mode %q is none of %q, %q, %q", ErrOptions, mode, ModeLocal, ModeRemote, ModePeerQUIC)
	}
	p, err := StartTasks(ctx, mode)
	if err != nil {
		return nil, err
	}
	l := &PeerLine{System: SystemLocal, Mode: mode}
	if mode == ModeRemote {
		l.System = SystemRemote
	}
	err = peerP2P(ctx, p, l, scale)
	if err == nil {
		err = peerColls(ctx, p, l, scale)
	}
	if err == nil && mode == ModeLocal {
		err = peerSpawn(ctx, p, l, scale)
		if err == nil {
			err = peerColl(ctx, p, l, scale)
		}
	}
	if cerr := p.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("bench peers %s: %w", mode, err)
	}
	return l, nil
}

// peerP2P is the latency table and the stream of pvm_bench.c's p2p part.
func peerP2P(ctx context.Context, p Pair, l *PeerLine, scale float64) error {
	for _, size := range DefaultSizes {
		reps := max(int(float64(peerReps[size])*scale), minTimed)
		capT := 2 * time.Second
		if size > 1<<10 {
			capT = 4 * time.Second
		}
		capT = time.Duration(float64(capT) * scale)
		if err := warmUp(ctx, p, size, reps, max(reps/10, 5), time.Duration(float64(DefaultWarmTime)*scale)); err != nil {
			return err
		}
		rtts, err := p.RoundTrips(ctx, size, reps, capT)
		if err != nil {
			return fmt.Errorf("round trips of %s: %w", FormatSize(size), err)
		}
		l.Results = append(l.Results, sizeResult(size, Median(rtts)/2, len(rtts)))
	}
	n := max(int(peerRateMax*scale), 1000)
	window := min(65536, max(n/8, 1))
	st, err := p.Stream(ctx, n, window, time.Duration(float64(2*time.Second)*scale))
	if err != nil {
		return fmt.Errorf("message stream: %w", err)
	}
	l.RateMsgsPerS, l.RateMsgs = st.Rate(), st.Messages
	return nil
}

// peerSpawn times spawns of 1, 8 and 32 tasks on the pair's daemon, as
// pvm_bench.c does: from the spawn call until each has said hello; then,
// untimed, the tasks are dismissed and their exits awaited, so the next
// repetition starts with only the pair running.
func peerSpawn(ctx context.Context, p *TaskPair, l *PeerLine, scale float64) error {
	if _, err := p.spawnHello(ctx, SpawnTasks); err != nil { // untimed: warms the spawn path
		return fmt.Errorf("spawn: %w", err)
	}
	for k, n := range peerSpawns {
		reps := min(max(int(float64(peerSpawnReps[k])*scale+0.5), 1), 16)
		var ds []time.Duration
		start := time.Now()
		for range reps {
			d, err := p.spawnHello(ctx, n)
			if err != nil {
				return fmt.Errorf("spawn %d: %w", n, err)
			}
			ds = append(ds, d)
			if time.Since(start) > time.Duration(float64(peerSpawnLimit)*scale) {
				break
			}
		}
		l.Spawn = append(l.Spawn, PeerSpawn{Tasks: n, US: micros(Median(ds)), Reps: len(ds)})
	}
	return nil
}

// spawnHello spawns n waiting hello tasks where the echo runs and returns
// the time until each has said hello; it then dismisses them and waits for
// their exits (untimed).
func (p *TaskPair) spawnHello(ctx context.Context, n int) (time.Duration, error) {
	var took time.Duration
	err := p.do(ctx, func(ctx context.Context, c *task.Ctx, _ task.TID) error {
		t0 := time.Now()
		tids, err := c.Spawn(&waitHelloTask{}, n, p.root.place)
		if err != nil {
			return err
		}
		if err := awaitHellos(ctx, c, tids); err != nil {
			return err
		}
		took = time.Since(t0)
		if err := c.Notify(task.TaskExit, tagExited, tids...); err != nil {
			return err
		}
		if err := c.Mcast(tids, tagBye, nil); err != nil {
			return err
		}
		for range n {
			if _, err := c.Recv(task.AnyTask, tagExited, nil, task.WithContext(ctx)); err != nil {
				return err
			}
		}
		return nil
	})
	return took, err
}

// waitHelloTask tells its parent it has started and exits when dismissed.
type waitHelloTask struct{}

func (h *waitHelloTask) Run(c *task.Ctx) error {
	if err := c.Send(c.Parent(), tagHello, nil); err != nil {
		return err
	}
	_, err := c.Recv(c.Parent(), tagBye, nil)
	return err
}

// Tags of the collectives (beyond those of tasks.go); the next
// operation, the timed broadcast and the reduction travel on the group's
// communicator.
const (
	tagCollBcAck = 22 // member → root: the broadcast arrived
	tagCollJoin  = 24 // member → root: joined
	tagBye       = 25 // root → hello task: exit
	tagExited    = 26 // notification: a hello task exited
)

// Operations of the collectives, as in pvm_bench.c.
const (
	opStop    = 0
	opBarrier = 1
	opBcast   = 2
	opReduce  = 3
)

func init() {
	task.Register("dpvm.bench.member", &memberTask{})
	task.Register("dpvm.bench.waithello", &waitHelloTask{})
}

// memberTask is a member of the collectives' group: it joins Group, tells
// its parent, then carries out the operations its parent broadcasts, each
// after an untimed barrier of Size tasks.
type memberTask struct {
	Group string
	Size  int
	C     task.Comm // the group as a communicator
}

func (m *memberTask) Run(c *task.Ctx) error {
	inst, err := c.Join(m.Group)
	if err != nil {
		return err
	}
	if err := c.Send(c.Parent(), tagCollJoin, inst); err != nil {
		return err
	}
	if err := c.GroupComm(m.Group, m.Size, &m.C); err != nil {
		return err
	}
	for iter := 0; ; iter++ {
		var op int
		if err := m.C.Bcast(c, &op, 0); err != nil {
			return err
		}
		if op == opStop {
			return c.Leave(m.Group)
		}
		if err := c.Barrier(m.Group, m.Size); err != nil {
			return err
		}
		if err := collOp(c, &m.C, op, iter); err != nil {
			return err
		}
	}
}

// collPayload is the broadcast's 8 bytes for one iteration.
func collPayload(iter int) []byte {
	b := make([]byte, 8)
	for j := range b {
		b[j] = byte(iter + j)
	}
	return b
}

// collOp carries out one operation as rank m.Rank of the group's
// communicator (0 is the root).
func collOp(c *task.Ctx, m *task.Comm, op, iter int) error {
	switch op {
	case opBarrier:
		return c.Barrier(collGroup(m), m.Size())
	case opBcast:
		b := collPayload(iter)
		if err := m.Bcast(c, &b, 0); err != nil {
			return err
		}
		if m.Rank == 0 {
			for range m.Size() - 1 {
				if _, err := c.Recv(task.AnyTask, tagCollBcAck, nil); err != nil {
					return err
				}
			}
			return nil
		}
		if string(b) != string(collPayload(iter)) {
			return fmt.Errorf("broadcast %d: %w", iter, ErrEcho)
		}
		return c.Send(m.TID(0), tagCollBcAck, nil)
	case opReduce:
		x := []float64{float64(m.Rank + 1)}
		if err := task.Reduce(c, m, task.Sum[float64], x, 0); err != nil {
			return err
		}
		if size := m.Size(); m.Rank == 0 && x[0] != float64(size*(size+1)/2) {
			return fmt.Errorf("reduction gave %v, want %d: %w", x[0], size*(size+1)/2, ErrEcho)
		}
		return nil
	}
	return fmt.Errorf("%w: collective operation %d", ErrOptions, op)
}

// collGroup is the name of the collectives' group: the root's TID makes it
// the pair's own.
func collGroup(m *task.Comm) string {
	return "dpvm.bench.coll." + m.TID(0).String()
}

// peerColl times the barrier, the broadcast of 8 bytes until every member
// has acknowledged, and the sum of one float64 in a group of 8 tasks on
// the pair's daemon: the pinger (instance 0) and 7 members. Each
// iteration broadcasts the operation and passes an untimed barrier first.
func peerColl(ctx context.Context, p *TaskPair, l *PeerLine, scale float64) error {
	maxit := max(int(peerCollIters*scale), 10)
	capT := time.Duration(float64(5*time.Second) * scale)
	us := make([]float64, 3)
	iters := make([]int, 3)
	err := p.do(ctx, func(ctx context.Context, c *task.Ctx, _ task.TID) error {
		group := "dpvm.bench.coll." + c.MyTID().String()
		var m task.Comm
		inst, err := c.Join(group)
		if err != nil {
			return err
		}
		if inst != 0 {
			return fmt.Errorf("the root joined %s as instance %d, not 0", group, inst)
		}
		if _, err := c.Spawn(&memberTask{Group: group, Size: peerGroupSize}, peerGroupSize-1, task.Here()); err != nil {
			return err
		}
		for range peerGroupSize - 1 {
			if _, err := c.Recv(task.AnyTask, tagCollJoin, nil, task.WithContext(ctx)); err != nil {
				return err
			}
		}
		if err := c.GroupComm(group, peerGroupSize, &m); err != nil {
			return err
		}
		iter := 0
		for op := opBarrier; op <= opReduce; op++ {
			var ds []time.Duration
			start := time.Now()
			for range maxit {
				if err := m.Bcast(c, &op, 0); err != nil {
					return err
				}
				if err := c.Barrier(group, peerGroupSize); err != nil {
					return err
				}
				t0 := time.Now()
				if err := collOp(c, &m, op, iter); err != nil {
					return fmt.Errorf("operation %d: %w", op, err)
				}
				t1 := time.Now()
				iter++
				ds = append(ds, t1.Sub(t0))
				if len(ds) >= 10 && t1.Sub(start) > capT {
					break
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
			us[op-1], iters[op-1] = micros(Median(ds)), len(ds)
		}
		stop := opStop
		if err := m.Bcast(c, &stop, 0); err != nil {
			return err
		}
		return c.Leave(group)
	})
	if err != nil {
		return fmt.Errorf("collectives: %w", err)
	}
	l.GroupSize = peerGroupSize
	l.BarrierUS, l.BcastUS, l.ReduceUS = us[0], us[1], us[2]
	l.CollIters = iters
	return nil
}
