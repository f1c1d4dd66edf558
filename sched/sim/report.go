package sim

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Grid is a load-sharing experiment: every combination of its policies,
// scheduling disciplines, utilisations and coefficients of variation.
type Grid struct {
	Policies []Policy
	Scheds   []Sched
	Utils    []float64
	CAs, CSs []float64
}

// Configs expands the grid over base, in the order policy, discipline, CA,
// CS, utilisation (outermost first). Every run uses base's seed, so all
// points share their random streams (common random numbers).
func (g Grid) Configs(base LoadShareConfig) []LoadShareConfig {
	var out []LoadShareConfig
	for _, p := range g.Policies {
		for _, s := range g.Scheds {
			for _, ca := range g.CAs {
				for _, cs := range g.CSs {
					for _, u := range g.Utils {
						c := base
						c.Policy, c.Sched, c.CA, c.CS, c.Util = p, s, ca, cs, u
						out = append(out, c)
					}
				}
			}
		}
	}
	return out
}

// WriteTable prints results as an aligned text table.
func WriteTable(w io.Writer, rs []LoadShareResult) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tsched\tutil\tCa\tCs\tmean response\t±95%\ttransfers/job\tprobes/job\tCPU busy\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%g\t%g\t%.4f\t%.4f\t%.3f\t%.3f\t%.3f\t\n",
			r.Policy, r.Sched, r.Util, r.CA, r.CS, r.MeanResponse, r.CI95, r.TransferRate, r.ProbesPerJob, r.MeasuredUtil)
	}
	return tw.Flush()
}

// WriteCSV prints results as CSV with a header row.
func WriteCSV(w io.Writer, rs []LoadShareResult) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"policy", "sched", "util", "ca", "cs", "mean_response", "ci95", "jobs", "transfer_rate", "probes_per_job", "measured_util", "events"})
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 8, 64) }
	for _, r := range rs {
		cw.Write([]string{string(r.Policy), string(r.Sched), f(r.Util), f(r.CA), f(r.CS), f(r.MeanResponse), f(r.CI95),
			strconv.FormatInt(r.Jobs, 10), f(r.TransferRate), f(r.ProbesPerJob), f(r.MeasuredUtil), strconv.FormatInt(r.Events, 10)})
	}
	cw.Flush()
	return cw.Error()
}

// seriesName is "SI" or "SI-FCFS" (when disciplines differ), with the
// fixed non-axis CVs appended when those vary too.
func seriesName(r LoadShareResult, withSched bool, extra string) string {
	n := strings.ToUpper(string(r.Policy))
	if withSched {
		n += "-" + strings.ToUpper(string(r.Sched))
	}
	return n + extra
}

// ChartFor draws results against the grid dimension that varies
// (utilisation, then inter-arrival CV, then service CV); each policy and
// discipline, and each value of any other varying dimension, is a series.
func ChartFor(g Grid, rs []LoadShareResult, title string) (Chart, error) {
	axis := "util"
	switch {
	case len(g.Utils) > 1:
	case len(g.CAs) > 1:
		axis = "ca"
	case len(g.CSs) > 1:
		axis = "cs"
	}
	c := Chart{Title: title, YLabel: "mean response time"}
	switch axis {
	case "util":
		c.XLabel = "system utilization"
	case "ca":
		c.XLabel = "inter-arrival time CV"
	case "cs":
		c.XLabel = "service time CV"
	}
	idx := map[string]int{}
	withSched := len(g.Scheds) > 1
	for _, r := range rs {
		var x float64
		extra := ""
		switch axis {
		case "util":
			x = r.Util
			if len(g.CAs) > 1 {
				extra += fmt.Sprintf(" Ca=%g", r.CA)
			}
			if len(g.CSs) > 1 {
				extra += fmt.Sprintf(" Cs=%g", r.CS)
			}
		case "ca":
			x = r.CA
			if len(g.CSs) > 1 {
				extra += fmt.Sprintf(" Cs=%g", r.CS)
			}
		case "cs":
			x = r.CS
		}
		name := seriesName(r, withSched, extra)
		i, ok := idx[name]
		if !ok {
			i = len(c.Series)
			idx[name] = i
			c.Series = append(c.Series, Series{Name: name})
		}
		c.Series[i].X = append(c.Series[i].X, x)
		c.Series[i].Y = append(c.Series[i].Y, r.MeanResponse)
		c.Series[i].Err = append(c.Series[i].Err, r.CI95)
	}
	if len(c.Series) == 0 {
		return Chart{}, fmt.Errorf("%w: no results to plot", ErrBadConfig)
	}
	return c, nil
}

// Crossovers reports, for each discipline and CV pair in rs, the
// utilisation at which the receiver-initiated policy (ri, or ri-reinit when
// ri is absent) becomes better than sender-initiated sharing.
func Crossovers(rs []LoadShareResult) []string {
	type key struct {
		s      Sched
		ca, cs float64
	}
	si := map[key][]LoadShareResult{}
	ri := map[key][]LoadShareResult{}
	rire := map[key][]LoadShareResult{}
	var keys []key
	for _, r := range rs {
		k := key{r.Sched, r.CA, r.CS}
		switch r.Policy {
		case SI:
			if len(si[k]) == 0 {
				keys = append(keys, k)
			}
			si[k] = append(si[k], r)
		case RI:
			ri[k] = append(ri[k], r)
		case RIReinit:
			rire[k] = append(rire[k], r)
		}
	}
	var out []string
	for _, k := range keys {
		for _, other := range []struct {
			name string
			rs   []LoadShareResult
		}{{"ri", ri[k]}, {"ri-reinit", rire[k]}} {
			a, b := si[k], other.rs
			if len(b) != len(a) || len(a) < 2 {
				continue
			}
			xs, ya, yb := make([]float64, len(a)), make([]float64, len(a)), make([]float64, len(a))
			for i := range a {
				xs[i], ya[i], yb[i] = a[i].Util, a[i].MeanResponse, b[i].MeanResponse
			}
			where := fmt.Sprintf("%s Ca=%g Cs=%g", k.s, k.ca, k.cs)
			if x, ok := Crossover(xs, ya, yb); ok {
				out = append(out, fmt.Sprintf("%s becomes better than si at utilization %.3f (%s)", other.name, x, where))
			} else {
				out = append(out, fmt.Sprintf("%s never becomes better than si in %.2f..%.2f (%s)", other.name, xs[0], xs[len(xs)-1], where))
			}
		}
	}
	return out
}
