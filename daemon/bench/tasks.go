package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dpvm/dpvm/daemon"
	"github.com/dpvm/dpvm/task"
)

// Message tags between the pinger and the tasks it starts.
const (
	tagPing      = 1 // pinger → echo: a message to send back
	tagPong      = 2 // echo → pinger: the message sent back
	tagRateStart = 3 // pinger → echo: a stream starts; body: the window
	tagRate      = 4 // pinger → echo: a stream message
	tagRateEnd   = 5 // pinger → echo: the stream is over; body: its count
	tagRateAck   = 6 // echo → pinger: a window received; body: the count so far
	tagRateFin   = 7 // echo → pinger: the stream's final count
	tagDone      = 8 // pinger → echo: stop
	tagHello     = 9 // spawned task → pinger: started
	tagBarrier   = 10
)

func init() {
	task.Register("dpvm.bench.pinger", &pinger{})
	task.Register("dpvm.bench.echo", &echoTask{})
	task.Register("dpvm.bench.hello", &helloTask{})
	task.Register("dpvm.bench.barrier", &barrierTask{})
}

// TaskPair is a pinger task and an echo task on a running virtual machine:
// on two daemons talking QUIC over loopback (ModeRemote) or on one daemon
// (ModeLocal). The caller hands measurements to the pinger, which carries
// them out in its own goroutine, with the task API only.
type TaskPair struct {
	mode string
	vm   *daemon.LocalVM // ModeRemote
	d    *daemon.Daemon  // where the pinger runs
	root *pinger
	tid  task.TID
	// PeerHost is the name of the echo task's host.
	PeerHost string
	closed   bool
}

// command is a measurement for the pinger to carry out.
type command struct {
	ctx  context.Context
	f    func(ctx context.Context, c *task.Ctx, echo task.TID) error
	done chan error
}

// pinger is the pair's root task. It is started with SpawnTask, which runs
// it on this very struct, so its unexported fields connect it with the
// TaskPair; it is never encoded.
type pinger struct {
	place task.SpawnOption
	ready chan error
	cmds  chan command
	gone  chan struct{} // closed when Run returns
	echo  task.TID
}

func (p *pinger) Run(c *task.Ctx) error {
	defer close(p.gone)
	tids, err := c.Spawn(&echoTask{}, 1, p.place)
	if err != nil {
		p.ready <- err
		return err
	}
	p.echo = tids[0]
	p.ready <- nil
	for {
		select {
		case cmd, ok := <-p.cmds:
			if !ok {
				return c.Send(p.echo, tagDone, nil)
			}
			cmd.done <- cmd.f(cmd.ctx, c, p.echo)
		case <-c.Context().Done():
			return task.ErrKilled
		}
	}
}

// echoTask sends back what its parent sends it and counts streams.
type echoTask struct{}

func (e *echoTask) Run(c *task.Ctx) error {
	window, count := 0, 0
	for {
		m, err := c.Recv(c.Parent(), task.AnyTag, nil) // until it is killed
		if err != nil {
			return err
		}
		switch m.Tag {
		case tagPing:
			if err := c.Send(m.From, tagPong, m.Payload); err != nil {
				return err
			}
		case tagRateStart:
			if err := m.Decode(&window); err != nil {
				return err
			}
			count = 0
		case tagRate:
			count++
			if window > 0 && count%window == 0 {
				if err := c.Send(m.From, tagRateAck, count); err != nil {
					return err
				}
			}
		case tagRateEnd:
			if err := c.Send(m.From, tagRateFin, count); err != nil {
				return err
			}
		case tagDone:
			return nil
		default:
			return fmt.Errorf("echo: unexpected tag %d", m.Tag)
		}
	}
}

// helloTask tells its parent it has started, and ends.
type helloTask struct{}

func (h *helloTask) Run(c *task.Ctx) error { return c.Send(c.Parent(), tagHello, nil) }

// barrierTask joins Group, passes Warm barriers of Count tasks untimed
// and Rounds timed, and sends its parent the timed ones' total duration
// in nanoseconds.
type barrierTask struct {
	Group               string
	Count, Warm, Rounds int
}

func (b *barrierTask) Run(c *task.Ctx) error {
	if _, err := c.Join(b.Group); err != nil {
		return err
	}
	for range b.Warm {
		if err := c.Barrier(b.Group, b.Count); err != nil {
			return err
		}
	}
	t0 := time.Now()
	for range b.Rounds {
		if err := c.Barrier(b.Group, b.Count); err != nil {
			return err
		}
	}
	return c.Send(c.Parent(), tagBarrier, int64(time.Since(t0)))
}

