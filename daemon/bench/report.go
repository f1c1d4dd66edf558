package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Describe says in words what a mode measures.
func Describe(mode string) string {
	switch mode {
	case ModeRemote:
		return "two tasks on two daemons, QUIC over loopback"
	case ModeLocal:
		return "two tasks on one daemon"
	case ModeQUIC:
		return "raw quic-go, one connection and one stream over loopback, echo server"
	}
	return mode
}

func formatRate(r float64) string {
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.2f M/s", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1f k/s", r/1e3)
	}
	return fmt.Sprintf("%.0f /s", r)
}

func formatBW(mbps float64) string {
	if mbps >= 1000 {
		return fmt.Sprintf("%.2f GB/s", mbps/1000)
	}
	return fmt.Sprintf("%.2f MB/s", mbps)
}

func rounds(n int) string {
	if n <= 1 {
		return ""
	}
	return fmt.Sprintf(" (medians of %d rounds)", n)
}

// WriteText prints r as a table.
func WriteText(w io.Writer, r *Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s%s\n", r.Mode, Describe(r.Mode), rounds(r.Rounds))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "size\tone-way\tbandwidth\tCPU per GB\ttimed round trips\t")
	for _, s := range r.Results {
		fmt.Fprintf(tw, "%s\t%.2f µs\t%s\t%.2f s\t%d\t\n", FormatSize(s.Size), s.OnewayUS, formatBW(s.MBps), s.CPUSPerGB, s.Reps)
	}
	tw.Flush()
	what := "one-way 8 B stream"
	if r.Mode == ModeQUIC {
		what = "pipelined 8 B writes"
	}
	fmt.Fprintf(&b, "message rate (%s): %s (%d messages)\n", what, formatRate(r.RateMsgsPerS), r.RateMsgs)
	if r.Spawn32MS > 0 {
		where := "on the other daemon"
		if r.Mode == ModeLocal {
			where = "on the same daemon"
		}
		fmt.Fprintf(&b, "spawn %d tasks %s and hear from each: %.2f ms\n", SpawnTasks, where, r.Spawn32MS)
	}
	if r.Barrier8US > 0 {
		where := "over 2 daemons"
		if r.Mode == ModeLocal {
			where = "on one daemon"
		}
		fmt.Fprintf(&b, "barrier of %d tasks %s: %.1f µs per barrier\n", BarrierTasks, where, r.Barrier8US)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Target is one of the runtime's performance targets and whether a result
// meets it.
type Target struct {
	What string
	Want string
	Got  string
	Met  bool
}

// Targets lists the targets that apply to c: for the remote mode, latency
// within 1.2× and bandwidth at 1 MiB at least 0.8× of raw quic-go, 1 M
// messages/s, spawning 32 tasks within 5 ms and a barrier of 8 within
// 100 µs; for the local mode, 8 B one-way under 1 µs and 1 MiB at 5 GB/s.
func Targets(c *Comparison) []Target {
	var ts []Target
	d := c.DPVM
	switch d.Mode {
	case ModeRemote:
		for _, r := range c.Ratios {
			ts = append(ts, Target{"latency " + FormatSize(r.Size) + " / raw quic-go", "≤ 1.20×",
				fmt.Sprintf("%.2f×", r.Latency), r.Latency <= 1.2})
		}
		for _, r := range c.Ratios {
			if r.Size == 1<<20 {
				ts = append(ts, Target{"bandwidth 1 MiB / raw quic-go", "≥ 0.80×",
					fmt.Sprintf("%.2f×", r.Bandwidth), r.Bandwidth >= 0.8})
			}
		}
		ts = append(ts, Target{"message rate", "≥ 1 M/s", formatRate(d.RateMsgsPerS), d.RateMsgsPerS >= 1e6})
		if d.Spawn32MS > 0 {
			ts = append(ts, Target{"spawn 32 on another daemon", "≤ 5 ms", fmt.Sprintf("%.2f ms", d.Spawn32MS), d.Spawn32MS <= 5})
		}
		if d.Barrier8US > 0 {
			ts = append(ts, Target{"barrier of 8 over 2 daemons", "≤ 100 µs", fmt.Sprintf("%.1f µs", d.Barrier8US), d.Barrier8US <= 100})
		}
	case ModeLocal:
		if s, ok := d.Size(8); ok {
			ts = append(ts, Target{"8 B one-way", "< 1 µs", fmt.Sprintf("%.2f µs", s.OnewayUS), s.OnewayUS < 1})
		}
		if s, ok := d.Size(1 << 20); ok {
			ts = append(ts, Target{"1 MiB bandwidth", "≥ 5 GB/s", formatBW(s.MBps), s.MBps >= 5000})
		}
	}
	return ts
}

// WriteComparison prints c: both tables, the ratios side by side, and the
// targets that apply.
func WriteComparison(w io.Writer, c *Comparison) error {
	var b strings.Builder
	fmt.Fprintf(&b, "dpvm (%s: %s) against raw quic-go, %d alternating round(s), medians\n",
		c.DPVM.Mode, Describe(c.DPVM.Mode), c.Rounds)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "size\tdpvm one-way\tquic one-way\tratio\tdpvm bandwidth\tquic bandwidth\tratio\t")
	for i, r := range c.Ratios {
		d := c.DPVM.Results[i]
		q, _ := c.QUIC.Size(r.Size)
		fmt.Fprintf(tw, "%s\t%.2f µs\t%.2f µs\t%.2f×\t%s\t%s\t%.2f×\t\n", FormatSize(r.Size),
			d.OnewayUS, q.OnewayUS, r.Latency, formatBW(d.MBps), formatBW(q.MBps), r.Bandwidth)
	}
	tw.Flush()
	fmt.Fprintf(&b, "message rate: dpvm %s (one-way 8 B stream), raw quic-go %s (pipelined 8 B writes), ratio %.2f×\n",
		formatRate(c.DPVM.RateMsgsPerS), formatRate(c.QUIC.RateMsgsPerS), c.RateRatio)
	if c.DPVM.Spawn32MS > 0 {
		fmt.Fprintf(&b, "spawn %d tasks and hear from each: %.2f ms\n", SpawnTasks, c.DPVM.Spawn32MS)
	}
	if c.DPVM.Barrier8US > 0 {
		fmt.Fprintf(&b, "barrier of %d tasks: %.1f µs per barrier\n", BarrierTasks, c.DPVM.Barrier8US)
	}
	if ts := Targets(c); len(ts) > 0 {
		b.WriteString("targets:\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		for _, t := range ts {
			mark := "missed"
			if t.Met {
				mark = "met"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", t.What, t.Want, t.Got, mark)
		}
		tw.Flush()
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteMetricsComparison prints the cost of metrics: dpvm without and with
// them, side by side, and the ratios.
func WriteMetricsComparison(w io.Writer, c *MetricsComparison) error {
	var b strings.Builder
	fmt.Fprintf(&b, "dpvm (%s: %s) with metrics against without, %d alternating round(s), medians\n",
		c.On.Mode, Describe(c.On.Mode), c.Rounds)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "size\toff one-way\ton one-way\tratio\toff bandwidth\ton bandwidth\tratio\t")
	for i, r := range c.Ratios {
		on := c.On.Results[i]
		off, _ := c.Off.Size(r.Size)
		fmt.Fprintf(tw, "%s\t%.2f µs\t%.2f µs\t%.3f×\t%s\t%s\t%.3f×\t\n", FormatSize(r.Size),
			off.OnewayUS, on.OnewayUS, r.Latency, formatBW(off.MBps), formatBW(on.MBps), r.Bandwidth)
	}
	tw.Flush()
	fmt.Fprintf(&b, "message rate: off %s, on %s, ratio %.3f×\n",
		formatRate(c.Off.RateMsgsPerS), formatRate(c.On.RateMsgsPerS), c.RateRatio)
	fmt.Fprintf(&b, "spawn %d tasks: off %.2f ms, on %.2f ms; barrier of %d tasks: off %.1f µs, on %.1f µs\n",
		SpawnTasks, c.Off.Spawn32MS, c.On.Spawn32MS, BarrierTasks, c.Off.Barrier8US, c.On.Barrier8US)
	fmt.Fprintf(&b, "messages the metrics counted (sent + received, all daemons): %.0f\n", c.On.MetricsMessages)
	_, err := io.WriteString(w, b.String())
	return err
}
