package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/dpvm/dpvm/daemon"
)

func TestFitExponentAndClass(t *testing.T) {
	xs := []float64{8, 64, 256, 1024}
	for _, c := range []struct {
		f     func(x float64) float64
		k     float64
		class string
	}{
		{func(float64) float64 { return 3 }, 0, "constant"},
		{func(x float64) float64 { return 2 * math.Sqrt(x) }, 0.5, "sublinear"},
		{func(x float64) float64 { return 0.1 * x }, 1, "linear"},
		{func(x float64) float64 { return x * x }, 2, "worse"},
	} {
		var ys []float64
		for _, x := range xs {
			ys = append(ys, c.f(x))
		}
		k := FitExponent(xs, ys)
		if math.Abs(k-c.k) > 1e-9 || GrowthClass(k) != c.class {
			t.Errorf("fit %v: k %v (%s), want %v (%s)", ys, k, GrowthClass(k), c.k, c.class)
		}
	}
	if k := FitExponent([]float64{8}, []float64{1}); !math.IsNaN(k) {
		t.Errorf("one point: %v, want NaN", k)
	}
	if k := FitExponent([]float64{8, 8}, []float64{1, 2}); !math.IsNaN(k) {
		t.Errorf("one distinct x: %v, want NaN", k)
	}
	if k := FitExponent([]float64{8, 64}, []float64{-1, -1}); !math.IsNaN(k) {
		t.Errorf("unmeasured figures: %v, want NaN", k)
	}
}

func TestGrowths(t *testing.T) {
	rows := []ScaleRow{
		{Hosts: 8, Tasks: 100, JoinSeconds: 0.1, MoveMS: 2, RecoverSeconds: -1},
		{Hosts: 64, Tasks: 100, JoinSeconds: 0.8, MoveMS: 2, RecoverSeconds: -1},
		{Hosts: 64, Tasks: 1000, JoinSeconds: 0.8, MoveMS: 2, RecoverSeconds: -1},
	}
	got := map[string]ScaleGrowth{}
	for _, g := range Growths(rows) {
		got[g.Cost+"/"+g.Along] = g
	}
	if g := got["join_seconds/hosts"]; g.Class != "linear" || g.Fixed != 100 {
		t.Errorf("join along hosts: %+v", g)
	}
	if g := got["move_ms/hosts"]; g.Class != "constant" {
		t.Errorf("move along hosts: %+v", g)
	}
	if g := got["join_seconds/tasks"]; g.Class != "constant" || g.Fixed != 64 {
		t.Errorf("join along tasks: %+v", g)
	}
	if _, ok := got["recover_seconds/hosts"]; ok {
		t.Error("a growth fitted to figures never measured")
	}
}

// A small run end to end, with the master in this process: every phase
// happens and gives a figure, and the reports print. 200 tasks, not fewer:
// the memory per task is the growth of this process's heap and stacks,
// and with 40 tasks (their stacks about 320 KiB) the memory the daemons
// freed meanwhile made it negative in about 3 runs in 100.
func TestScaleSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts virtual machines")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Scale(ctx, ScaleOptions{Hosts: []int{2, 4}, Tasks: []int{200}, InProcessMaster: true,
		Heartbeat: 100 * time.Millisecond, Idle: 200 * time.Millisecond, Moves: 3, Wait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rep.Rows))
	}
	for _, r := range rep.Rows {
		if r.JoinSeconds <= 0 || r.SpawnSeconds <= 0 || r.SpawnRate <= 0 || r.BarrierSeconds <= 0 || r.MoveMS <= 0 ||
			r.StepAllocs <= 0 || r.HostPerTaskKiB <= 0 {
			t.Errorf("a figure is missing: %+v", r)
		}
		if r.ChecksPerSecond < 0 || r.ListedHosts < 0 || r.ListedHosts > r.Hosts {
			t.Errorf("scheduler figures out of range: %+v", r)
		}
		if r.MasterCPU >= 0 || r.MasterRSSMiB >= 0 || r.RecoverSeconds >= 0 || r.CheckCPUMS >= 0 {
			t.Errorf("figures of an in-process master or an unasked recovery reported as measured: %+v", r)
		}
	}
	var text bytes.Buffer
	if err := WriteScaleText(&text, rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"hosts  tasks", "join_seconds", "200 tasks", "in this process"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
	var svg bytes.Buffer
	if err := WriteScaleSVG(&svg, rep); err != nil || !strings.Contains(svg.String(), "join seconds") {
		t.Errorf("plot: %v\n%.300s", err, svg.String())
	}
	b, err := json.Marshal(rep)
	if err != nil || !strings.Contains(string(b), `"barrier_seconds"`) {
		t.Errorf("json: %v %s", err, b)
	}
}