// StartTasks starts a pinger and its echo: in ModeRemote on the master and
// the other daemon of a two-daemon virtual machine on 127.0.0.1, in
// ModeLocal on one standalone daemon.
func StartTasks(ctx context.Context, mode string) (*TaskPair, error) {
	return startPair(ctx, mode, daemon.Config{})
}

// startPair is StartTasks with the daemons configured by cfg.
func startPair(ctx context.Context, mode string, cfg daemon.Config) (*TaskPair, error) {
	p := &TaskPair{mode: mode}
	root := &pinger{ready: make(chan error, 1), cmds: make(chan command), gone: make(chan struct{})}
	switch mode {
	case ModeRemote:
		vm, err := daemon.StartLocalVM(ctx, 2, cfg)
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		p.vm, p.d = vm, vm.Master()
		p.PeerHost = vm.Daemons[1].Name()
		root.place = task.OnHost(p.PeerHost)
	case ModeLocal:
		p.d = daemon.New(cfg)
		p.PeerHost = p.d.Name()
		root.place = task.Here()
	default:
		return nil, fmt.Errorf("%w: mode %q is neither %q nor %q", ErrOptions, mode, ModeRemote, ModeLocal)
	}
	p.root = root
	tid, err := p.d.SpawnTask(root)
	if err != nil {
		p.halt()
		return nil, fmt.Errorf("bench: start the pinger: %w", err)
	}
	p.tid = tid
	select {
	case err = <-root.ready:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		p.halt()
		return nil, fmt.Errorf("bench: start the echo task: %w", err)
	}
	return p, nil
}

// Mode is ModeRemote or ModeLocal.
func (p *TaskPair) Mode() string { return p.mode }

// ErrClosed is returned by a TaskPair's methods after Close or once its
// pinger has ended.
var ErrClosed = errors.New("bench: pair closed")

// do has the pinger run f and returns its error.
func (p *TaskPair) do(ctx context.Context, f func(ctx context.Context, c *task.Ctx, echo task.TID) error) error {
	if p.closed {
		return ErrClosed
	}
	cmd := command{ctx: ctx, f: f, done: make(chan error, 1)}
	select {
	case p.root.cmds <- cmd:
	case <-ctx.Done():
		return ctx.Err()
	case <-p.root.gone:
		return ErrClosed
	}
	// f honours ctx in every wait, so it returns once ctx is done.
	return <-cmd.done
}

// RoundTrips implements Pair.
func (p *TaskPair) RoundTrips(ctx context.Context, size, n int, maxTime time.Duration) ([]time.Duration, error) {
	if size < 1 || size > MaxSize || n < 0 {
		return nil, fmt.Errorf("%w: %d round trips of %d bytes", ErrOptions, n, size)
	}
	rtts := make([]time.Duration, 0, n)
	err := p.do(ctx, func(ctx context.Context, c *task.Ctx, echo task.TID) error {
		out := pattern(size)
		wait := []task.Option{task.WithContext(ctx)} // made once, for every call
		var start time.Time
		for i := range n {
			stamp(out, i)
			t0 := time.Now()
			if err := c.Send(echo, tagPing, out, wait...); err != nil {
				return err
			}
			m, err := c.Recv(echo, tagPong, nil, wait...)
			t1 := time.Now()
			if err != nil {
				return err
			}
			if m.Enc != task.EncBytes || !bytes.Equal(m.Data, out) {
				return fmt.Errorf("round trip %d: %w", i, ErrEcho)
			}
			rtts = append(rtts, t1.Sub(t0))
			if i == 0 {
				start = t0
			}
			if maxTime > 0 && len(rtts) >= minTimed && t1.Sub(start) > maxTime {
				break
			}
		}
		return nil
	})
	return rtts, err
}

// Stream implements Pair: the echo task acknowledges every window
// messages, and the pinger waits for the acknowledgement of a window when
// it has sent the one after it.
func (p *TaskPair) Stream(ctx context.Context, n, window int, maxTime time.Duration) (Stream, error) {
	if n < 1 || window < 1 {
		return Stream{}, fmt.Errorf("%w: stream of %d messages, window %d", ErrOptions, n, window)
	}
	var st Stream
	err := p.do(ctx, func(ctx context.Context, c *task.Ctx, echo task.TID) error {
		wait := []task.Option{task.WithContext(ctx)} // made once, for every call
		if err := c.Send(echo, tagRateStart, window, wait...); err != nil {
			return err
		}
		// The body is boxed once: a []byte converted to an interface at
		// every call would cost the loop an allocation of its own.
		var msg any = make([]byte, RateSize)
		t0 := time.Now()
		sent := 0
		for sent < n {
			if err := c.Send(echo, tagRate, msg, wait...); err != nil {
				return err
			}
			sent++
			if sent%window == 0 && sent >= 2*window {
				var got int
				if _, err := c.Recv(echo, tagRateAck, &got, wait...); err != nil {
					return err
				}
				if got != sent-window {
					return fmt.Errorf("window acknowledged at %d messages, want %d: %w", got, sent-window, ErrEcho)
				}
			}
			if sent%1024 == 0 && time.Since(t0) > maxTime {
				break
			}
		}
		if err := c.Send(echo, tagRateEnd, sent, wait...); err != nil {
			return err
		}
		var got int
		if _, err := c.Recv(echo, tagRateFin, &got, wait...); err != nil {
			return err
		}
		st = Stream{Messages: sent, Elapsed: time.Since(t0)}
		if got != sent {
			return fmt.Errorf("receiver counted %d of %d messages: %w", got, sent, ErrEcho)
		}
		// Drop the acknowledgements of the last windows, not waited for.
		for {
			_, ok, err := c.TryRecv(echo, tagRateAck, nil)
			if err != nil || !ok {
				return err
			}
		}
	})
	return st, err
}

