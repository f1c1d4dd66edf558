package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// benchSmall bounds a bench run so the test takes a second or so.
var benchSmall = []string{"--reps", "5", "--warmup", "1", "--rate-msgs", "2000", "--max-time", "1s"}

var benchTaskSmall = append([]string{"--rate-window", "128", "--spawn-reps", "1", "--barrier-rounds", "3"}, benchSmall...)

// benchLine is the JSON shape of `dpvm bench pingpong --json` and `dpvm
// bench quic --json`, with every field required.
type benchLine struct {
	Mode    *string `json:"mode"`
	Results []struct {
		Size     *int     `json:"size"`
		OnewayUS *float64 `json:"oneway_us"`
		MBps     *float64 `json:"mbps"`
	} `json:"results"`
	Rate       *float64 `json:"rate_msgs_per_s"`
	Spawn32MS  *float64 `json:"spawn32_ms"`
	Barrier8US *float64 `json:"barrier8_us"`
}

func checkBenchLine(t *testing.T, out, mode string, tasks bool) {
	t.Helper()
	if strings.Count(out, "\n") != 1 {
		t.Fatalf("want one JSON line, got:\n%s", out)
	}
	var l benchLine
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if l.Mode == nil || *l.Mode != mode || l.Rate == nil || *l.Rate <= 0 {
		t.Errorf("mode or rate missing or wrong:\n%s", out)
	}
	wantSizes := []int{8, 1024, 65536, 1 << 20}
	if len(l.Results) != len(wantSizes) {
		t.Fatalf("%d results, want %d:\n%s", len(l.Results), len(wantSizes), out)
	}
	for i, r := range l.Results {
		if r.Size == nil || *r.Size != wantSizes[i] || r.OnewayUS == nil || *r.OnewayUS <= 0 || r.MBps == nil || *r.MBps <= 0 {
			t.Errorf("result %d incomplete:\n%s", i, out)
		}
	}
	if got := l.Spawn32MS != nil && *l.Spawn32MS > 0 && l.Barrier8US != nil && *l.Barrier8US > 0; got != tasks {
		t.Errorf("spawn32_ms and barrier8_us present: %v, want %v:\n%s", got, tasks, out)
	}
}

func TestBenchPingpongJSON(t *testing.T) {
	for _, mode := range []string{"remote", "local"} {
		args := append([]string{"bench", "pingpong", "--json"}, benchTaskSmall...)
		if mode == "local" {
			args = append(args, "--local")
		}
		code, out, errOut := dpvm(t, args...)
		if code != 0 || errOut != "" {
			t.Fatalf("%s: status %d, stderr %q", mode, code, errOut)
		}
		checkBenchLine(t, out, mode, true)
	}
}

func TestBenchQUICJSON(t *testing.T) {
	code, out, errOut := dpvm(t, append([]string{"bench", "quic", "--json"}, benchSmall...)...)
	if code != 0 || errOut != "" {
		t.Fatalf("status %d, stderr %q", code, errOut)
	}
	checkBenchLine(t, out, "quic", false)
}