// A tiny scale bench under each failure detector, the master in this
// process: each row names its detector, the master's received packets are
// counted over the idle spell, and under swim, where the hosts send the
// master no heartbeats, it receives fewer than under the master detector.
// The heartbeat is short and the scheduler off so that the heartbeats are
// most of what the idle master receives.
func TestScaleDetectors(t *testing.T) {
	if testing.Short() {
		t.Skip("starts virtual machines")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rate := map[string]float64{}
	for _, det := range []string{daemon.DetectorMaster, daemon.DetectorSwim} {
		rep, err := Scale(ctx, ScaleOptions{Hosts: []int{8}, Tasks: []int{100}, InProcessMaster: true, Detector: det,
			Heartbeat: 100 * time.Millisecond, SchedPeriod: -1, Idle: 2 * time.Second, Moves: 2, Wait: time.Minute})
		if err != nil {
			t.Fatalf("%s: %v", det, err)
		}
		if len(rep.Rows) != 1 {
			t.Fatalf("%s: %d rows, want 1", det, len(rep.Rows))
		}
		r := rep.Rows[0]
		if r.Detector != det || r.JoinSeconds <= 0 || r.MoveMS <= 0 || r.MasterPacketsPerSecond < 0 {
			t.Errorf("%s: a figure is missing: %+v", det, r)
		}
		rate[det] = r.MasterPacketsPerSecond
		var text bytes.Buffer
		if err := WriteScaleText(&text, rep); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"detector", "master pkts/s", "detector: " + det} {
			if !strings.Contains(text.String(), want) {
				t.Errorf("%s: text report lacks %q:\n%s", det, want, text.String())
			}
		}
		b, err := json.Marshal(rep)
		if err != nil || !strings.Contains(string(b), `"detector":"`+det+`"`) || !strings.Contains(string(b), `"master_packets_per_second":`) {
			t.Errorf("%s: json: %v %s", det, err, b)
		}
	}
	t.Logf("idle master, packets received per second: %v", rate)
	// 8 hosts each pinging every 100 ms for 2 s: about 160 heartbeats.
	if rate[daemon.DetectorMaster] < 8*5 {
		t.Errorf("the master received %.1f packets/s idle under the master detector, want at least one per host per 200 ms", rate[daemon.DetectorMaster])
	}
	if rate[daemon.DetectorSwim] >= rate[daemon.DetectorMaster] {
		t.Errorf("the master received %.1f packets/s idle under swim, not fewer than under the master detector (%.1f)",
			rate[daemon.DetectorSwim], rate[daemon.DetectorMaster])
	}
}

func TestScaleBadDetector(t *testing.T) {
	_, err := Scale(context.Background(), ScaleOptions{Hosts: []int{2}, Tasks: []int{1}, InProcessMaster: true, Detector: "gossip"})
	if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), "gossip") {
		t.Errorf("detector gossip: %v, want ErrOptions naming it", err)
	}
}

func TestSumCounter(t *testing.T) {
	text := `# HELP dpvm_quic_received_packets_total Packets received.
# TYPE dpvm_quic_received_packets_total counter
dpvm_quic_received_packets_total{peer="s2"} 12
dpvm_quic_received_packets_total{peer="s3"} 3.5e+01
dpvm_quic_received_packets_total_other 100
dpvm_quic_sent_packets_total{peer="s2"} 7
`
	got, err := sumCounter(strings.NewReader(text), "dpvm_quic_received_packets_total")
	if err != nil || got != 47 {
		t.Errorf("sum: %v %v, want 47", got, err)
	}
	if _, err := sumCounter(strings.NewReader("dpvm_quic_received_packets_total{peer=\"s2\"} x\n"), "dpvm_quic_received_packets_total"); err == nil {
		t.Error("a bad sample summed without an error")
	}
}