// Spawn spawns n hello tasks on the echo's host and returns the time from
// the spawn call until each has said hello.
func (p *TaskPair) Spawn(ctx context.Context, n int) (time.Duration, error) {
	if n < 1 {
		return 0, fmt.Errorf("%w: spawn %d tasks", ErrOptions, n)
	}
	var took time.Duration
	err := p.do(ctx, func(ctx context.Context, c *task.Ctx, _ task.TID) error {
		t0 := time.Now()
		tids, err := c.Spawn(&helloTask{}, n, p.root.place)
		if err != nil {
			return err
		}
		if err := awaitHellos(ctx, c, tids); err != nil {
			return err
		}
		took = time.Since(t0)
		return nil
	})
	return took, err
}

// awaitHellos receives one hello from each of tids, the tasks just
// spawned, and fails on a hello from any other task.
func awaitHellos(ctx context.Context, c *task.Ctx, tids []task.TID) error {
	want := make(map[task.TID]bool, len(tids))
	for _, t := range tids {
		want[t] = true
	}
	for range tids {
		st, err := c.Recv(task.AnyTask, tagHello, nil, task.WithContext(ctx))
		if err != nil {
			return err
		}
		if !want[st.From] {
			return fmt.Errorf("hello from %v, not a task just spawned: %w", st.From, ErrEcho)
		}
		delete(want, st.From)
	}
	return nil
}

// Barrier starts tasks barrier tasks, half on each daemon (all on one in
// ModeLocal), has them pass warm untimed barriers and rounds timed ones,
// and returns the median over the tasks of their mean time per barrier.
func (p *TaskPair) Barrier(ctx context.Context, tasks, warm, rounds int) (time.Duration, error) {
	if tasks < 1 || warm < 0 || rounds < 1 {
		return 0, fmt.Errorf("%w: barrier of %d tasks, %d+%d rounds", ErrOptions, tasks, warm, rounds)
	}
	var per time.Duration
	err := p.do(ctx, func(ctx context.Context, c *task.Ctx, _ task.TID) error {
		proto := &barrierTask{Group: "dpvm.bench.barrier." + c.MyTID().String(),
			Count: tasks, Warm: warm, Rounds: rounds}
		here := tasks / 2
		if p.mode == ModeLocal {
			here = 0
		}
		if here > 0 {
			if _, err := c.Spawn(proto, here, task.Here()); err != nil {
				return err
			}
		}
		if _, err := c.Spawn(proto, tasks-here, p.root.place); err != nil {
			return err
		}
		var means []time.Duration
		for range tasks {
			var ns int64
			if _, err := c.Recv(task.AnyTask, tagBarrier, &ns, task.WithContext(ctx)); err != nil {
				return err
			}
			means = append(means, time.Duration(ns)/time.Duration(rounds))
		}
		per = Median(means)
		return nil
	})
	return per, err
}

// Close stops the pinger and the echo and the daemons they ran on.
func (p *TaskPair) Close() error {
	if p.closed {
		return nil
	}
	p.closed = true
	close(p.root.cmds)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := p.d.Wait(ctx, p.tid)
	p.halt()
	if err != nil {
		return fmt.Errorf("bench: stop the pinger: %w", err)
	}
	return nil
}

func (p *TaskPair) halt() {
	if p.vm != nil {
		p.vm.Halt(5 * time.Second)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.d.Halt(ctx)
}

// pattern returns size bytes of a pattern that stamp varies per round.
func pattern(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	return b
}

// stamp marks b with the round number at both ends, so a stale or
// truncated echo is noticed.
func stamp(b []byte, round int) {
	b[0] = byte(round)
	b[len(b)-1] = byte(round >> 8)
	if len(b) >= 8 {
		b[1], b[2] = byte(round>>16), byte(round>>24)
	}
}