func TestBenchCompare(t *testing.T) {
	args := append([]string{"bench", "pingpong", "--compare", "--sizes", "8,1K"}, benchTaskSmall...)
	code, out, errOut := dpvm(t, args...)
	if code != 0 || errOut != "" {
		t.Fatalf("status %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"dpvm bench pingpong --compare on ", "against raw quic-go, 1 alternating round(s)",
		"dpvm one-way  quic one-way  ratio", "   8 B ", " 1 KiB ", "message rate: dpvm ", "targets:", "barrier of 8 over 2 daemons"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	code, out, errOut = dpvm(t, append([]string{"bench", "pingpong", "--compare", "--json", "--local", "--sizes", "8"}, benchTaskSmall...)...)
	if code != 0 || errOut != "" {
		t.Fatalf("--json: status %d, stderr %q", code, errOut)
	}
	var c struct {
		DPVM   struct{ Mode string } `json:"dpvm"`
		QUIC   struct{ Mode string } `json:"quic"`
		Ratios []struct {
			Size               int
			Latency, Bandwidth float64
		} `json:"ratios"`
		RateRatio float64 `json:"rate_ratio"`
	}
	if err := json.Unmarshal([]byte(out), &c); err != nil || c.DPVM.Mode != "local" || c.QUIC.Mode != "quic" ||
		len(c.Ratios) != 1 || c.Ratios[0].Size != 8 || c.Ratios[0].Latency <= 0 || c.RateRatio <= 0 {
		t.Errorf("%v:\n%s", err, out)
	}
}

func TestBenchText(t *testing.T) {
	code, out, errOut := dpvm(t, append([]string{"bench", "pingpong", "--local", "--rounds", "2", "--sizes", "8"}, benchTaskSmall...)...)
	if code != 0 || errOut != "" {
		t.Fatalf("status %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"local: two tasks on one daemon (medians of 2 rounds)", "one-way", "message rate (one-way 8 B stream)",
		"spawn 32 tasks on the same daemon", "barrier of 8 tasks on one daemon"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
}

func TestBenchErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"bench", "pingpong", "--sizes", "0"}, `dpvm: bench: bad option: size "0" is not a number of bytes`},
		{[]string{"bench", "pingpong", "--sizes", "8,8"}, "dpvm: bench: bad option: message size 8 is given twice"},
		{[]string{"bench", "quic", "--rounds", "0"}, "dpvm: bench: bad option: --rounds 0: need at least one"},
		{[]string{"bench", "pingpong", "--reps", "-3"}, "dpvm: bench: bad option: reps -3"},
		{[]string{"bench", "quic", "--max-time", "-1s"}, "dpvm: bench: bad option: max time -1s is negative"},
		{[]string{"bench", "quic", "--local"}, "dpvm: flag provided but not defined: -local"},
	}
	for _, c := range cases {
		code, _, errOut := dpvm(t, c.args...)
		if code != 2 || !strings.HasPrefix(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: status %d, stderr %q, want one line starting %q", c.args, code, errOut, c.want)
		}
	}
}

// TestBenchCompareMetrics runs `bench pingpong --compare --metrics`: dpvm
// without and with metrics side by side, the metrics having counted the
// run's messages.
func TestBenchCompareMetrics(t *testing.T) {
	args := append([]string{"bench", "pingpong", "--compare", "--metrics", "--sizes", "8,1K"}, benchTaskSmall...)
	code, out, errOut := dpvm(t, args...)
	if code != 0 || errOut != "" {
		t.Fatalf("status %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"dpvm bench pingpong --compare --metrics on ", "with metrics against without, 1 alternating round(s)",
		"off one-way", "on one-way", "on bandwidth", "   8 B ", " 1 KiB ", "message rate: off ", "messages the metrics counted"} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	code, out, errOut = dpvm(t, append([]string{"bench", "pingpong", "--compare", "--metrics", "--json", "--sizes", "8"}, benchTaskSmall...)...)
	if code != 0 || errOut != "" {
		t.Fatalf("--json: status %d, stderr %q", code, errOut)
	}
	var c struct {
		Off struct {
			Mode            string
			MetricsMessages float64 `json:"metrics_messages"`
		} `json:"off"`
		On struct {
			Mode            string
			MetricsMessages float64 `json:"metrics_messages"`
		} `json:"on"`
		Ratios []struct {
			Size    int
			Latency float64
		} `json:"ratios"`
		RateRatio float64 `json:"rate_ratio"`
	}
	// The stream alone sends 2000 messages one way; the metrics of both
	// daemons count each sent and received.
	if err := json.Unmarshal([]byte(out), &c); err != nil || c.On.Mode != "remote" || c.Off.MetricsMessages != 0 ||
		c.On.MetricsMessages < 2*2000 || len(c.Ratios) != 1 || c.Ratios[0].Latency <= 0 || c.RateRatio <= 0 {
		t.Errorf("%v:\n%s", err, out)
	}
}
