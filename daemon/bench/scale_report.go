package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/dpvm/dpvm/sched/sim"
)

// fmtFig prints a figure, or "-" for one not measured (negative).
func fmtFig(v float64, format string) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// WriteScaleText prints the report: one row per virtual machine, then the
// growth of each cost.
func WriteScaleText(w io.Writer, r *ScaleReport) error {
	fmt.Fprintf(w, "dpvm bench scale — %s\n\n", r.Setup)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "hosts\ttasks\tdetector\tjoin s\trecover s\tspawn s\tspawn/s\tbarrier s\tmove ms\tmaster CPU\tmaster pkts/s\tδT ms\tmaster MiB\tmaster KiB/host\tmaster KiB/task\thost KiB/host\thost KiB/task\tlist ms\tlisted hosts\tstep ms\tstep allocs\tchecks/s\tCPU/check ms\t")
	for _, x := range r.Rows {
		fmt.Fprintf(tw, "%d\t%d\t%s\t%.2f\t%s\t%.2f\t%.0f\t%.2f\t%.1f\t%s\t%s\t%.0f\t%s\t%s\t%s\t%.1f\t%.2f\t%.2f\t%d\t%.2f\t%.0f\t%.1f\t%s\t\n",
			x.Hosts, x.Tasks, x.Detector, x.JoinSeconds, fmtFig(x.RecoverSeconds, "%.2f"), x.SpawnSeconds, x.SpawnRate, x.BarrierSeconds,
			x.MoveMS, fmtFig(x.MasterCPU*100, "%.1f%%"), fmtFig(x.MasterPacketsPerSecond, "%.0f"), x.SchedMS, fmtFig(x.MasterRSSMiB, "%.1f"),
			fmtFig(x.MasterPerHostKiB, "%.1f"), fmtFig(x.MasterPerTaskKiB, "%.2f"), x.HostPerHostKiB, x.HostPerTaskKiB,
			x.ListMS, x.ListedHosts, x.StepMS, x.StepAllocs, x.ChecksPerSecond, fmtFig(x.CheckCPUMS, "%.1f"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Growth) > 0 {
		fmt.Fprintln(w, "\nGrowth (cost ∝ x^k, least squares on log-log axes):")
		tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "cost\talong\tat\tk\tgrowth")
		for _, g := range r.Growth {
			other := "tasks"
			if g.Along == "tasks" {
				other = "hosts"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d %s\t%.2f\t%s\n", g.Cost, g.Along, g.Fixed, other, g.Exponent, g.Class)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// ScaleChart draws each cost against the number of hosts (for the largest
// task count measured at two or more host counts), relative to its value
// on the smallest virtual machine, on log axes: a flat line is a constant
// cost, one that rises as fast as the hosts a linear one.
func ScaleChart(r *ScaleReport) sim.Chart {
	c := sim.Chart{
		Title:  "How each cost grows with the hosts (dpvm bench scale)",
		XLabel: "hosts",
		YLabel: "cost relative to the smallest virtual machine",
		LogY:   true,
	}
	byTasks := map[int][]ScaleRow{}
	for _, x := range r.Rows {
		byTasks[x.Tasks] = append(byTasks[x.Tasks], x)
	}
	m := -1
	for k, rows := range byTasks {
		if len(rows) >= 2 && k > m {
			m = k
		}
	}
	if m < 0 {
		return c
	}
	rows := slices.Clone(byTasks[m])
	slices.SortFunc(rows, func(a, b ScaleRow) int { return a.Hosts - b.Hosts })
	var hx, hy []float64
	for _, x := range rows {
		hx, hy = append(hx, float64(x.Hosts)), append(hy, float64(x.Hosts)/float64(rows[0].Hosts))
	}
	c.Series = append(c.Series, sim.Series{Name: "hosts (linear)", X: hx, Y: hy})
	for _, cost := range scaleCosts {
		base := cost.get(rows[0])
		if base <= 0 {
			continue
		}
		var xs, ys []float64
		for _, x := range rows {
			if v := cost.get(x); v > 0 {
				xs, ys = append(xs, float64(x.Hosts)), append(ys, v/base)
			}
		}
		if len(xs) >= 2 {
			c.Series = append(c.Series, sim.Series{Name: strings.ReplaceAll(cost.name, "_", " "), X: xs, Y: ys})
		}
	}
	c.Title += fmt.Sprintf(", %d tasks", m)
	return c
}

// WriteScaleSVG draws ScaleChart(r) as an SVG document.
func WriteScaleSVG(w io.Writer, r *ScaleReport) error {
	if err := sim.WriteSVG(w, ScaleChart(r)); err != nil {
		return fmt.Errorf("bench scale: plot: %w", err)
	}
	return nil
}
