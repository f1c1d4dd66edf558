package bench

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"
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
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"system", "mode", "results", "rate_msgs_per_s", "spawn", "group_size", "barrier_us", "bcast_us", "reduce_us"} {
		if _, ok := back[k]; !ok {
			t.Errorf("JSON line lacks %q: %s", k, b)
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
