package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon/bench/peers"
)

// TestPeerMeasureLocal runs the peer protocol on one daemon at a small
// scale: every figure of the line is there, every echo, broadcast and
// reduction was checked on the way, and the line has the harness's shape.
func TestPeerMeasureLocal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := PeerMeasure(ctx, ModeLocal, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	if l.System != SystemLocal || l.Mode != ModeLocal || len(l.Results) != len(DefaultSizes) {
		t.Fatalf("line %+v", l)
	}
	for i, r := range l.Results {
		if r.Size != DefaultSizes[i] || r.OnewayUS <= 0 || r.MBps <= 0 || r.Reps < minTimed {
			t.Errorf("size row %+v", r)
		}
	}
	if l.RateMsgsPerS <= 0 || l.RateMsgs < 1000 {
		t.Errorf("rate %v over %d messages", l.RateMsgsPerS, l.RateMsgs)
	}
	if len(l.Spawn) != 3 {
		t.Fatalf("spawn %+v", l.Spawn)
	}
	for i, s := range l.Spawn {
		if s.Tasks != peerSpawns[i] || s.US <= 0 || s.Reps < 1 {
			t.Errorf("spawn %+v", s)
		}
	}
	if l.GroupSize != 8 || l.BarrierUS <= 0 || l.BcastUS <= 0 || l.ReduceUS <= 0 || len(l.CollIters) != 3 {
		t.Errorf("collectives %+v", l)
	}
	for _, n := range l.CollIters {
		if n < 10 {
			t.Errorf("collective iterations %v: want at least 10 each", l.CollIters)
		}
	}
	checkColls(t, l)
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"system", "mode", "results", "rate_msgs_per_s", "spawn", "group_size", "barrier_us", "bcast_us", "reduce_us", "coll_np", "coll"} {
		if _, ok := back[k]; !ok {
			t.Errorf("JSON line lacks %q: %s", k, b)
		}
	}
}

// checkColls checks the collectives of two tasks in l: every operation at
// every size, in mpi_bench.c's order, each timed at least minTimed times
// (every result was checked on both tasks on the way), and a line the
// harness's parser reads with a value in every collective row.
func checkColls(t *testing.T, l *PeerLine) {
	t.Helper()
	if l.CollNP != PeerCollNP || len(l.Coll) != len(PeerCollOps)*len(peerCollSizes) {
		t.Fatalf("collectives of %d: %+v", l.CollNP, l.Coll)
	}
	for i, c := range l.Coll {
		op, size := PeerCollOps[i/len(peerCollSizes)], peerCollSizes[i%len(peerCollSizes)]
		if c.Op != op || c.Size != size || c.US <= 0 || c.Reps < minTimed {
			t.Errorf("collective %d: %+v, want %s of %d bytes", i, c, op, size)
		}
	}
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := peers.ParseLine(b)
	if err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	for _, m := range peers.Metrics {
		_, ok := m.Value(pl)
		if strings.Contains(m.Label, fmt.Sprintf(", %d tasks", PeerCollNP)) && !ok {
			t.Errorf("row %q has no value", m.Label)
		}
	}
}

// TestPeerMeasureRemote: between two daemons, the latency rows and the
// collectives of a task on each daemon.
func TestPeerMeasureRemote(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	l, err := PeerMeasure(ctx, ModeRemote, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	if l.System != SystemRemote || l.Mode != ModeRemote || len(l.Results) != len(DefaultSizes) || l.Spawn != nil {
		t.Fatalf("line %+v", l)
	}
	checkColls(t, l)
}

// TestCollCheck: the results collCheck accepts are those a serial
// computation over both ranks' inputs gives, and one wrong element is
// refused.
func TestCollCheck(t *testing.T) {
	const np, n, iter = 2, 3, 7
	for op, name := range PeerCollOps {
		ins := make([][]float64, np)
		for r := range np {
			ins[r] = collFill(op, r, np, iter, n, make([]float64, n*np))
		}
		for r := range np {
			var want []float64
			switch op {
			case collAllreduce:
				want = slices.Clone(ins[0])
				for i := range want {
					want[i] += ins[1][i]
				}
			case collBcast:
				want = ins[0]
			case collAllgather:
				want = slices.Concat(ins...)
			case collAlltoall:
				for s := range np {
					want = append(want, ins[s][r*n:(r+1)*n]...)
				}
			}
			if !collCheck(op, r, np, iter, n, want) {
				t.Errorf("%s, rank %d: the serial result %v refused", name, r, want)
			}
			bad := slices.Clone(want)
			bad[len(bad)-1]++
			if collCheck(op, r, np, iter, n, bad) || collCheck(op, r, np, iter, n, want[:len(want)-1]) {
				t.Errorf("%s, rank %d: a wrong result accepted", name, r)
			}
		}
	}
}

// TestPeerMeasureQUIC: raw quic-go's line is named quic-go and sits with
// the remote systems; it has no spawn or collectives.
func TestPeerMeasureQUIC(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l, err := PeerMeasure(ctx, ModePeerQUIC, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	if l.System != SystemQUIC || l.Mode != ModeRemote || len(l.Results) != 4 || l.RateMsgsPerS <= 0 || l.Spawn != nil || l.BarrierUS != 0 {
		t.Fatalf("line %+v", l)
	}
}

func TestPeerMeasureBadInput(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		mode  string
		scale float64
	}{{ModeLocal, 0}, {ModeLocal, -1}, {ModeLocal, 11}, {"elsewhere", 1}} {
		if _, err := PeerMeasure(ctx, c.mode, c.scale); !errors.Is(err, ErrOptions) {
			t.Errorf("PeerMeasure(%q, %v) = %v, want ErrOptions", c.mode, c.scale, err)
		}
	}
}
